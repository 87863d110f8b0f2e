//! What a completion request will produce and when: token counts, finish
//! reason, the deterministic text seed, and the token schedule.

use std::time::Duration;

use tokio::time::Instant;

use super::config::SimConfig;
use super::continuation::Continuation;
use super::error::ApiError;
use super::metrics::FinishReason;
use super::prefix_cache::{CacheKey, Prompt};
use super::protocol::{SamplingFields, Usage};
use super::synth;
use super::tools::ToolCall;

/// Largest `n` accepted, to keep one request from asking for unbounded work.
pub const MAX_CHOICES: u32 = 128;

/// The decided shape of one completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The model name the response reports.
    pub model: String,
    /// Prompt tokens (all prompts), 4 rendered bytes each (see [`super::prefix_cache`]).
    pub prompt_tokens: u32,
    /// What the prefix cache looks up for this request.
    pub cache_key: CacheKey,
    /// Prompt tokens found in the prefix cache, set when the request gets its slot.
    pub cached_tokens: u32,
    /// Tokens generated for each choice.
    pub completion_tokens: u32,
    /// Choices in the response (prompts × `n`).
    pub choices: u32,
    /// Why generation ends.
    pub finish: FinishReason,
    /// Seed of each choice's text, indexed by choice.
    pub seeds: Vec<u64>,
    /// Index of the first token generated: the tokens before it are already
    /// in the request (see [`super::continuation`]); 0 for a fresh answer.
    pub start: u32,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of a stream.
    pub include_usage: bool,
    /// The tool call the answer is, instead of text (see [`Plan::with_tool_call`]).
    pub tool_call: Option<ToolCall>,
}

impl Plan {
    /// Validates the sampling fields as vLLM does and decides the output for
    /// `prompts` (one per prompt; chat has exactly one).
    pub fn new(
        config: &SimConfig,
        model: String,
        prompts: &[Prompt],
        fields: &SamplingFields,
        what: &str,
    ) -> Result<Self, ApiError> {
        Self::build(config, model, prompts, fields, what, None)
    }

    /// [`Plan::new`] for a request whose `prompts` (one) end with the first
    /// `from.start` tokens of an earlier answer: it generates that answer's
    /// next tokens, and without a length it stops where the answer did,
    /// possibly at once (no tokens, finish `stop`).
    pub fn continuing(
        config: &SimConfig,
        model: String,
        prompts: &[Prompt],
        from: &Continuation,
        fields: &SamplingFields,
        what: &str,
    ) -> Result<Self, ApiError> {
        Self::build(config, model, prompts, fields, what, Some(from))
    }

    fn build(
        config: &SimConfig,
        model: String,
        prompts: &[Prompt],
        fields: &SamplingFields,
        what: &str,
        from: Option<&Continuation>,
    ) -> Result<Self, ApiError> {
        let stream = fields.stream.unwrap_or(false);
        if fields.stream_options.is_some() && !stream {
            return Err(ApiError::bad_request(
                "Stream options can only be defined when `stream=True`.",
            ));
        }
        if fields.cache_salt.as_deref() == Some("") {
            return Err(ApiError::bad_request(
                "Parameter 'cache_salt' must be a non-empty string if provided.",
            ));
        }
        check_sampling(fields)?;
        let n = fields.n.unwrap_or(1);
        if n == 0 || n > MAX_CHOICES {
            return Err(ApiError::bad_request(format!(
                "n must be between 1 and {MAX_CHOICES}, got {n}."
            )));
        }
        let prompt_tokens = total_prompt_tokens(prompts);
        let longest_prompt = prompts.iter().map(Prompt::tokens).max().unwrap_or(1);
        // Lengths of a continuation are those of the uninterrupted answer.
        let (origin, start) = from.map_or((longest_prompt, 0), |c| (c.origin_tokens, c.start));
        let max_len = config.max_model_len;
        let requested = fields.max_completion_tokens.or(fields.max_tokens);
        let (completion_tokens, finish) = match requested {
            Some(0) => {
                return Err(ApiError::bad_request(
                    "max_tokens must be at least 1, got 0.",
                ))
            }
            Some(tokens) => (tokens, FinishReason::Length),
            None => (
                config
                    .default_max_tokens
                    .min(max_len.saturating_sub(origin))
                    .saturating_sub(start),
                FinishReason::Stop,
            ),
        };
        let context = origin.saturating_add(start);
        let total = context.saturating_add(completion_tokens);
        if (completion_tokens == 0 && from.is_none()) || total > max_len {
            return Err(ApiError::bad_request(format!(
                "This model's maximum context length is {max_len} tokens. However, you requested \
                 {total} tokens ({context} in the {what}, {completion_tokens} in the \
                 completion). Please reduce the length of the {what} or completion."
            )));
        }
        let choices = |seed: u64| (0..n).map(move |j| seed.wrapping_add(u64::from(j)));
        let seeds = match from {
            Some(c) => choices(c.seed).collect::<Vec<_>>(),
            None => prompts
                .iter()
                .flat_map(|p| choices(synth::seed(&model, &p.text)))
                .collect(),
        };
        Ok(Self {
            choices: u32::try_from(seeds.len()).unwrap_or(u32::MAX),
            include_usage: fields
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            model,
            prompt_tokens,
            cache_key: CacheKey::of_salted_prompts(
                prompts,
                config.block_size,
                fields.cache_salt.as_deref(),
            ),
            cached_tokens: 0,
            completion_tokens,
            finish,
            seeds,
            start,
            stream,
            tool_call: None,
        })
    }

