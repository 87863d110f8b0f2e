//! Secrets taken out of a model server's output lines before they are
//! logged or kept for its status message: engines print their environment,
//! command lines and request headers when they fail.
//!
//! A value is replaced by [`REDACTED`] when it is
//! - assigned to a name that looks secret: `HF_TOKEN=...`, `api_key='...'`,
//!   `--hf-token ...`, `"password": "..."`, `X-Api-Key: ...`;
//! - a credential after `Bearer` (`Authorization: Bearer ...`);
//! - shaped like a known token (`hf_...`, `sk-...`, `ghp_...`,
//!   `github_pat_...`, `glpat-...`, `xoxb-...`, `AKIA...`, JWTs);
//! - the password of a URL (`https://user:...@host`).
//!
//! A name looks secret when one of its words (split at `_`, `-`, `.` and
//! lower-to-upper case changes) is one of [`SECRET_WORDS`], or when it ends
//! in one of [`SECRET_ENDINGS`] (`accesstoken`, `apikey`). With `name:`, the
//! last word must be the secret one, so that `KeyError: 'x'` is kept.

use std::borrow::Cow;

/// What a secret reads as.
pub const REDACTED: &str = "[REDACTED]";

/// Words that make a name secret.
pub const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "KEY",
    "APIKEY",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "AUTH",
    "AUTHORIZATION",
    "CREDENTIAL",
    "CREDENTIALS",
    "COOKIE",
];

/// Endings that make a name written as one word secret.
pub const SECRET_ENDINGS: &[&str] = &["TOKEN", "APIKEY", "SECRET", "PASSWORD", "PASSWD"];

/// A token shape: a prefix, the least number of characters after it, and
/// which characters those may be.
type TokenShape = (&'static str, usize, fn(u8) -> bool);

/// Known token shapes.
const TOKEN_SHAPES: &[TokenShape] = &[
    ("hf_", 20, is_alnum),
    ("sk-", 20, is_token_char),
    ("ghp_", 20, is_alnum),
    ("gho_", 20, is_alnum),
    ("ghu_", 20, is_alnum),
    ("ghs_", 20, is_alnum),
    ("ghr_", 20, is_alnum),
    ("github_pat_", 20, is_token_char),
    ("glpat-", 20, is_token_char),
    ("xoxb-", 10, is_token_char),
    ("xoxp-", 10, is_token_char),
    ("xoxa-", 10, is_token_char),
    ("AKIA", 16, is_upper_alnum),
    ("eyJ", 20, is_jwt_char),
];

/// Schemes whose next word is a credential, in a secret value
/// (`Authorization: Basic ...`); anywhere else only `Bearer` counts.
const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "token"];

/// `line` with every secret it holds replaced by [`REDACTED`].
pub fn redact(line: &str) -> Cow<'_, str> {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !is_word(bytes[i]) || (i > 0 && is_word(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let end = word_end(bytes, i);
        match secret_at(line, i, end) {
            Some((from, to)) => {
                out.push_str(&line[copied..from]);
                out.push_str(REDACTED);
                copied = to;
                i = to.max(end);
            }
            None => i = end,
        }
    }
    if copied == 0 {
        return Cow::Borrowed(line);
    }
    out.push_str(&line[copied..]);
    Cow::Owned(out)
}

/// The span of a secret that the word `line[start..end]` starts or
/// introduces, if any.
fn secret_at(line: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let word = &line[start..end];
    let token = word.trim_end_matches('.');
    if is_token(token) {
        return Some((start, start + token.len()));
    }
    if word.eq_ignore_ascii_case("bearer") && word_after_space(bytes, end) {
        return credential_after(bytes, end);
    }
    if bytes[end..].starts_with(b"://") {
        return url_password(bytes, end + 3);
    }
    // `name=value`, `name: value`, `"name": "value"`.
    let mut p = end;
    if matches!(bytes.get(p), Some(b'"' | b'\'')) {
        p += 1;
    }
    p = skip_blanks(bytes, p);
    match bytes.get(p) {
        Some(b'=') if secret_name(word, false) => value_at(bytes, skip_blanks(bytes, p + 1)),
        Some(b':') if !matches!(bytes.get(p + 1), Some(b':' | b'/')) && secret_name(word, true) => {
            value_at(bytes, skip_blanks(bytes, p + 1))
        }
        // `--api-key VALUE`.
        Some(_) if word.starts_with("--") && p == end + 1 && secret_name(word, true) => {
            if bytes[p] == b'-' {
                None
            } else {
                value_at(bytes, p)
            }
        }
        _ => None,
    }
}

