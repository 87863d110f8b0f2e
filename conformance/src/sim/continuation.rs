//! Continuing a partial answer, as a deterministic (temperature 0) engine
//! does: a request that carries the first tokens of an answer gets the rest
//! of that same answer, so a client can resume an interrupted generation on
//! another replica and splice the two with nothing duplicated or missing.
//!
//! Token `i` of the answer to a prompt `P` is [`synth::token_text`]`(seed, i)`
//! with `seed = `[`synth::seed`]`(model, P)`. A continuation is answered from
//! token `k` on, `k` being the number of tokens the request already holds.
//!
//! - **Chat**: `continue_final_message: true` and `add_generation_prompt:
//!   false` (vLLM's flags; both true is a 400) with a final assistant
//!   message `C` (else a 400). `P` is the conversation without `C`. When `C`
//!   is the simulator's own first `k` tokens for `P` ([`of_chat`]), the
//!   answer continues at token `k`. Any other `C` (an assistant prefill) is
//!   continued deterministically from the whole conversation's seed at token
//!   1, so every token has its leading space; its length is that of an
//!   ordinary request for the whole conversation.
//! - **Completions**: a single string prompt `S = P + T` where `T` is the
//!   simulator's first `k ≥ 1` tokens for a non-empty `P` ([`recognise`]);
//!   the largest such `k` wins. Anything else, `echo: true`, lists of
//!   prompts and token ids are ordinary prompts.
//!
//! Only `n = 1` continues; with `n > 1` the request is an ordinary one.
//! With `max_tokens` a continuation generates that many more tokens;
//! without, it stops where the uninterrupted answer did (the default length
//! computed from `P`), and answers with no tokens and finish `stop` when
//! nothing is left. Usage counts the whole request prompt; the context
//! limit counts `P` plus all the answer's tokens, as for the uninterrupted
//! answer.

use std::ops::Range;

use super::config::SimConfig;
use super::error::ApiError;
use super::generation::Plan;
use super::prefix_cache::{token_count, Prompt};
use super::protocol::{ChatRequest, CompletionRequest, SamplingFields};
use super::synth;

/// An earlier answer a request carries the first tokens of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continuation {
    /// Seed of the answer: that of the prompt it answered.
    pub seed: u64,
    /// Tokens of the answer already in the request: the first one generated now.
    pub start: u32,
    /// Prompt tokens of the prompt the answer answered.
    pub origin_tokens: u32,
}

/// Where a request's answer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A fresh answer to the whole prompt.
    Fresh,
    /// The rest of the simulator's own answer.
    Own(Continuation),
    /// A continuation of an assistant prefill the simulator did not write:
    /// the whole prompt's answer from token 1 on.
    Prefill,
}

impl Start {
    /// The request's plan (see [`Plan::new`] and [`Plan::continuing`]).
    pub fn plan(
        &self,
        config: &SimConfig,
        model: String,
        prompts: &[Prompt],
        fields: &SamplingFields,
        what: &str,
    ) -> Result<Plan, ApiError> {
        match self {
            Self::Fresh => Plan::new(config, model, prompts, fields, what),
            Self::Own(from) => Plan::continuing(config, model, prompts, from, fields, what),
            Self::Prefill => Ok(Plan::new(config, model, prompts, fields, what)?.starting_at(1)),
        }
    }
}

fn single_choice(fields: &SamplingFields) -> bool {
    fields.n.unwrap_or(1) == 1
}

