//! The conversations of a routing run: tenants with long system prompts and
//! multi-turn chats that resend their whole history, so that a router which
//! keeps a tenant (and a conversation) on one pod finds its prefix in that
//! pod's cache.
//!
//! Everything here is pure: a [`Generator`] gives the same conversations
//! for the same seed, and a request body depends only on the conversation,
//! the turn and the answers received so far.

use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;

use crate::workload::WORDS;

/// Bytes per token, as the simulator counts them: a rendered prompt of `b`
/// bytes is `ceil(b / 4)` tokens.
pub const BYTES_PER_TOKEN: usize = 4;

/// Who shares which prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Every tenant equally likely; a tenant's conversations share its system prompt.
    Shared,
    /// Tenant 0 half of the time, the others sharing the other half.
    Skewed,
    /// Every conversation starts with its own prompt: nothing to share (control).
    NoSharing,
}

impl WorkloadKind {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Shared => "shared",
            WorkloadKind::Skewed => "skewed",
            WorkloadKind::NoSharing => "no-sharing",
        }
    }
}

/// The shape of the conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConversationSpec {
    /// Who shares which prefix.
    pub kind: WorkloadKind,
    /// Tenants, each with its own system prompt (ignored by `no-sharing`).
    pub tenants: usize,
    /// Length of a system prompt, in tokens.
    pub system_tokens: u32,
    /// Length of a user message, in tokens.
    pub user_tokens: u32,
    /// Requests per conversation.
    pub turns: u32,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// One conversation: a system prompt and the user message of every turn;
/// the assistant messages are whatever the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// Sequence number (from 0) within its generator.
    pub id: u64,
    /// The tenant whose system prompt it starts with (`None` for `no-sharing`).
    pub tenant: Option<usize>,
    /// The system prompt (shared with the tenant's other conversations).
    pub system: Arc<str>,
    /// The user message of each turn.
    pub users: Vec<String>,
}

impl Conversation {
    /// Requests in the conversation.
    pub fn turns(&self) -> usize {
        self.users.len()
    }

    /// The messages of turn `turn` (from 0): the system prompt, then every
    /// earlier user message followed by its answer from `answers`, then this
    /// turn's user message.
    pub fn messages(&self, turn: usize, answers: &[String]) -> Vec<Message> {
        let turn = turn.min(self.users.len().saturating_sub(1));
        let mut messages = Vec::with_capacity(2 * turn + 2);
        messages.push(Message {
            role: "system",
            content: self.system.to_string(),
        });
        for (i, user) in self.users.iter().enumerate().take(turn + 1) {
            messages.push(Message {
                role: "user",
                content: user.clone(),
            });
            if i < turn {
                messages.push(Message {
                    role: "assistant",
                    content: answers.get(i).cloned().unwrap_or_default(),
                });
            }
        }
        messages
    }

