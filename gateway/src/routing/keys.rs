//! Routing keys: which conversation or which shared prompt prefix a request
//! belongs to, derived from its headers and JSON body.

use std::borrow::Cow;

use crate::extract::RawJson;
use http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};

use super::messages::{first_document, walk_messages, walk_prompt, Flow, MessageHandler, Role};
use super::text::{normalized_key, short_key, Normalizer};

/// Header naming the client's session; the strongest session signal.
pub static SESSION_ID_HEADER: HeaderName = HeaderName::from_static("x-session-id");
/// Header naming the conversation, for clients that say conversation rather
/// than session.
pub static CONVERSATION_ID_HEADER: HeaderName = HeaderName::from_static("x-conversation-id");
/// Header with an explicit prefix-cache key, for clients that know which
/// requests share a prompt prefix better than any heuristic.
pub static CACHE_KEY_HEADER: HeaderName = HeaderName::from_static("x-flexinfer-cache-key");

/// How many leading messages identify a conversation for session affinity.
pub const SESSION_HASH_MESSAGES: usize = 5;
/// Bytes of each message's text that go into the session hash. Conversations
/// whose first messages agree on this much are the same conversation for
/// routing purposes; the cap keeps a pasted document from costing a hash of
/// its full length on every turn.
pub const SESSION_HASH_MESSAGE_BYTES: usize = 8 * 1024;
/// How many leading system messages make up the canonical prefix.
pub const MAX_SYSTEM_SEGMENTS: usize = 3;
/// Default for the longest explicit cache key accepted.
pub const DEFAULT_EXPLICIT_KEY_MAX_LEN: usize = 128;
/// Default (`PROXY_ROUTING_SYSTEM_SEGMENT_MAX_LENGTH`) for the
/// characters of each system message in the canonical prefix.
pub const DEFAULT_SYSTEM_SEGMENT_MAX_LEN: usize = 512;
/// Default (`PROXY_ROUTING_DOCUMENT_SEGMENT_MAX_LENGTH`) for the
/// characters of document context in the canonical prefix.
pub const DEFAULT_DOCUMENT_SEGMENT_MAX_LEN: usize = 256;
/// Characters of the first user message (or completion prompt) that key a
/// request with no system prompt and no document.
pub const DEFAULT_FIRST_TURN_MAX_LEN: usize = 512;

/// Length limits for prefix keys, overridable by config; the defaults are the
/// `DEFAULT_*` constants above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLimits {
    /// Longest explicit cache key (header or body) accepted; longer ones are
    /// ignored rather than truncated, since a truncated key could merge
    /// unrelated prefixes.
    pub explicit_key_max_len: usize,
    /// Characters kept of each system message, and of the legacy `prefix`
    /// field. Differences further in do not change the pod.
    pub system_segment_max_len: usize,
    /// Characters kept of the document context.
    pub document_segment_max_len: usize,
    /// Characters kept of the first user message or completion prompt.
    pub first_turn_max_len: usize,
}

impl KeyLimits {
    /// The default limits, usable in constants.
    pub const DEFAULT: KeyLimits = KeyLimits {
        explicit_key_max_len: DEFAULT_EXPLICIT_KEY_MAX_LEN,
        system_segment_max_len: DEFAULT_SYSTEM_SEGMENT_MAX_LEN,
        document_segment_max_len: DEFAULT_DOCUMENT_SEGMENT_MAX_LEN,
        first_turn_max_len: DEFAULT_FIRST_TURN_MAX_LEN,
    };
}

impl Default for KeyLimits {
    fn default() -> Self {
        KeyLimits::DEFAULT
    }
}

/// The routing-relevant fields of a JSON request body, borrowed from the body
/// that the extraction step parsed once; `None` for an absent field.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoutingInputs<'a> {
    /// Body `session_id`.
    pub session_id: Option<&'a str>,
    /// Body `cache_key` (or `cacheKey`): an explicit prefix-cache key.
    pub cache_key: Option<&'a str>,
    /// Body `prefix`: the legacy way to name a shared prompt prefix.
    pub prefix: Option<&'a str>,
    /// Body `messages` of a chat request, left unparsed so that only the few
    /// messages a key needs are ever read.
    pub messages: Option<RawJson<'a>>,
    /// Body `prompt` of a completion request, unparsed.
    pub prompt: Option<RawJson<'a>>,
    /// Document context: body `document_context`, `documentContext` or
    /// `context`, else the `content`, `text` or `value` of `documents[0]`
    /// (see [`document_text`]).
    pub document_context: Option<&'a str>,
}