/// The span of the value starting at `p`: inside its quotes when quoted,
/// else up to a blank or separator. A value that starts with an
/// authorisation scheme keeps the scheme: only the credential after it is
/// the secret.
fn value_at(bytes: &[u8], p: usize) -> Option<(usize, usize)> {
    let (from, to) = match bytes.get(p)? {
        &q @ (b'"' | b'\'') => {
            let from = p + 1;
            let to = bytes[from..]
                .iter()
                .position(|&b| b == q)
                .map_or(bytes.len(), |n| from + n);
            (from, to)
        }
        _ => {
            let to = p + bytes[p..]
                .iter()
                .position(|&b| b.is_ascii_whitespace() || b",;&)}]\"'".contains(&b))
                .unwrap_or(bytes.len() - p);
            if AUTH_SCHEMES
                .iter()
                .any(|s| bytes[p..to].eq_ignore_ascii_case(s.as_bytes()))
                && word_after_space(bytes, to)
            {
                return credential_after(bytes, to);
            }
            (p, to)
        }
    };
    let scheme = AUTH_SCHEMES.iter().find(|s| {
        bytes[from..to]
            .get(..s.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(s.as_bytes()))
            && word_after_space(&bytes[..to], from + s.len())
    });
    let from = match scheme {
        Some(s) => skip_blanks(bytes, from + s.len()),
        None => from,
    };
    (to > from).then_some((from, to))
}

/// The credential after a scheme ending at `p` (blanks, then everything up
/// to a blank or a closing quote).
fn credential_after(bytes: &[u8], p: usize) -> Option<(usize, usize)> {
    let from = skip_blanks(bytes, p);
    let to = from
        + bytes[from..]
            .iter()
            .position(|&b| b.is_ascii_whitespace() || b"\"',;".contains(&b))
            .unwrap_or(bytes.len() - from);
    (to > from).then_some((from, to))
}

/// The password of the URL authority starting at `p` (after `://`), when
/// it has `user:password@`.
fn url_password(bytes: &[u8], p: usize) -> Option<(usize, usize)> {
    let authority_end = p + bytes[p..]
        .iter()
        .position(|&b| b.is_ascii_whitespace() || b"/?#\"'".contains(&b))
        .unwrap_or(bytes.len() - p);
    let authority = &bytes[p..authority_end];
    let at = authority.iter().rposition(|&b| b == b'@')?;
    let colon = authority[..at].iter().position(|&b| b == b':')?;
    (colon + 1 < at).then_some((p + colon + 1, p + at))
}

/// Whether `name` looks secret; with `last_word`, only its last word
/// counts.
fn secret_name(name: &str, last_word: bool) -> bool {
    let name = name.trim_start_matches('-');
    let words = words(name);
    let secret_word = |w: &String| SECRET_WORDS.contains(&w.as_str());
    let by_word = if last_word {
        words.last().is_some_and(secret_word)
    } else {
        words.iter().any(secret_word)
    };
    let upper = name.to_ascii_uppercase();
    by_word || SECRET_ENDINGS.iter().any(|e| upper.ends_with(e))
}

/// The words of a name, upper-cased: split at `_`, `-`, `.` and where a
/// lower-case letter is followed by an upper-case one.
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.') {
            words.push(std::mem::take(&mut current));
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_uppercase());
    }
    words.push(current);
    words.retain(|w| !w.is_empty());
    words
}

/// Whether `word` is shaped like a known token.
fn is_token(word: &str) -> bool {
    TOKEN_SHAPES.iter().any(|&(prefix, least, allowed)| {
        word.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= least
                && rest.bytes().all(allowed)
                && (prefix != "sk-" || rest.bytes().any(|b| b.is_ascii_digit()))
                && (prefix != "eyJ" || rest.bytes().filter(|&b| b == b'.').count() == 2)
        })
    })
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn word_end(bytes: &[u8], start: usize) -> usize {
    start
        + bytes[start..]
            .iter()
            .position(|&b| !is_word(b))
            .unwrap_or(bytes.len() - start)
}

fn word_after_space(bytes: &[u8], p: usize) -> bool {
    matches!(bytes.get(p), Some(b' ' | b'\t'))
        && bytes
            .get(skip_blanks(bytes, p))
            .is_some_and(|b| !b.is_ascii_whitespace())
}