/// Where a chat request's answer starts; 400 for `continue_final_message`
/// with `add_generation_prompt`, or without a final assistant message.
pub fn of_chat(model: &str, request: &ChatRequest) -> Result<Start, ApiError> {
    if !request.continue_final_message {
        return Ok(Start::Fresh);
    }
    if request.add_generation_prompt {
        return Err(ApiError::bad_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    let Some((last, history)) = request
        .messages
        .split_last()
        .filter(|(last, _)| last.role == "assistant")
    else {
        return Err(ApiError::bad_request(
            "Cannot set `continue_final_message` to True when the last message is not from \
             the assistant.",
        ));
    };
    if !single_choice(&request.sampling) {
        return Ok(Start::Fresh);
    }
    if history.is_empty() {
        return Ok(Start::Prefill);
    }
    let origin = Prompt::chat(history);
    let seed = synth::seed(model, &origin.text);
    Ok(match own_tokens(seed, &last.text()) {
        Some(start) => Start::Own(Continuation {
            seed,
            start,
            origin_tokens: origin.tokens(),
        }),
        None => Start::Prefill,
    })
}

/// `k` when `text` is exactly the first `k` tokens seeded by `seed` (0 when empty).
fn own_tokens(seed: u64, text: &str) -> Option<u32> {
    if text.is_empty() {
        return Some(0);
    }
    let mut tokens = 0;
    for (index, piece) in (0u32..).zip(text.split(' ')) {
        if synth::token_word(seed, index) != piece {
            return None;
        }
        tokens = index + 1;
    }
    Some(tokens)
}

/// Where a text completion's answer starts: a continuation when its prompt
/// is one string that [`recognise`] recognises, with `n` 1 and no `echo`.
pub fn of_completion(model: &str, request: &CompletionRequest, max_model_len: u32) -> Start {
    match (&request.prompt, request.echo) {
        (serde_json::Value::String(prompt), None | Some(false))
            if single_choice(&request.sampling) =>
        {
            recognise(model, prompt, max_model_len).map_or(Start::Fresh, Start::Own)
        }
        _ => Start::Fresh,
    }
}

/// The continuation `prompt` is, if any: the largest `k` in `1..=max_start`
/// with `prompt = P + `[`synth::completion_text`]`(seed(model, P), k)` for a
/// non-empty `P`.
///
/// Linear in the prompt's length. Token `i ≥ 1` of a candidate is `" " + word`,
/// so walking space-separated vocabulary words back from the end gives every
/// candidate `k`; token 0 is a vocabulary word glued to `P`, a suffix of the
/// piece before them. Candidates are tried from the largest `k` down, so
/// their `P`s grow and one forward pass of the rolling seed hash serves them
/// all; each is checked from its last token back, so a wrong one fails after
/// about one token.
pub fn recognise(model: &str, prompt: &str, max_start: u32) -> Option<Continuation> {
    let max_start = usize::try_from(max_start).unwrap_or(usize::MAX);
    let (words, head) = trailing_words(prompt, max_start)?;
    let bytes = prompt.as_bytes();
    let mut state = synth::seed(model, "");
    let mut hashed = 0;
    for k in (1..=words.len() + 1).rev() {
        let piece = words.get(k - 1).unwrap_or(&head).clone();
        for len in (1..=synth::MAX_WORD_LEN.min(piece.len())).rev() {
            let split = piece.end - len;
            let Some(first) = prompt.get(split..piece.end).filter(|w| synth::is_word(w)) else {
                continue;
            };
            if split == 0 {
                continue;
            }
            state = synth::seed_extend(state, &bytes[hashed..split]);
            hashed = split;
            let tail_matches = (1..k).rev().all(|i| {
                let word = &prompt[words[k - 1 - i].clone()];
                synth::token_word(state, u32::try_from(i).unwrap_or(u32::MAX)) == word
            });
            if tail_matches && synth::token_word(state, 0) == first {
                return Some(Continuation {
                    seed: state,
                    start: u32::try_from(k).ok()?,
                    origin_tokens: token_count(split).max(1),
                });
            }
        }
    }
    None
}

/// The byte ranges of the vocabulary words ending `prompt`, each after a
/// space, last first (at most `max_start - 1`), and of the piece before them
/// (its last [`synth::MAX_WORD_LEN`] + 1 bytes at most). `None` when
/// `max_start` is 0.
fn trailing_words(prompt: &str, max_start: usize) -> Option<(Vec<Range<usize>>, Range<usize>)> {
    if max_start == 0 {
        return None;
    }
    let bytes = prompt.as_bytes();
    let mut words = Vec::new();
    let mut end = bytes.len();
    loop {
        // A piece longer than any word needs no exact start.
        let floor = end.saturating_sub(synth::MAX_WORD_LEN + 1);
        let begin = bytes[floor..end]
            .iter()
            .rposition(|b| *b == b' ')
            .map_or(floor, |i| floor + i + 1);
        let piece = begin..end;
        let is_word = prompt.get(piece.clone()).is_some_and(synth::is_word);
        if begin == 0 || !is_word || words.len() + 1 >= max_start {
            return Some((words, piece));
        }
        words.push(piece);
        end = begin - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator's first `k` tokens for `prompt`.
    fn answer(prompt: &str, k: u32) -> String {
        synth::completion_text(synth::seed("m", prompt), k)
    }

    #[test]
    fn recognises_its_own_answers_at_every_split() {
        for prompt in [
            "Hello there.",
            "tell me about the",
            "x",
            "ünïcode prompt a ",
        ] {
            let seed = synth::seed("m", prompt);
            for k in [1, 2, 7, 40] {
                let sent = format!("{prompt}{}", answer(prompt, k));
                assert_eq!(
                    recognise("m", &sent, 8192),
                    Some(Continuation {
                        seed,
                        start: k,
                        origin_tokens: token_count(prompt.len()).max(1),
                    }),
                    "{sent:?}"
                );
            }
        }
    }

    #[test]
    fn other_prompts_are_not_continuations() {
        for prompt in [
            "",
            "the",
            "Hello there.",
            "tell me about the model",
            "the model answers with simulated tokens",
            "ends with a space ",
            "a a a a a a a a",
        ] {
            assert_eq!(recognise("m", prompt, 8192), None, "{prompt:?}");
        }
        // The same words after another prompt, or from another model.
        let sent = format!("Hello.{}", answer("Hi.", 5));
        assert_eq!(recognise("m", &sent, 8192), None);
        let sent = format!("Hi.{}", answer("Hi.", 5));
        assert_eq!(recognise("other", &sent, 8192), None);
        // A start beyond the bound is not looked for.
        let sent = format!("Hi.{}", answer("Hi.", 5));
        assert_eq!(recognise("m", &sent, 4), None);
        assert_eq!(recognise("m", &sent, 5).map(|c| c.start), Some(5));
        assert_eq!(recognise("m", &sent, 0), None);
    }

    #[test]
    fn a_long_run_of_words_is_handled_in_one_pass() {
        let prompt = "a ".repeat(32 * 1024) + "a";
        assert_eq!(recognise("m", &prompt, 8192), None);
        let long = "y".repeat(64 * 1024);
        let sent = format!("{long}{}", answer(&long, 300));
        assert_eq!(recognise("m", &sent, 8192).map(|c| c.start), Some(300));
    }

    #[test]
    fn own_tokens_match_exactly() {
        let seed = synth::seed("m", "q");
        let text = synth::completion_text(seed, 6);
        assert_eq!(own_tokens(seed, &text), Some(6));
        assert_eq!(own_tokens(seed, ""), Some(0));
        assert_eq!(own_tokens(seed, &format!("{text} ")), None);
        assert_eq!(own_tokens(seed, &format!(" {text}")), None);
        assert_eq!(own_tokens(seed, &text.replace(' ', "  ")), None);
        assert_eq!(own_tokens(seed.wrapping_add(1), &text), None);
    }
}