    /// The streamed chat-completions body of turn `turn`, asking for usage
    /// (with the cached-token count) in the last chunk.
    pub fn body(&self, model: &str, turn: usize, answers: &[String], max_tokens: u32) -> Bytes {
        let body = json!({
            "model": model,
            "messages": self.messages(turn, answers),
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        Bytes::from(body.to_string())
    }
}

/// The prompt as the simulator renders it: each message's content followed by `\n`.
pub fn render(messages: &[Message]) -> String {
    let mut text = String::new();
    for m in messages {
        text.push_str(&m.content);
        text.push('\n');
    }
    text
}

/// Tokens of a rendered prompt of `bytes` bytes.
pub fn estimate_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

/// Exactly `bytes` bytes of text: `head`, then random common words.
fn filler(head: &str, bytes: usize, rng: &mut impl Rng) -> String {
    let mut text = String::with_capacity(bytes + 8);
    text.push_str(head);
    while text.len() < bytes {
        text.push(' ');
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    text.truncate(bytes.max(1));
    text
}

/// Content bytes of a message of `tokens` tokens (its `\n` makes up the rest).
fn content_bytes(tokens: u32) -> usize {
    (tokens as usize * BYTES_PER_TOKEN).saturating_sub(1).max(1)
}

/// Draws conversations.
#[derive(Debug)]
pub struct Generator {
    spec: ConversationSpec,
    systems: Vec<Arc<str>>,
    rng: StdRng,
    next_id: u64,
}

impl Generator {
    /// A generator for `spec`; the tenants' system prompts and every draw
    /// follow from `seed`.
    pub fn new(spec: ConversationSpec, seed: u64) -> Generator {
        let tenants = match spec.kind {
            WorkloadKind::NoSharing => 0,
            _ => spec.tenants.max(1),
        };
        let systems = (0..tenants)
            .map(|t| {
                // Each tenant has its own stream, so adding tenants keeps the others' prompts.
                let mut rng = StdRng::seed_from_u64(seed ^ (0x5eed_0000_0000 + t as u64));
                Arc::from(filler(
                    &format!("tenant-{t} system prompt, seed {seed}:"),
                    content_bytes(spec.system_tokens),
                    &mut rng,
                ))
            })
            .collect();
        Generator {
            spec,
            systems,
            rng: StdRng::seed_from_u64(seed),
            next_id: 0,
        }
    }

    /// The settings.
    pub fn spec(&self) -> &ConversationSpec {
        &self.spec
    }

    /// The system prompt of each tenant.
    pub fn system_prompts(&self) -> &[Arc<str>] {
        &self.systems
    }

    /// The next conversation.
    pub fn next_conversation(&mut self) -> Conversation {
        let id = self.next_id;
        self.next_id += 1;
        let tenant = self.pick_tenant();
        let system = match tenant {
            Some(t) => Arc::clone(&self.systems[t]),
            None => Arc::from(filler(
                &format!("conversation-{id} own prompt:"),
                content_bytes(self.spec.system_tokens),
                &mut self.rng,
            )),
        };
        let users = (0..self.spec.turns.max(1))
            .map(|turn| {
                filler(
                    &format!("conversation-{id} turn-{turn}:"),
                    content_bytes(self.spec.user_tokens),
                    &mut self.rng,
                )
            })
            .collect();
        Conversation {
            id,
            tenant,
            system,
            users,
        }
    }

    fn pick_tenant(&mut self) -> Option<usize> {
        let n = self.systems.len();
        match self.spec.kind {
            WorkloadKind::NoSharing => None,
            WorkloadKind::Shared => Some(self.rng.random_range(0..n)),
            WorkloadKind::Skewed if n == 1 => Some(0),
            WorkloadKind::Skewed => Some(if self.rng.random_bool(0.5) {
                0
            } else {
                self.rng.random_range(1..n)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> ConversationSpec {
        ConversationSpec {
            kind,
            tenants: 8,
            system_tokens: 1000,
            user_tokens: 50,
            turns: 4,
        }
    }

    fn common_prefix(a: &str, b: &str) -> usize {
        a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn the_same_seed_gives_the_same_conversations() {
        let draw = |seed| {
            let mut g = Generator::new(spec(WorkloadKind::Shared), seed);
            (0..20).map(|_| g.next_conversation()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn prompts_have_the_requested_sizes() {
        let mut g = Generator::new(spec(WorkloadKind::Shared), 1);
        let c = g.next_conversation();
        let system = render(&c.messages(0, &[])[..1]);
        assert_eq!(estimate_tokens(system.len()), 1000);
        assert_eq!(estimate_tokens(c.users[0].len() + 1), 50);
        assert_eq!(c.turns(), 4);
        assert_eq!(estimate_tokens(render(&c.messages(0, &[])).len()), 1050);
    }

    #[test]
    fn the_history_grows_with_every_turn() {
        let mut g = Generator::new(spec(WorkloadKind::Shared), 1);
        let c = g.next_conversation();
        let answers: Vec<String> = (0..4).map(|i| format!("answer {i}")).collect();
        for turn in 0..c.turns() {
            let messages = c.messages(turn, &answers);
            assert_eq!(messages.len(), 2 * turn + 2);
            assert_eq!(messages[0].role, "system");
            assert_eq!(messages.last().unwrap().role, "user");
            assert_eq!(messages.last().unwrap().content, c.users[turn]);
            if turn > 0 {
                assert_eq!(messages[2 * turn].role, "assistant");
                assert_eq!(messages[2 * turn].content, answers[turn - 1]);
                // Each turn resends the previous prompt and its answer first.
                let previous = render(&c.messages(turn - 1, &answers));
                let expected = format!("{previous}{}\n", answers[turn - 1]);
                let rendered = render(&messages);
                assert!(rendered.starts_with(&expected));
                assert!(rendered.len() > expected.len());
            }
        }
        let body: serde_json::Value =
            serde_json::from_slice(&c.body("m", 2, &answers, 16)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["max_tokens"], 16);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["messages"].as_array().unwrap().len(), 6);
        assert_eq!(body["messages"][4]["content"], "answer 1");
    }

    #[test]
    fn tenants_share_their_prompt_and_nothing_else() {
        let mut g = Generator::new(spec(WorkloadKind::Shared), 3);
        let systems = g.system_prompts().to_vec();
        assert_eq!(systems.len(), 8);
        for (i, a) in systems.iter().enumerate() {
            for b in &systems[i + 1..] {
                // Less than one 16-token cache block in common.
                assert!(common_prefix(a, b) < 16 * BYTES_PER_TOKEN);
            }
        }
        let mut seen = [0u32; 8];
        for _ in 0..800 {
            let c = g.next_conversation();
            let t = c.tenant.unwrap();
            seen[t] += 1;
            assert!(Arc::ptr_eq(&c.system, &systems[t]));
        }
        assert!(seen.iter().all(|&n| (60..=140).contains(&n)), "{seen:?}");
    }

    #[test]
    fn skewed_sends_half_of_the_conversations_to_tenant_zero() {
        let mut g = Generator::new(spec(WorkloadKind::Skewed), 5);
        let mut seen = [0u32; 8];
        for _ in 0..10_000 {
            seen[g.next_conversation().tenant.unwrap()] += 1;
        }
        let share = f64::from(seen[0]) / 10_000.0;
        assert!((0.47..=0.53).contains(&share), "{share}");
        // The other seven split the rest evenly (1/14 each).
        for &n in &seen[1..] {
            let share = f64::from(n) / 10_000.0;
            assert!((0.055..=0.09).contains(&share), "{seen:?}");
        }
        let mut one = Generator::new(
            ConversationSpec {
                tenants: 1,
                ..spec(WorkloadKind::Skewed)
            },
            5,
        );
        assert!((0..50).all(|_| one.next_conversation().tenant == Some(0)));
    }

    #[test]
    fn no_sharing_prompts_are_all_distinct() {
        let mut g = Generator::new(spec(WorkloadKind::NoSharing), 9);
        assert!(g.system_prompts().is_empty());
        let conversations: Vec<_> = (0..50).map(|_| g.next_conversation()).collect();
        for (i, a) in conversations.iter().enumerate() {
            assert_eq!(a.tenant, None);
            assert_eq!(estimate_tokens(a.system.len() + 1), 1000);
            for b in &conversations[i + 1..] {
                assert!(common_prefix(&a.system, &b.system) < 16 * BYTES_PER_TOKEN);
            }
        }
    }
}
