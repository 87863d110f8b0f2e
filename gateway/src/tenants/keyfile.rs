//! The API-key file: YAML naming tenants, their keys (plain or as SHA-256
//! digests), the models each may use, its priority class and its limits.
//!
//! ```yaml
//! tenants:
//!   - name: team-a
//!     keys:
//!       - sk-team-a-1                 # the key itself
//!       - sha256:9f86d081884c7d65...  # or the SHA-256 of it (64 hex digits)
//!     models: [llama-3-8b, "qwen-*"]  # optional; every model when absent
//!     priority: high                  # high | normal (default) | low
//!     limits:                         # optional, over all its models
//!       requestsPerSecond: 5
//!       burst: 10
//!       tokensPerMinute: 100000
//!       countTokens: total            # input | output | total (default)
//!     modelLimits:                    # optional, per model it uses
//!       llama-3-8b: { tokensPerMinute: 20000 }
//! ```
//!
//! Names are the tenants' own: [`RESERVED_NAMES`] (`anonymous`, the
//! tenant of `--auth-token` keys) are refused.
//!
//! Errors name the file's line: YAML and field errors where the parser
//! stopped, semantic ones (a bad digest, a key given twice) at the first
//! line holding the offending text.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// Every tenant.
    pub tenants: Vec<TenantSpec>,
}

/// One tenant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantSpec {
    /// Name shown in metrics, logs and `/admin/tenants`.
    pub name: String,
    /// Keys, each the key itself or `sha256:<64 hex digits>`.
    pub keys: Vec<String>,
    /// Models it may use: exact names, or prefixes ending in `*`. Every
    /// model when absent.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Priority class of its queued requests.
    #[serde(default)]
    pub priority: Priority,
    /// Limits over all its models.
    #[serde(default)]
    pub limits: Option<LimitSpec>,
    /// Limits per model, in addition to `limits`.
    #[serde(default)]
    pub model_limits: BTreeMap<String, LimitSpec>,
}

/// Priority class, highest first. Background requests (the workload-class
/// header) rank below `low`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Served before every other class.
    High,
    /// The default class.
    #[default]
    Normal,
    /// Served after `high` and `normal`.
    Low,
}

impl Priority {
    /// The class name.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

/// Request and token limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitSpec {
    /// Sustained requests per second.
    pub requests_per_second: Option<f64>,
    /// Requests allowed at once above the rate (default: one second's worth, at least 1).
    pub burst: Option<u32>,
    /// Sustained tokens per minute.
    pub tokens_per_minute: Option<u64>,
    /// Tokens allowed at once (default: one minute's worth).
    pub token_burst: Option<u64>,
    /// Which tokens count against `tokensPerMinute`.
    #[serde(default)]
    pub count_tokens: TokenKind,
}

/// Which tokens a token budget counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// Prompt tokens only.
    Input,
    /// Completion tokens only.
    Output,
    /// Prompt and completion tokens.
    #[default]
    Total,
}

/// A key as the file gives it: its SHA-256 digest.
pub type KeyDigest = [u8; 32];

/// A file that cannot be used, with the line it names.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct KeyFileError {
    path: String,
    message: String,
}