    /// Starts the text at token `start` of its seed instead of token 0.
    pub fn starting_at(mut self, start: u32) -> Self {
        self.start = start;
        self
    }

    /// Makes the answer `call`: its arguments are the output, one token per
    /// fragment (see [`super::tools::fragments`]), always whole, so the
    /// generation ends naturally whatever the length limit.
    pub fn with_tool_call(mut self, call: Option<ToolCall>) -> Self {
        if let Some(call) = &call {
            self.completion_tokens = call.tokens();
            self.finish = FinishReason::Stop;
        }
        self.tool_call = call;
        self
    }

    /// The seed tool arguments are generated from: the request's `seed`, else
    /// the prompt's.
    pub fn tool_seed(&self, seed: Option<i64>) -> u64 {
        seed.map_or_else(
            || self.seeds.first().copied().unwrap_or_default(),
            |s| s as u64,
        )
    }

    /// Usage of the whole response, with the cached prompt tokens.
    pub fn usage(&self) -> Usage {
        Usage::with_cached(
            self.prompt_tokens,
            self.completion_tokens.saturating_mul(self.choices),
            self.cached_tokens,
        )
    }

    /// Prompt tokens that must be prefilled: those not found in the prefix cache.
    pub fn uncached_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }

    /// KV-cache tokens the request holds while it runs.
    pub fn kv_tokens(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.completion_tokens) * u64::from(self.choices)
    }

    /// The full text of choice `index`.
    pub fn text(&self, index: usize) -> String {
        (0..self.completion_tokens)
            .map(|token| self.token(index, token))
            .collect()
    }

    /// Token `token` (0-based within this answer) of choice `index`.
    pub fn token(&self, index: usize, token: u32) -> String {
        let seed = self.seeds.get(index).copied().unwrap_or_default();
        synth::token_text(seed, self.start.saturating_add(token))
    }
}

/// vLLM's range checks of the sampling parameters (400 outside them).
fn check_sampling(fields: &SamplingFields) -> Result<(), ApiError> {
    if let Some(t) = fields.temperature.filter(|t| t.is_nan() || *t < 0.0) {
        return Err(ApiError::bad_request(format!(
            "temperature must be non-negative, got {t}."
        )));
    }
    if let Some(p) = fields.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(ApiError::bad_request(format!(
            "top_p must be in (0, 1], got {p}."
        )));
    }
    for (name, value) in [
        ("presence_penalty", fields.presence_penalty),
        ("frequency_penalty", fields.frequency_penalty),
    ] {
        if let Some(v) = value.filter(|v| !(-2.0..=2.0).contains(v)) {
            return Err(ApiError::bad_request(format!(
                "{name} must be in [-2, 2], got {v}."
            )));
        }
    }
    Ok(())
}

/// Prompt tokens of a request as usage counts them: the sum over its prompts.
pub fn total_prompt_tokens(prompts: &[Prompt]) -> u32 {
    prompts
        .iter()
        .map(Prompt::tokens)
        .fold(0u32, u32::saturating_add)
}

/// Upper bound of any simulated delay, far beyond any test yet safe to add to an `Instant`.
pub const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When each token is due: the first after the TTFT (plus any prefill time),
/// then one per inter-token delay, measured from admission so delays never
/// accumulate drift.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    start: Instant,
    ttft: Duration,
    inter_token: Option<Duration>,
}

impl Pacer {
    /// A schedule starting now.
    pub fn start(config: &SimConfig) -> Self {
        Self::with_prefill(config, Duration::ZERO)
    }

    /// A schedule starting now whose first token also waits for `prefill`.
    pub fn with_prefill(config: &SimConfig, prefill: Duration) -> Self {
        Self {
            start: Instant::now(),
            ttft: config.ttft.saturating_add(prefill),
            inter_token: config.inter_token_delay(),
        }
    }