fn skip_blanks(bytes: &[u8], mut p: usize) -> usize {
    while matches!(bytes.get(p), Some(b' ' | b'\t')) {
        p += 1;
    }
    p
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn is_upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
}

fn is_jwt_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expected: &str) {
        assert_eq!(redact(line), expected, "{line:?}");
    }

    #[test]
    fn secret_assignments_lose_their_values() {
        check(
            "HF_TOKEN=hunter2 MODEL=llama",
            "HF_TOKEN=[REDACTED] MODEL=llama",
        );
        check(
            "export OPENAI_API_KEY='abc def'; PORT=8000",
            "export OPENAI_API_KEY='[REDACTED]'; PORT=8000",
        );
        check(
            "Namespace(api_key=xyz, model='m', db_password=\"p w\")",
            "Namespace(api_key=[REDACTED], model='m', db_password=\"[REDACTED]\")",
        );
        check(
            "{\"client_secret\": \"s3cr3t\", \"n\": 1}",
            "{\"client_secret\": \"[REDACTED]\", \"n\": 1}",
        );
        check("x-api-key: abc123", "x-api-key: [REDACTED]");
        check(
            "authToken=abc accesstoken=def",
            "authToken=[REDACTED] accesstoken=[REDACTED]",
        );
        check(
            "AWS_SECRET_ACCESS_KEY = wJalr AWS_SESSION_TOKEN=FwoG",
            "AWS_SECRET_ACCESS_KEY = [REDACTED] AWS_SESSION_TOKEN=[REDACTED]",
        );
        check(
            "serve --hf-token abc --api-key=def --port 8000",
            "serve --hf-token [REDACTED] --api-key=[REDACTED] --port 8000",
        );
        check("CREDENTIALS=a,b", "CREDENTIALS=[REDACTED],b");
    }

    #[test]
    fn credentials_after_a_scheme_are_redacted_the_scheme_kept() {
        check(
            "Authorization: Bearer abc.def-ghi",
            "Authorization: Bearer [REDACTED]",
        );
        check(
            "sent header authorization=\"Bearer xyz\"",
            "sent header authorization=\"Bearer [REDACTED]\"",
        );
        check("curl -H 'bearer  tok123'", "curl -H 'bearer  [REDACTED]'");
        check(
            "Authorization: Basic dXNlcjpwYXNz",
            "Authorization: Basic [REDACTED]",
        );
    }

    #[test]
    fn token_shapes_are_redacted_anywhere() {
        let hf = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345";
        let sk = "sk-proj-Abc123_def456-ghi789jkl";
        check(
            &format!("cannot download: 401 for token {hf} (invalid)"),
            "cannot download: 401 for token [REDACTED] (invalid)",
        );
        check(&format!("using {sk}."), "using [REDACTED].");
        check(
            "ghp_0123456789abcdefghijABCDEFGHIJ0123 and AKIAIOSFODNN7EXAMPLE",
            "[REDACTED] and [REDACTED]",
        );
        check(
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
            "jwt [REDACTED]",
        );
        check(
            "proxy https://user:p4ss@proxy.local:3128/x",
            "proxy https://user:[REDACTED]@proxy.local:3128/x",
        );
    }

    #[test]
    fn ordinary_engine_output_is_kept() {
        for line in [
            "INFO 05-01 12:00:00 llm_engine.py:100] Initializing an LLM engine with config: \
             model='meta-llama/Llama-3-8B', tokenizer='meta-llama/Llama-3-8B', \
             max_num_batched_tokens=8192, max_model_len=8192",
            "KeyError: 'model.layers.0.mlp.weight'",
            "Traceback (most recent call last):",
            "  File \"/usr/lib/python3/site-packages/vllm/main.py\", line 3, in <module>",
            "Avg prompt throughput: 12.5 tokens/s, Running: 1 reqs",
            "hf_hub_download failed; disk-cache-size=20 task-1234567890abcdefghijk",
            "http://127.0.0.1:8000/health ok",
            "std::runtime_error: out of memory",
            "PWD=/srv/models keyboard=none",
            "Basic block size 16; prompt token ids: [1, 2]",
        ] {
            check(line, line);
        }
    }

    #[test]
    fn redaction_is_borrowed_when_nothing_changes_and_keeps_utf8() {
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
        check("héllo TOKEN=ünïcode Ω", "héllo TOKEN=[REDACTED] Ω");
        check("", "");
        check("TOKEN=", "TOKEN=");
        check("password:", "password:");
    }
}