impl KeyFile {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let error = |message: String| KeyFileError {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(format!("cannot read: {e}")))?;
        Self::parse(&text).map_err(error)
    }

    /// Parses and checks `text`; the error names its line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: KeyFile = serde_yaml::from_str(text).map_err(|e| {
            let message = e.to_string();
            match e.location() {
                // The parser's message ends with "at line L column C".
                Some(at) if !message.contains(" at line ") => {
                    format!("line {} column {}: {message}", at.line(), at.column())
                }
                _ => message,
            }
        })?;
        file.check(text)?;
        Ok(file)
    }

    /// Semantic checks: names, keys, digests, patterns and limits.
    fn check(&self, text: &str) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        let mut digests = std::collections::HashMap::new();
        // Where the tenant being checked starts: its problems are searched
        // for from there.
        let mut from = 0;
        for tenant in &self.tenants {
            let name = tenant.name.as_str();
            from = tenant_start(text, from, name);
            let at = |needle: &str, what: String| match line_of(text, from, needle) {
                Some(line) => format!("line {line}: {what}"),
                None => what,
            };
            if name.trim().is_empty() || name.contains(|c: char| c.is_control()) {
                return Err(at(
                    "name:",
                    format!("tenant name {name:?} is empty or not printable"),
                ));
            }
            if let Some(why) = reserved(name) {
                return Err(at(
                    "name:",
                    format!("tenant name {name:?} is reserved: {why}"),
                ));
            }
            if !names.insert(name) {
                return Err(at(name, format!("tenant {name:?} appears twice")));
            }
            if tenant.keys.is_empty() {
                return Err(at(name, format!("tenant {name:?} has no keys")));
            }
            for key in &tenant.keys {
                let digest =
                    digest_of(key).map_err(|e| at(key, format!("tenant {name:?}: {e}")))?;
                if let Some(other) = digests.insert(digest, name) {
                    return Err(at(
                        key,
                        format!("a key of tenant {name:?} is also a key of tenant {other:?}"),
                    ));
                }
            }
            for pattern in tenant.models.iter().flatten() {
                let stem = pattern.strip_suffix('*').unwrap_or(pattern);
                if pattern.is_empty() || stem.contains('*') {
                    return Err(at(
                        pattern,
                        format!("tenant {name:?}: model pattern {pattern:?} must be a name or a prefix ending in '*'"),
                    ));
                }
            }
            let limits = tenant.limits.iter().map(|l| ("limits", l));
            let per_model = tenant.model_limits.iter().map(|(m, l)| (m.as_str(), l));
            for (place, limit) in limits.chain(per_model) {
                limit
                    .check()
                    .map_err(|e| at(place, format!("tenant {name:?} {place}: {e}")))?;
            }
        }
        Ok(())
    }
}

/// Tenant names the gateway gives callers itself, with why: a tenant of
/// the file by such a name would be one caller with them (their stored
/// responses, cache salt, budgets and metrics).
pub const RESERVED_NAMES: &[(&str, &str)] = &[(
    super::ANONYMOUS,
    "it is the tenant of the --auth-token / --auth-token-file keys; name the tenant otherwise",
)];

/// Why `name` cannot name a tenant of the file, if it cannot: a reserved
/// name, in any case and with blanks around it.
fn reserved(name: &str) -> Option<&'static str> {
    let name = name.trim();
    RESERVED_NAMES
        .iter()
        .find(|(reserved, _)| reserved.eq_ignore_ascii_case(name))
        .map(|&(_, why)| why)
}

impl LimitSpec {
    fn check(&self) -> Result<(), String> {
        if let Some(rps) = self.requests_per_second {
            if !(rps.is_finite() && rps > 0.0) {
                return Err(format!(
                    "requestsPerSecond must be a positive number, not {rps}"
                ));
            }
        }
        if self.burst == Some(0) {
            return Err("burst must be at least 1".into());
        }
        if self.tokens_per_minute == Some(0) || self.token_burst == Some(0) {
            return Err("tokensPerMinute and tokenBurst must be at least 1".into());
        }
        if self.token_burst.is_some() && self.tokens_per_minute.is_none() {
            return Err("tokenBurst needs tokensPerMinute".into());
        }
        Ok(())
    }
}

/// The digest a key entry stands for: `sha256:<hex>` as given, else the
/// SHA-256 of the key (trimmed).
pub fn digest_of(entry: &str) -> Result<KeyDigest, String> {
    use sha2::{Digest, Sha256};
    let entry = entry.trim();
    if entry.is_empty() {
        return Err("empty key".into());
    }
    let Some(hex) = entry.strip_prefix("sha256:") else {
        return Ok(Sha256::digest(entry.as_bytes()).into());
    };
    let bytes = hex.as_bytes();
    if bytes.len() != 64 || !bytes.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!(
            "{entry:?} is not sha256: followed by 64 hex digits"
        ));
    }
    let mut digest = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let nibble = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        digest[i] = nibble(pair[0]) << 4 | nibble(pair[1]);
    }
    Ok(digest)
}