/// The text of a body's `documents[0]` (its `content`, `text` or `value`,
/// else the element itself when it is a string), for
/// [`RoutingInputs::document_context`] when the body has no direct document
/// field. Reads only the first element; borrowed unless it has escapes;
/// `None` for any other shape.
pub fn document_text(documents: RawJson<'_>) -> Option<Cow<'_, str>> {
    first_document(documents)
}

/// Where a routing key came from; the `key_source` label of routing metrics,
/// so operators can see which signal drives affinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// No key: the request was balanced without affinity.
    None,
    /// `X-Session-ID` header.
    SessionHeader,
    /// `X-Conversation-ID` header.
    ConversationHeader,
    /// Body `session_id`.
    SessionBody,
    /// Hash of the conversation's first messages.
    SessionMessages,
    /// `X-Flexinfer-Cache-Key` header.
    ExplicitHeader,
    /// Body `cache_key` / `cacheKey`.
    ExplicitBody,
    /// Legacy body `prefix`.
    PrefixField,
    /// Hash of the normalised prompt prefix.
    Canonical,
    /// Prefix routing with no prefix key, using the session key instead.
    SessionFallback,
}

impl KeySource {
    /// How many sources there are; `source as usize` is below it.
    pub const COUNT: usize = KeySource::SessionFallback as usize + 1;

    /// The metrics label value.
    pub const fn as_str(&self) -> &'static str {
        match self {
            KeySource::None => "none",
            KeySource::SessionHeader => "session-header",
            KeySource::ConversationHeader => "conversation-header",
            KeySource::SessionBody => "session-body",
            KeySource::SessionMessages => "session-messages",
            KeySource::ExplicitHeader => "explicit-header",
            KeySource::ExplicitBody => "explicit-body",
            KeySource::PrefixField => "prefix-field",
            KeySource::Canonical => "canonical",
            KeySource::SessionFallback => "session-fallback",
        }
    }
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The session key for session-affinity routing, first match wins:
/// `X-Session-ID`, `X-Conversation-ID`, body `session_id` (each used as is,
/// trimmed; blank or non-ASCII header values are skipped), then
/// `"msg:"` + 16 hex digits of SHA-256 over the text of the first
/// [`SESSION_HASH_MESSAGES`] messages, so a conversation stays on its pod
/// with no client cooperation. Text is the string content or the
/// concatenated text parts (the two forms hash alike); images and other parts
/// are left out. `None` when there is no signal or `messages` is malformed.
pub fn session_key(headers: &HeaderMap, body: &RoutingInputs<'_>) -> Option<(String, KeySource)> {
    if let Some(id) = header_text(headers, &SESSION_ID_HEADER) {
        return Some((id.to_owned(), KeySource::SessionHeader));
    }
    if let Some(id) = header_text(headers, &CONVERSATION_ID_HEADER) {
        return Some((id.to_owned(), KeySource::ConversationHeader));
    }
    if let Some(id) = body.session_id.map(str::trim).filter(|id| !id.is_empty()) {
        return Some((id.to_owned(), KeySource::SessionBody));
    }
    let messages = body.messages?;
    let mut digest = SessionDigest::default();
    if !walk_messages(messages, &mut digest) || !digest.has_text {
        return None;
    }
    Some((short_key("msg:", digest.hasher), KeySource::SessionMessages))
}

/// The prefix key for prefix routing with the default limits; see
/// [`prefix_key_with_limits`].
pub fn prefix_key(headers: &HeaderMap, body: &RoutingInputs<'_>) -> Option<(String, KeySource)> {
    prefix_key_with_limits(headers, body, &KeyLimits::DEFAULT)
}

/// The prefix key for prefix routing, first match wins:
///
/// 1. `X-Flexinfer-Cache-Key`, then body `cache_key`: trimmed, lower-cased,
///    at most `explicit_key_max_len` characters of `[A-Za-z0-9._:/=-]`
///    (anything else is ignored, not an error) → `"exp:"` + hash.
/// 2. Body `prefix` → `"pfx:"` + hash of it normalised (lower-cased,
///    whitespace collapsed, cut to `system_segment_max_len`).
/// 3. The canonical key: the leading run of up to [`MAX_SYSTEM_SEGMENTS`]
///    system (or developer) messages, each normalised and cut, plus the
///    normalised document context → `"sys:"` + hash; a blank system message
///    gives no key. With neither, the normalised start of the first user
///    message (`"usr:"`) or of the completion prompt (`"prm:"`), so requests
///    opening the same way share a pod too, unless the client names its
///    session (`X-Session-ID`, `X-Conversation-ID`, body `session_id`):
///    then that session keys it, as step 4.
/// 4. The session key ([`session_key`]), reported as
///    [`KeySource::SessionFallback`].
///
/// Only the leading system messages count, not later ones: they are what a
/// prefix cache can reuse, and stopping at the first other message keeps the
/// cost independent of the conversation's length.
pub fn prefix_key_with_limits(
    headers: &HeaderMap,
    body: &RoutingInputs<'_>,
    limits: &KeyLimits,
) -> Option<(String, KeySource)> {
    if let Some(key) = headers
        .get(&CACHE_KEY_HEADER)
        .and_then(|value| explicit_key(value.as_bytes(), limits.explicit_key_max_len))
    {
        return Some((key, KeySource::ExplicitHeader));
    }
    if let Some(key) = body
        .cache_key
        .and_then(|value| explicit_key(value.as_bytes(), limits.explicit_key_max_len))
    {
        return Some((key, KeySource::ExplicitBody));
    }
    if let Some(key) = body
        .prefix
        .and_then(|prefix| normalized_key("pfx:", b"", prefix, limits.system_segment_max_len))
    {
        return Some((key, KeySource::PrefixField));
    }
    let session = || session_key(headers, body);
    match canonical_key(body, limits) {
        Some(Canonical::Prefix(key)) => return Some((key, KeySource::Canonical)),
        Some(Canonical::FirstTurn(key)) => {
            // No system prompt: a session the client names keys the
            // request, as in the original; the first turn only without one.
            let named = session().filter(|(_, source)| {
                matches!(
                    source,
                    KeySource::SessionHeader
                        | KeySource::ConversationHeader
                        | KeySource::SessionBody
                )
            });
            return Some(match named {
                Some((key, _)) => (key, KeySource::SessionFallback),
                None => (key, KeySource::Canonical),
            });
        }
        None => {}
    }
    session().map(|(key, _)| (key, KeySource::SessionFallback))
}