    /// When token `index` (0-based) is due. Absurdly long schedules saturate
    /// at a century instead of overflowing.
    pub fn due(&self, index: u32) -> Instant {
        let after = self
            .inter_token
            .map_or(Duration::ZERO, |d| d.saturating_mul(index));
        let offset = self.ttft.saturating_add(after).min(CENTURY);
        self.start + offset
    }

    /// Sleeps until token `index` is due (returns at once when it already is).
    pub async fn wait_for(&self, index: u32) {
        let due = self.due(index);
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::protocol::StreamOptions;

    fn fields(max_tokens: Option<u32>) -> SamplingFields {
        SamplingFields {
            max_tokens,
            ..SamplingFields::default()
        }
    }

    #[test]
    fn explicit_length_finishes_with_length() {
        let plan = Plan::new(
            &SimConfig::default(),
            "m".into(),
            &[Prompt::from_text("a b c")],
            &fields(Some(5)),
            "messages",
        )
        .expect("plan");
        // "a b c" is 5 bytes: 2 tokens of 4 bytes.
        assert_eq!((plan.prompt_tokens, plan.completion_tokens), (2, 5));
        assert_eq!(plan.finish, FinishReason::Length);
        assert_eq!(plan.usage(), Usage::with_cached(2, 5, 0));
        assert_eq!(synth::count_tokens(&plan.text(0)), 5);
        let streamed: String = (0..5).map(|i| plan.token(0, i)).collect();
        assert_eq!(streamed, plan.text(0));
    }

    #[test]
    fn default_length_finishes_with_stop() {
        let config = SimConfig {
            default_max_tokens: 4,
            ..SimConfig::default()
        };
        let plan = Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("a")],
            &fields(None),
            "messages",
        )
        .expect("plan");
        assert_eq!(
            (plan.completion_tokens, plan.finish),
            (4, FinishReason::Stop)
        );
    }

    #[test]
    fn max_completion_tokens_wins() {
        let f = SamplingFields {
            max_tokens: Some(9),
            max_completion_tokens: Some(2),
            ..SamplingFields::default()
        };
        let plan = Plan::new(
            &SimConfig::default(),
            "m".into(),
            &[Prompt::from_text("a")],
            &f,
            "messages",
        )
        .expect("plan");
        assert_eq!(plan.completion_tokens, 2);
    }

    #[test]
    fn rejects_like_vllm() {
        let config = SimConfig {
            max_model_len: 10,
            ..SimConfig::default()
        };
        let long = Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("a b c")],
            &fields(Some(9)),
            "messages",
        )
        .expect_err("too long");
        assert!(
            long.message.contains("maximum context length is 10 tokens"),
            "{}",
            long.message
        );
        assert!(Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("a")],
            &fields(Some(0)),
            "messages"
        )
        .is_err());
        let options = SamplingFields {
            stream_options: Some(StreamOptions {
                include_usage: Some(true),
            }),
            ..SamplingFields::default()
        };
        assert!(Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("a")],
            &options,
            "messages"
        )
        .is_err());
        let many = SamplingFields {
            n: Some(MAX_CHOICES + 1),
            ..SamplingFields::default()
        };
        assert!(Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("a")],
            &many,
            "messages"
        )
        .is_err());
    }

    #[test]
    fn choices_multiply_prompts_by_n() {
        let f = SamplingFields {
            n: Some(2),
            max_tokens: Some(3),
            ..SamplingFields::default()
        };
        let plan = Plan::new(
            &SimConfig::default(),
            "m".into(),
            &[Prompt::from_text("a"), Prompt::from_text("b")],
            &f,
            "prompt",
        )
        .expect("plan");
        assert_eq!(plan.choices, 4);
        assert_eq!(plan.usage(), Usage::with_cached(2, 12, 0));
    }

    #[test]
    fn usage_and_cache_key_follow_the_byte_rule() {
        let config = SimConfig {
            block_size: 2,
            ..SimConfig::default()
        };
        let prompts = [
            Prompt::from_text("0123456789abcdefXY"),
            Prompt::from_text("second prompt"),
        ];
        let mut plan =
            Plan::new(&config, "m".into(), &prompts, &fields(Some(1)), "prompt").expect("plan");
        // 18 bytes = 5 tokens, 13 bytes = 4 tokens.
        assert_eq!(plan.prompt_tokens, 9);
        // Only the first prompt is looked up: 5 tokens, 2 full blocks.
        assert_eq!(plan.cache_key, CacheKey::new(b"0123456789abcdefXY", 2));
        assert_eq!(plan.cache_key.tokens, 5);
        assert_eq!(plan.cache_key.hashes.len(), 2);
        plan.cached_tokens = 4;
        assert_eq!(plan.uncached_tokens(), 5);
        let usage = serde_json::to_value(plan.usage()).expect("json");
        assert_eq!(
            usage,
            serde_json::json!({
                "prompt_tokens": 9,
                "completion_tokens": 2,
                "total_tokens": 11,
                "prompt_tokens_details": {"cached_tokens": 4}
            })
        );
    }

    #[test]
    fn a_continuation_ends_where_the_answer_did() {
        let config = SimConfig {
            default_max_tokens: 10,
            max_model_len: 20,
            ..SimConfig::default()
        };
        let whole = Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("abc")],
            &fields(None),
            "prompt",
        )
        .expect("plan");
        let text = whole.text(0);
        let from = |start: u32| Continuation {
            seed: whole.seeds[0],
            start,
            origin_tokens: whole.prompt_tokens,
        };
        let rest = |start: u32, max_tokens: Option<u32>| {
            let sent = synth::completion_text(whole.seeds[0], start);
            let prompt = Prompt::from_text(format!("abc{sent}"));
            let plan = Plan::continuing(
                &config,
                "m".into(),
                std::slice::from_ref(&prompt),
                &from(start),
                &fields(max_tokens),
                "prompt",
            );
            plan.map(|p| {
                assert_eq!(p.prompt_tokens, prompt.tokens());
                assert_eq!(
                    p.cache_key,
                    CacheKey::new(&prompt.rendered, config.block_size)
                );
                (sent, p)
            })
        };
        for start in [1, 4, 9] {
            let (sent, plan) = rest(start, None).expect("plan");
            assert_eq!(
                (plan.completion_tokens, plan.finish),
                (10 - start, FinishReason::Stop)
            );
            assert_eq!(format!("{sent}{}", plan.text(0)), text);
            let streamed: String = (0..plan.completion_tokens)
                .map(|t| plan.token(0, t))
                .collect();
            assert_eq!(streamed, plan.text(0));
            let (_, limited) = rest(start, Some(3)).expect("plan");
            assert_eq!(
                (limited.completion_tokens, limited.finish),
                (3, FinishReason::Length)
            );
            assert_eq!(
                format!("{sent}{}", limited.text(0)),
                synth::completion_text(whole.seeds[0], start + 3)
            );
        }
        for start in [10, 12] {
            let (_, done) = rest(start, None).expect("plan");
            assert_eq!(
                (done.completion_tokens, done.finish),
                (0, FinishReason::Stop)
            );
            assert_eq!(done.text(0), "");
        }
        // The context counts the original prompt and all the answer's tokens.
        assert!(rest(9, Some(10)).is_ok());
        let long = rest(9, Some(11)).expect_err("too long");
        assert!(
            long.message.contains("(10 in the prompt, 11 in"),
            "{}",
            long.message
        );
        assert!(rest(9, Some(0)).is_err());
    }

    #[test]
    fn a_plan_may_start_later_in_its_text() {
        let plan = Plan::new(
            &SimConfig::default(),
            "m".into(),
            &[Prompt::from_text("a")],
            &fields(Some(3)),
            "prompt",
        )
        .expect("plan");
        let later = plan.clone().starting_at(2);
        assert_eq!(plan.start, 0);
        let expected: String = (2..5)
            .map(|i| synth::token_text(plan.seeds[0], i))
            .collect();
        assert_eq!(later.text(0), expected);
        assert!(later.text(0).starts_with(' '));
    }

    #[test]
    fn pacer_schedules_from_start() {
        let config = SimConfig {
            ttft: Duration::from_millis(100),
            tokens_per_second: 10.0,
            ..SimConfig::default()
        };
        let pacer = Pacer::start(&config);
        assert_eq!(pacer.due(3) - pacer.due(0), Duration::from_millis(300));
        let slow = SimConfig {
            ttft: Duration::MAX,
            tokens_per_second: 0.001,
            ..SimConfig::default()
        };
        let pacer = Pacer::start(&slow);
        assert_eq!(pacer.due(u32::MAX) - pacer.due(0), Duration::ZERO);
    }

    #[test]
    fn prefill_delays_the_first_token_only() {
        let config = SimConfig {
            ttft: Duration::from_millis(100),
            tokens_per_second: 10.0,
            prefill_tokens_per_second: 1000.0,
            ..SimConfig::default()
        };
        let prefill =
            crate::sim::prefix_cache::prefill_delay(500, config.prefill_tokens_per_second);
        let pacer = Pacer::with_prefill(&config, prefill);
        assert_eq!(Pacer::start(&config).ttft, Duration::from_millis(100));
        assert_eq!(pacer.due(0) - pacer.start, Duration::from_millis(600));
        assert_eq!(pacer.due(3) - pacer.due(0), Duration::from_millis(300));
    }
}