/// The 1-based line of the first occurrence of `needle` in `text` at or
/// after byte `from`.
fn line_of(text: &str, from: usize, needle: &str) -> Option<usize> {
    let at = from + text.get(from..)?.find(needle)?;
    Some(1 + text[..at].matches('\n').count())
}

/// Where the entry of tenant `name` starts, searching from `from` (the
/// previous tenant's start); `from` when it cannot be told.
fn tenant_start(text: &str, from: usize, name: &str) -> usize {
    let rest = text.get(from..).unwrap_or_default();
    ["name: ", "name: \"", "name: '", "name:"]
        .iter()
        .filter_map(|p| rest.find(&format!("{p}{name}")))
        .min()
        .map_or(from, |at| {
            // Back to the start of its line.
            from + rest[..at].rfind('\n').map_or(0, |nl| nl + 1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
tenants:
  - name: team-a
    keys: [alpha]
    models: [llama, \"qwen-*\"]
    priority: high
    limits: {requestsPerSecond: 2, tokensPerMinute: 600, countTokens: output}
    modelLimits:
      llama: {tokensPerMinute: 60}
  - name: batch
    keys: [\"sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\"]
";

    #[test]
    fn a_good_file_parses() {
        let file = KeyFile::parse(GOOD).unwrap();
        assert_eq!(file.tenants.len(), 2);
        let a = &file.tenants[0];
        assert_eq!(a.priority, Priority::High);
        assert_eq!(a.limits.unwrap().count_tokens, TokenKind::Output);
        assert_eq!(a.model_limits["llama"].tokens_per_minute, Some(60));
        assert_eq!(file.tenants[1].priority, Priority::Normal);
    }

    #[test]
    fn digests_and_plain_keys_are_the_same_key() {
        // sha256("test")
        let given =
            digest_of("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
                .unwrap();
        assert_eq!(given, digest_of("test").unwrap());
        assert_eq!(digest_of(" test ").unwrap(), given, "keys are trimmed");
        assert!(digest_of("sha256:abc")
            .unwrap_err()
            .contains("64 hex digits"));
        assert!(digest_of("").is_err());
    }

    #[test]
    fn reserved_names_are_refused_with_their_line() {
        for name in ["anonymous", "Anonymous", "\" anonymous\""] {
            let text =
                format!("tenants:\n  - name: a\n    keys: [x]\n  - name: {name}\n    keys: [y]\n");
            let err = KeyFile::parse(&text).unwrap_err();
            assert!(err.starts_with("line 4: tenant name "), "{name}: {err}");
            assert!(err.contains("is reserved"), "{name}: {err}");
            assert!(err.contains("--auth-token"), "{name}: {err}");
        }
        assert!(KeyFile::parse("tenants:\n  - name: anonymous-team\n    keys: [x]\n").is_ok());
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "tenants:\n  - name: a\n    keys: [x]\n    nmae: b\n",
                "line 4",
            ),
            (
                "tenants:\n  - name: a\n    keys: [x]\n    priority: urgent\n",
                "line 4",
            ),
            (
                "tenants:\n  - name: a\n    keys:\n      - sha256:zz\n",
                "line 4",
            ),
            (
                "tenants:\n  - name: a\n    keys: [x]\n  - name: b\n    keys: [y, x]\n",
                "line 5",
            ),
            (
                "tenants:\n  - name: a\n    keys: [x]\n  - name: a\n    keys: [y]\n",
                "line 2",
            ),
            ("tenants:\n  - name: a\n    keys: []\n", "line 2"),
            (
                "tenants:\n  - name: a\n    keys: [x]\n    models: [\"q*w\"]\n",
                "line 4",
            ),
            (
                "tenants:\n  - name: a\n    keys: [x]\n    limits:\n      requestsPerSecond: -1\n",
                "line 4",
            ),
            ("tenants: [\n", "line"),
        ];
        for (text, line) in cases {
            let err = KeyFile::parse(text).unwrap_err();
            assert!(err.contains(line), "{text:?}: {err}");
        }
    }
}