/// A header's value when it is visible ASCII and not blank.
fn header_text<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)?
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// `"exp:"` + hash of a valid explicit cache key, lower-cased.
fn explicit_key(raw: &[u8], max_len: usize) -> Option<String> {
    let value = raw.trim_ascii();
    let valid = !value.is_empty()
        && value.len() <= max_len
        && value.iter().all(|&b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'=' | b'-')
        });
    if !valid {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut buf = [0u8; 64];
    for chunk in value.chunks(buf.len()) {
        let lower = &mut buf[..chunk.len()];
        lower.copy_from_slice(chunk);
        lower.make_ascii_lowercase();
        hasher.update(&*lower);
    }
    Some(short_key("exp:", hasher))
}

/// Hashes the text of the first messages of a conversation.
#[derive(Default)]
struct SessionDigest {
    hasher: Sha256,
    messages: usize,
    bytes_in_message: usize,
    has_text: bool,
}

impl MessageHandler for SessionDigest {
    fn wants(&mut self, _role: Option<Role>) -> bool {
        true
    }

    fn text(&mut self, text: &str) {
        let room = SESSION_HASH_MESSAGE_BYTES - self.bytes_in_message;
        let taken = &text.as_bytes()[..text.len().min(room)];
        self.hasher.update(taken);
        self.bytes_in_message += taken.len();
        self.has_text |= !taken.is_empty();
    }

    fn end_message(&mut self, _role: Option<Role>) -> Flow {
        // A separator, so that moving text between messages changes the key.
        self.hasher.update([0x1e]);
        self.bytes_in_message = 0;
        self.messages += 1;
        if self.messages >= SESSION_HASH_MESSAGES {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// The canonical key (step 3 of [`prefix_key_with_limits`]), if any.
/// A canonical key: of the system prompt or document, or only of the
/// first turn (neither is there).
enum Canonical {
    Prefix(String),
    FirstTurn(String),
}

fn canonical_key(body: &RoutingInputs<'_>, limits: &KeyLimits) -> Option<Canonical> {
    let mut digest = PrefixDigest::new(limits);
    if let Some(messages) = body.messages {
        if !walk_messages(messages, &mut digest) {
            // A malformed array contributes nothing; the document may still key.
            digest = PrefixDigest::new(limits);
        } else if digest.blank_system {
            return None;
        }
    }
    let document = body.document_context.unwrap_or("");
    if digest.system_segments() > 0 || document.chars().any(|c| !c.is_whitespace()) {
        let mut system = digest.system;
        system.update(b"|doc=");
        let mut norm = Normalizer::new(limits.document_segment_max_len);
        norm.push(document, &mut system);
        norm.finish(&mut system);
        return Some(Canonical::Prefix(short_key("sys:", system)));
    }
    if let Outcome::User(chars) = digest.outcome {
        return (chars > 0).then(|| Canonical::FirstTurn(short_key("usr:", digest.user)));
    }
    let prompt = body.prompt.filter(|_| body.messages.is_none())?;
    let mut hasher = Sha256::new();
    hasher.update(b"prompt=");
    let mut norm = Normalizer::new(limits.first_turn_max_len);
    let ok = walk_prompt(prompt, &mut |text| norm.push(text, &mut hasher));
    norm.finish(&mut hasher);
    (ok && norm.emitted() > 0).then(|| Canonical::FirstTurn(short_key("prm:", hasher)))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Skip,
    System,
    User,
}

#[derive(Clone, Copy)]
enum Outcome {
    None,
    /// Leading system segments hashed so far.
    System(usize),
    /// First user message hashed, with this many normalised characters.
    User(usize),
}

/// Hashes the canonical prefix of a chat while its messages stream by.
struct PrefixDigest {
    limits: KeyLimits,
    /// `system=` + segments joined by a space (+ `|doc=` + document, later).
    system: Sha256,
    /// `user=` + the first user message.
    user: Sha256,
    norm: Normalizer,
    /// What the current message's text feeds, once decided.
    current: Option<Target>,
    outcome: Outcome,
    /// Past the leading run of system messages.
    past_leading: bool,
    blank_system: bool,
}

impl PrefixDigest {
    fn new(limits: &KeyLimits) -> Self {
        let mut system = Sha256::new();
        system.update(b"system=");
        let mut user = Sha256::new();
        user.update(b"user=");
        PrefixDigest {
            limits: *limits,
            system,
            user,
            norm: Normalizer::new(0),
            current: None,
            outcome: Outcome::None,
            past_leading: false,
            blank_system: false,
        }
    }

    fn system_segments(&self) -> usize {
        match self.outcome {
            Outcome::System(n) => n,
            _ => 0,
        }
    }
}

impl MessageHandler for PrefixDigest {
    fn wants(&mut self, role: Option<Role>) -> bool {
        if let Some(target) = self.current {
            return target != Target::Skip;
        }
        let target = match role {
            // Content before role: have it buffered, decide once the role is in.
            None => return false,
            Some(Role::System) if !self.past_leading => {
                if self.system_segments() > 0 {
                    self.system.update(b" ");
                }
                self.norm = Normalizer::new(self.limits.system_segment_max_len);
                Target::System
            }
            Some(Role::User) if self.system_segments() == 0 => {
                self.norm = Normalizer::new(self.limits.first_turn_max_len);
                Target::User
            }
            Some(_) => Target::Skip,
        };
        self.current = Some(target);
        target != Target::Skip
    }

    fn text(&mut self, text: &str) {
        match self.current {
            Some(Target::System) => self.norm.push(text, &mut self.system),
            Some(Target::User) => self.norm.push(text, &mut self.user),
            Some(Target::Skip) | None => {}
        }
    }

    fn end_message(&mut self, role: Option<Role>) -> Flow {
        let target = self.current.take().unwrap_or(Target::Skip);
        match role {
            Some(Role::System) if !self.past_leading => {
                if target == Target::System {
                    self.norm.finish(&mut self.system);
                }
                if target != Target::System || self.norm.emitted() == 0 {
                    self.blank_system = true;
                    return Flow::Stop;
                }
                let segments = self.system_segments() + 1;
                self.outcome = Outcome::System(segments);
                if segments >= MAX_SYSTEM_SEGMENTS {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            }
            Some(Role::User) if target == Target::User => {
                self.norm.finish(&mut self.user);
                self.outcome = Outcome::User(self.norm.emitted());
                Flow::Stop
            }
            _ => {
                self.past_leading = true;
                if self.system_segments() > 0 {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn raw(json: &str) -> RawJson<'static> {
        RawJson::new(Box::leak(json.to_owned().into_boxed_str()))
    }

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert((*name).clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn session_of(h: &HeaderMap, body: &RoutingInputs<'_>) -> Option<(String, KeySource)> {
        session_key(h, body)
    }

    fn chat(messages: RawJson<'_>) -> RoutingInputs<'_> {
        RoutingInputs {
            messages: Some(messages),
            ..RoutingInputs::default()
        }
    }

    fn canonical(messages: &str) -> Option<(String, KeySource)> {
        let messages = raw(messages);
        prefix_key(&HeaderMap::new(), &chat(messages))
    }

    #[test]
    fn key_source_labels_match_the_metric_vocabulary() {
        let all = [
            (KeySource::None, "none"),
            (KeySource::SessionHeader, "session-header"),
            (KeySource::ConversationHeader, "conversation-header"),
            (KeySource::SessionBody, "session-body"),
            (KeySource::SessionMessages, "session-messages"),
            (KeySource::ExplicitHeader, "explicit-header"),
            (KeySource::ExplicitBody, "explicit-body"),
            (KeySource::PrefixField, "prefix-field"),
            (KeySource::Canonical, "canonical"),
            (KeySource::SessionFallback, "session-fallback"),
        ];
        for (source, label) in all {
            assert_eq!(source.as_str(), label);
            assert_eq!(source.to_string(), label);
        }
    }

    #[test]
    fn session_key_precedence() {
        let messages = raw(r#"[{"role":"user","content":"hi"}]"#);
        let body = RoutingInputs {
            session_id: Some("body-id"),
            messages: Some(messages),
            ..RoutingInputs::default()
        };
        let both = headers(&[
            (&SESSION_ID_HEADER, "sess-1"),
            (&CONVERSATION_ID_HEADER, "conv-1"),
        ]);
        assert_eq!(
            session_of(&both, &body),
            Some(("sess-1".into(), KeySource::SessionHeader))
        );
        let conversation = headers(&[(&CONVERSATION_ID_HEADER, " conv-1 ")]);
        assert_eq!(
            session_of(&conversation, &body),
            Some(("conv-1".into(), KeySource::ConversationHeader))
        );
        assert_eq!(
            session_of(&HeaderMap::new(), &body),
            Some(("body-id".into(), KeySource::SessionBody))
        );
        let no_id = RoutingInputs {
            session_id: Some("  "),
            ..body
        };
        let (key, source) = session_of(&HeaderMap::new(), &no_id).unwrap();
        assert_eq!(source, KeySource::SessionMessages);
        assert!(key.starts_with("msg:") && key.len() == 20, "{key}");
        assert!(key[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(
            session_of(&HeaderMap::new(), &RoutingInputs::default()),
            None
        );
    }

    #[test]
    fn blank_or_non_ascii_session_headers_are_skipped() {
        let mut h = headers(&[(&SESSION_ID_HEADER, "   ")]);
        h.insert(
            CONVERSATION_ID_HEADER.clone(),
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        let body = RoutingInputs {
            session_id: Some("body-id"),
            ..RoutingInputs::default()
        };
        assert_eq!(
            session_of(&h, &body),
            Some(("body-id".into(), KeySource::SessionBody))
        );
    }

    #[test]
    fn message_hash_is_deterministic_and_form_independent() {
        let key = |json: &str| {
            let messages = raw(json);
            session_of(&HeaderMap::new(), &chat(messages)).map(|(k, _)| k)
        };
        let plain = key(
            r#"[{"role":"system","content":"Be terse."},{"role":"user","content":"Hello there"}]"#,
        );
        assert!(plain.is_some());
        assert_eq!(
            plain,
            key(
                r#"[{"role":"system","content":"Be terse."},{"role":"user","content":"Hello there"}]"#
            )
        );
        // Parts arrays hash like the equivalent string, images aside; field order is irrelevant.
        assert_eq!(
            plain,
            key(
                r#"[{"content":[{"type":"text","text":"Be terse."}],"role":"system"},
                    {"role":"user","content":[{"type":"text","text":"Hello "},
                      {"type":"image_url","image_url":{"url":"https://x/y.png"}},
                      {"type":"text","text":"there"}]}]"#
            )
        );
        // Escapes are decoded before hashing.
        assert_eq!(
            plain,
            key(
                r#"[{"role":"system","content":"Be terse\u002e"},{"role":"user","content":"Hello there"}]"#
            )
        );
        // Text moved between messages is a different conversation.
        assert_ne!(
            plain,
            key(
                r#"[{"role":"system","content":"Be terse.Hello"},{"role":"user","content":" there"}]"#
            )
        );
        assert_ne!(
            plain,
            key(r#"[{"role":"system","content":"Be terse."},{"role":"user","content":"Hello!"}]"#)
        );
    }

    #[test]
    fn message_hash_covers_only_the_first_five_messages() {
        let conversation = |sixth: &str| {
            let json = format!(
                r#"[{{"role":"user","content":"1"}},{{"role":"assistant","content":"2"}},
                   {{"role":"user","content":"3"}},{{"role":"assistant","content":"4"}},
                   {{"role":"user","content":"5"}},{{"role":"assistant","content":"{sixth}"}},
                   {{"role":"user","content":7}}, "not even a message"]"#
            );
            let messages = raw(&json);
            session_of(&HeaderMap::new(), &chat(messages)).map(|(k, _)| k)
        };
        assert!(conversation("6").is_some());
        assert_eq!(conversation("6"), conversation("something else"));
    }

    #[test]
    fn message_hash_caps_each_message() {
        let key = |tail: &str| {
            let json = format!(
                r#"[{{"role":"user","content":"{}{tail}"}}]"#,
                "a".repeat(SESSION_HASH_MESSAGE_BYTES)
            );
            let messages = raw(&json);
            session_of(&HeaderMap::new(), &chat(messages)).map(|(k, _)| k)
        };
        assert_eq!(key("x"), key("y"));
    }

    #[test]
    fn no_session_key_without_text() {
        for json in [
            "[]",
            r#"[{"role":"user","content":""}]"#,
            r#"[{"role":"assistant","content":null,"tool_calls":[]}]"#,
            r#"[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]"#,
            r#"{"role":"user","content":"hi"}"#,
            r#""hi""#,
            "[1,2,3]",
        ] {
            let messages = raw(json);
            assert_eq!(
                session_of(&HeaderMap::new(), &chat(messages)),
                None,
                "{json}"
            );
        }
    }

    #[test]
    fn prefix_key_precedence() {
        let messages = raw(
            r#"[{"role":"system","content":"You are helpful."},{"role":"user","content":"hi"}]"#,
        );
        let body = RoutingInputs {
            session_id: Some("sess"),
            cache_key: Some("tenant-a/doc-1"),
            prefix: Some("Legacy Prefix"),
            messages: Some(messages),
            ..RoutingInputs::default()
        };
        let h = headers(&[(&CACHE_KEY_HEADER, "Tenant-A/Doc-1")]);
        let (from_header, source) = prefix_key(&h, &body).unwrap();
        assert_eq!(source, KeySource::ExplicitHeader);
        assert!(from_header.starts_with("exp:"), "{from_header}");

        let (from_body, source) = prefix_key(&HeaderMap::new(), &body).unwrap();
        assert_eq!(source, KeySource::ExplicitBody);
        // Explicit keys are lower-cased: header and body name the same prefix.
        assert_eq!(from_body, from_header);

        let body = RoutingInputs {
            cache_key: None,
            ..body
        };
        let (legacy, source) = prefix_key(&HeaderMap::new(), &body).unwrap();
        assert_eq!(source, KeySource::PrefixField);
        assert!(legacy.starts_with("pfx:"), "{legacy}");

        let body = RoutingInputs {
            prefix: None,
            ..body
        };
        let (canon, source) = prefix_key(&HeaderMap::new(), &body).unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(canon.starts_with("sys:"), "{canon}");

        let blank = raw(r#"[{"role":"system","content":"  "},{"role":"user","content":"hi"}]"#);
        let body = RoutingInputs {
            messages: Some(blank),
            ..body
        };
        assert_eq!(
            prefix_key(&HeaderMap::new(), &body),
            Some(("sess".into(), KeySource::SessionFallback))
        );
        let h = headers(&[(&SESSION_ID_HEADER, "hdr")]);
        assert_eq!(
            prefix_key(&h, &body),
            Some(("hdr".into(), KeySource::SessionFallback))
        );
        assert_eq!(
            prefix_key(&HeaderMap::new(), &RoutingInputs::default()),
            None
        );
    }

    #[test]
    fn without_a_system_prompt_a_named_session_keys_prefix_routing() {
        let first = raw(r#"[{"role":"user","content":"Summarise this"}]"#);
        let other = raw(r#"[{"role":"user","content":"Translate that"}]"#);
        let h = headers(&[(&SESSION_ID_HEADER, "s-1")]);
        for messages in [first, other] {
            assert_eq!(
                prefix_key(&h, &chat(messages)),
                Some(("s-1".into(), KeySource::SessionFallback))
            );
        }
        let by_body = RoutingInputs {
            session_id: Some("s-2"),
            ..chat(first)
        };
        assert_eq!(
            prefix_key(&HeaderMap::new(), &by_body),
            Some(("s-2".into(), KeySource::SessionFallback))
        );
        // No named session: the first turn keys it; a system prompt wins
        // over the session.
        let (key, source) = prefix_key(&HeaderMap::new(), &chat(first)).unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(key.starts_with("usr:"), "{key}");
        let system =
            raw(r#"[{"role":"system","content":"Be brief"},{"role":"user","content":"x"}]"#);
        let (key, source) = prefix_key(&h, &chat(system)).unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(key.starts_with("sys:"), "{key}");
    }

    #[test]
    fn invalid_explicit_keys_are_ignored() {
        let body = RoutingInputs {
            cache_key: Some("fallback-key"),
            ..RoutingInputs::default()
        };
        let (expected, _) = prefix_key(&HeaderMap::new(), &body).unwrap();
        for bad in [
            "has space",
            "semi;colon",
            "",
            "   ",
            &"a".repeat(129),
            "quote\"d",
        ] {
            let Ok(value) = HeaderValue::from_str(bad) else {
                continue;
            };
            let mut h = HeaderMap::new();
            h.insert(CACHE_KEY_HEADER.clone(), value);
            assert_eq!(
                prefix_key(&h, &body),
                Some((expected.clone(), KeySource::ExplicitBody)),
                "{bad:?}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert(
            CACHE_KEY_HEADER.clone(),
            HeaderValue::from_bytes(b"k\xff").unwrap(),
        );
        assert_eq!(prefix_key(&h, &body).unwrap().1, KeySource::ExplicitBody);
        // The longest valid key, trimmed, is accepted; the limit is configurable.
        let longest = format!(" {} ", "a".repeat(128));
        let h = headers(&[(&CACHE_KEY_HEADER, &longest)]);
        assert_eq!(prefix_key(&h, &body).unwrap().1, KeySource::ExplicitHeader);
        let tight = KeyLimits {
            explicit_key_max_len: 8,
            ..KeyLimits::DEFAULT
        };
        assert_eq!(
            prefix_key_with_limits(&h, &RoutingInputs::default(), &tight),
            None
        );
        // Every allowed character.
        let h = headers(&[(&CACHE_KEY_HEADER, "AZaz09._:/=-")]);
        assert_eq!(prefix_key(&h, &body).unwrap().1, KeySource::ExplicitHeader);
    }

    #[test]
    fn canonical_key_ignores_user_turns_after_the_system_prompt() {
        let a = canonical(
            r#"[{"role":"system","content":"You are a SQL expert.\n\nAnswer briefly."},
                              {"role":"user","content":"Show tables"}]"#,
        );
        let b = canonical(
            r#"[{"role":"system","content":"  you are a sql   expert. answer briefly. "},
                              {"role":"user","content":"Drop everything"},
                              {"role":"assistant","content":"No."},
                              {"role":"system","content":"late instruction"}]"#,
        );
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_eq!(a.as_ref().unwrap().1, KeySource::Canonical);
        let c = canonical(
            r#"[{"role":"system","content":"You are a Rust expert."},
                              {"role":"user","content":"Show tables"}]"#,
        );
        assert_ne!(a, c);
        // `developer` is the newer name of the same thing.
        let d = canonical(
            r#"[{"role":"developer","content":"You are a SQL expert. Answer briefly."},
                              {"role":"user","content":"x"}]"#,
        );
        assert_eq!(a, d);
    }

    #[test]
    fn canonical_key_takes_up_to_three_leading_system_segments() {
        let base = r#"{"role":"system","content":"one"},{"role":"system","content":"two"},{"role":"system","content":"three"}"#;
        let three = canonical(&format!("[{base}]"));
        let four = canonical(&format!(r#"[{base},{{"role":"system","content":"four"}}]"#));
        assert_eq!(three, four);
        let two =
            canonical(r#"[{"role":"system","content":"one"},{"role":"system","content":"two"}]"#);
        assert_ne!(two, three);
        // Segments are joined with a space: "one two" as one segment is the same material.
        assert_eq!(
            two,
            canonical(r#"[{"role":"system","content":"one two"},{"role":"user","content":"q"}]"#)
        );
        // Each segment is cut on its own.
        let long_a = format!("{}A", "x".repeat(DEFAULT_SYSTEM_SEGMENT_MAX_LEN));
        let long_b = format!("{}B", "x".repeat(DEFAULT_SYSTEM_SEGMENT_MAX_LEN));
        let with = |s: &str| {
            canonical(&format!(
                r#"[{{"role":"system","content":"{s}"}},{{"role":"system","content":"tail"}}]"#
            ))
        };
        assert_eq!(with(&long_a), with(&long_b));
    }

    #[test]
    fn canonical_key_includes_document_context() {
        let messages = raw(
            r#"[{"role":"system","content":"Answer from the document."},{"role":"user","content":"q"}]"#,
        );
        let key = |doc: Option<&str>| {
            let body = RoutingInputs {
                document_context: doc,
                ..chat(messages)
            };
            prefix_key(&HeaderMap::new(), &body)
        };
        assert_ne!(key(None), key(Some("Quarterly report")));
        assert_eq!(key(None), key(Some("   ")));
        assert_eq!(
            key(Some("Quarterly  REPORT")),
            key(Some("quarterly report"))
        );
        let doc_a = format!("{}A", "d".repeat(DEFAULT_DOCUMENT_SEGMENT_MAX_LEN));
        let doc_b = format!("{}B", "d".repeat(DEFAULT_DOCUMENT_SEGMENT_MAX_LEN));
        assert_eq!(key(Some(&doc_a)), key(Some(&doc_b)));
        // A document alone is enough for a canonical key.
        let no_system = raw(r#"[{"role":"user","content":"q"}]"#);
        let body = RoutingInputs {
            document_context: Some("Quarterly report"),
            ..chat(no_system)
        };
        let (doc_only, source) = prefix_key(&HeaderMap::new(), &body).unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(doc_only.starts_with("sys:"), "{doc_only}");
    }

    #[test]
    fn chats_without_system_prompt_key_on_the_first_user_message() {
        let a = canonical(r#"[{"role":"user","content":"Summarise the following text: lorem"}]"#);
        let b = canonical(
            r#"[{"role":"user","content":"Summarise the following text: lorem"},
                              {"role":"assistant","content":"Sure"},{"role":"user","content":"more"}]"#,
        );
        let (key, source) = a.clone().unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(key.starts_with("usr:"), "{key}");
        assert_eq!(a, b);
        assert_ne!(
            a,
            canonical(r#"[{"role":"user","content":"Translate: lorem"}]"#)
        );
        let long = |tail: &str| {
            canonical(&format!(
                r#"[{{"role":"user","content":"{}{tail}"}}]"#,
                "w ".repeat(DEFAULT_FIRST_TURN_MAX_LEN)
            ))
        };
        assert_eq!(long("one"), long("two"));
        // Parts and content-before-role work here too.
        assert_eq!(
            a,
            canonical(
                r#"[{"content":[{"type":"text","text":"Summarise the following"},{"type":"text","text":" text: lorem"}],"role":"user"}]"#
            )
        );
        // An assistant opening is skipped until the first user message.
        assert_eq!(
            a,
            canonical(
                r#"[{"role":"assistant","content":"Hi!"},{"role":"user","content":"Summarise the following text: lorem"}]"#
            )
        );
    }

    #[test]
    fn content_before_role_keys_like_role_first() {
        assert_eq!(
            canonical(r#"[{"content":"Rules.","role":"system"},{"content":"q","role":"user"}]"#),
            canonical(r#"[{"role":"system","content":"Rules."},{"role":"user","content":"q"}]"#)
        );
    }

    #[test]
    fn completion_prompts_key_on_their_start() {
        let key = |prompt: &str| {
            let prompt = raw(prompt);
            let body = RoutingInputs {
                prompt: Some(prompt),
                ..RoutingInputs::default()
            };
            prefix_key(&HeaderMap::new(), &body)
        };
        let few_shot = "Q: 2+2? A: 4. ".repeat(60);
        let a = key(&format!(r#""{few_shot} Q: 3+3? A:""#));
        let b = key(&format!(r#""{few_shot} Q: 5+5? A:""#));
        let (k, source) = a.clone().unwrap();
        assert_eq!(source, KeySource::Canonical);
        assert!(k.starts_with("prm:"), "{k}");
        assert_eq!(a, b);
        assert_eq!(a, key(&format!(r#"["{few_shot} Q: 3+3? A:", "other"]"#)));
        assert_ne!(a, key(r#""Once upon a time""#));
        assert_eq!(key("[1,2,3]"), None);
        assert_eq!(key(r#""   ""#), None);
        assert_eq!(key("{}"), None);
    }

    #[test]
    fn explicit_header_beats_everything_for_every_body_shape() {
        let h = headers(&[(&CACHE_KEY_HEADER, "k1")]);
        let garbage = raw(r#"{"not":"messages"}"#);
        let body = RoutingInputs {
            messages: Some(garbage),
            prompt: Some(garbage),
            ..RoutingInputs::default()
        };
        assert_eq!(prefix_key(&h, &body).unwrap().1, KeySource::ExplicitHeader);
    }

    #[test]
    fn garbage_bodies_never_panic_and_give_no_content_key() {
        let deep = format!(
            "[{{\"role\":\"system\",\"content\":{}}}]",
            "[".repeat(2000) + &"]".repeat(2000)
        );
        let cases = [
            "null",
            "true",
            "0",
            "-1.5e300",
            r#""""#,
            r#""\u0000\ud83d\ude00""#,
            "{}",
            "[]",
            "[[]]",
            "[{}]",
            "[null,{}]",
            r#"[{"role":null,"content":null}]"#,
            r#"[{"role":["system"],"content":"x"}]"#,
            r#"[{"role":"system","content":{"text":"x"}}]"#,
            r#"[{"role":"system","content":[[[{"text":"x"}]]]}]"#,
            r#"[{"role":"system","content":[{"text":["x"]},{"text":null}]}]"#,
            r#"[{"role":"user","content":"\ud800"}]"#,
            r#"[{"role":"system","content":"ok"},{"role":"system"}]"#,
            deep.as_str(),
        ];
        for json in cases {
            // Some are not valid JSON for serde_json (lone surrogate): the
            // walk must cope with those too.
            let value = raw(json);
            let body = RoutingInputs {
                messages: Some(value),
                prompt: Some(value),
                ..RoutingInputs::default()
            };
            let session = session_key(&HeaderMap::new(), &body);
            let prefix = prefix_key(&HeaderMap::new(), &body);
            // Whatever comes out is stable.
            assert_eq!(session, session_key(&HeaderMap::new(), &body), "{json}");
            assert_eq!(prefix, prefix_key(&HeaderMap::new(), &body), "{json}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use serde_json::Value;

        fn json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(Value::from),
                prop_oneof![
                    Just("system".to_owned()),
                    Just("user".to_owned()),
                    Just("text".to_owned()),
                    ".{0,12}",
                ]
                .prop_map(Value::from),
            ];
            leaf.prop_recursive(5, 64, 6, |inner| {
                let key = prop_oneof![
                    Just("role".to_owned()),
                    Just("content".to_owned()),
                    Just("text".to_owned()),
                    Just("type".to_owned()),
                    "[a-z_]{0,8}",
                ];
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                    prop::collection::btree_map(key, inner, 0..5)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn arbitrary_bodies_never_panic_and_key_deterministically(
                messages in json(),
                prompt in json(),
                header in ".{0,40}",
                session_id in prop::option::of(".{0,12}"),
                cache_key in prop::option::of(".{0,12}"),
                document in prop::option::of(".{0,40}"),
            ) {
                let messages = raw(&messages.to_string());
                let prompt = raw(&prompt.to_string());
                let mut h = HeaderMap::new();
                if let Ok(value) = HeaderValue::from_str(&header) {
                    h.insert(CACHE_KEY_HEADER.clone(), value.clone());
                    h.insert(SESSION_ID_HEADER.clone(), value);
                }
                let body = RoutingInputs {
                    session_id: session_id.as_deref(),
                    cache_key: cache_key.as_deref(),
                    messages: Some(messages),
                    prompt: Some(prompt),
                    document_context: document.as_deref(),
                    ..RoutingInputs::default()
                };
                prop_assert_eq!(session_key(&h, &body), session_key(&h, &body));
                prop_assert_eq!(prefix_key(&h, &body), prefix_key(&h, &body));
                let no_headers = HeaderMap::new();
                prop_assert_eq!(
                    prefix_key(&no_headers, &body),
                    prefix_key(&no_headers, &body)
                );
            }

            #[test]
            fn string_and_parts_content_hash_alike(
                texts in prop::collection::vec(prop::collection::vec(".{0,20}", 1..4), 1..7),
            ) {
                let as_strings: Vec<Value> = texts
                    .iter()
                    .map(|parts| serde_json::json!({"role": "user", "content": parts.concat()}))
                    .collect();
                let as_parts: Vec<Value> = texts
                    .iter()
                    .map(|parts| {
                        let parts: Vec<Value> = parts
                            .iter()
                            .map(|t| serde_json::json!({"type": "text", "text": t}))
                            .collect();
                        serde_json::json!({"content": parts, "role": "user"})
                    })
                    .collect();
                let a = raw(&Value::from(as_strings).to_string());
                let b = raw(&Value::from(as_parts).to_string());
                let none = HeaderMap::new();
                prop_assert_eq!(session_key(&none, &chat(a)), session_key(&none, &chat(b)));
                prop_assert_eq!(prefix_key(&none, &chat(a)), prefix_key(&none, &chat(b)));
            }
        }
    }
}
