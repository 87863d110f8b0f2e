//! The conformance suite: black-box checks against a FlexInfer gateway.
//!
//! - [`checks`]: the quick profile's checks and the helpers every check uses.
//! - [`streaming`], [`routing`], [`coldstart`], [`limits`]: the full profile's
//!   checks (chunk spacing and oversize bodies, routing strategies, cold
//!   start, auth and rate limits).
//! - [`roles`]: which model each of those checks uses.
//! - [`report`]: console, JSON and JUnit XML reports.
//! - [`local`]: `--local` mode, simulators and a gateway started on loopback.
//! - [`http`]: the small HTTP client the checks use.

pub mod checks;
pub mod coldstart;
pub mod http;
pub mod limits;
pub mod local;
pub mod report;
pub mod roles;
pub mod routing;
pub mod streaming;

use std::time::{Duration, Instant};

use serde::Serialize;

use self::http::{Call, Target};
use self::roles::{Role, RoleMap};

/// What a check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The gateway behaved as specified.
    Pass,
    /// It did not; the evidence says how.
    Fail,
    /// The check could not run here; the evidence says why.
    Skip,
}

impl Outcome {
    /// `PASS`, `FAIL` or `SKIP`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Skip => "SKIP",
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// Stable id, e.g. `proto.chat.shape`.
    pub id: &'static str,
    /// One line: what it proves.
    pub description: &'static str,
    /// Pass, fail or skip.
    pub outcome: Outcome,
    /// On failure, what was seen; on skip, why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// How long it took.
    pub duration_ms: u64,
}

/// What the checks run against.
#[derive(Debug, Clone)]
pub struct Context {
    /// The gateway.
    pub gateway: Target,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// The model the checks ask for; the first one `/v1/models` lists when `None`.
    pub model: Option<String>,
    /// The request recorder of the backend behind `model`, when it is a
    /// `flexinfer-sim` whose address is known (`--local`, `--sim-url`).
    pub sim: Option<Target>,
    /// Models the user mapped to roles (`--role ROLE=MODEL`).
    pub roles: RoleMap,
    /// What `GET /v1/models` listed when the run started.
    pub listed: Vec<ListedModel>,
    /// The gateway's `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// The gateway's `--max-queue-size`.
    pub max_queue_size: usize,
    /// Check ids (or group prefixes ending in `.`) not to run (`--skip`).
    pub skip: Vec<String>,
}

/// The gateway's `--max-body-bytes` default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// The gateway's `--max-queue-size` default (`PROXY_MAX_QUEUE_SIZE`).
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 100;

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedModel {
    /// Its id.
    pub id: String,
    /// `status.phase`, when the gateway reports one (`Idle`, `Ready`, ...).
    pub phase: Option<String>,
}

impl Context {
    /// A context for `gateway` with defaults for everything else.
    pub fn new(gateway: Target) -> Self {
        Self {
            gateway,
            api_key: None,
            model: None,
            sim: None,
            roles: RoleMap::new(),
            listed: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_queue_size: DEFAULT_MAX_QUEUE_SIZE,
            skip: Vec::new(),
        }
    }

    /// The `--skip` entry that leaves out check `id`, if any.
    pub fn skipped_by(&self, id: &str) -> Option<&str> {
        self.skip
            .iter()
            .find(|s| *s == id || (s.ends_with('.') && id.starts_with(s.as_str())))
            .map(String::as_str)
    }

    /// The model doing `role`: the one mapped with `--role`, else the
    /// well-known name when the gateway lists it.
    pub fn role_model(&self, role: Role) -> Option<&str> {
        if let Some(model) = self.roles.get(&role) {
            return Some(model);
        }
        let name = role.well_known();
        self.listed.iter().any(|m| m.id == name).then_some(name)
    }

    /// The phase the model list showed for `model` when the run started.
    pub fn listed_phase(&self, model: &str) -> Option<&str> {
        self.listed
            .iter()
            .find(|m| m.id == model)
            .and_then(|m| m.phase.as_deref())
    }

    /// Reads `GET /v1/models` into [`Context::listed`] (empty when it cannot).
    pub async fn read_model_list(&mut self) {
        let Ok(resp) = Call::get("/v1/models")
            .send(&self.gateway, self.api_key.as_deref())
            .await
        else {
            return;
        };
        let Some(body) = resp.json() else { return };
        self.listed = body["data"]
            .as_array()
            .map(|data| {
                data.iter()
                    .filter_map(|e| {
                        Some(ListedModel {
                            id: e["id"].as_str()?.to_owned(),
                            phase: e["status"]["phase"].as_str().map(str::to_owned),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
    }
}

/// Which checks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Protocol shapes, error answers and model extraction; a few seconds.
    Quick,
    /// Quick, plus streaming chunk spacing, oversize bodies, routing, cold
    /// start, auth and rate limits.
    Full,
}

impl Profile {
    /// `quick` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Full => "full",
        }
    }
}

/// A finished run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The gateway's base URL.
    pub gateway: String,
    /// The profile run.
    pub profile: Profile,
    /// The model the checks used, if one was found.
    pub model: Option<String>,
    /// Every check, in order.
    pub checks: Vec<CheckResult>,
    /// Wall time of the whole run.
    pub duration_ms: u64,
}

impl RunReport {
    /// Checks with this outcome.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.checks.iter().filter(|c| c.outcome == outcome).count()
    }

    /// `N passed, N failed, N skipped`.
    pub fn summary_line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.count(Outcome::Pass),
            self.count(Outcome::Fail),
            self.count(Outcome::Skip)
        )
    }

    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.count(Outcome::Fail) > 0
    }
}

/// Runs `profile` against `ctx`, calling `on_result` as each check finishes.
pub async fn run(
    mut ctx: Context,
    profile: Profile,
    mut on_result: impl FnMut(&CheckResult),
) -> RunReport {
    let started = Instant::now();
    ctx.read_model_list().await;
    if ctx.model.is_none() {
        ctx.model = ctx.listed.first().map(|m| m.id.clone());
    }
    let mut results = Vec::new();
    for check in checks::for_profile(profile) {
        let t0 = Instant::now();
        let verdict = match ctx.skipped_by(check.id) {
            Some(entry) => Ok(checks::Verdict::Skip(format!(
                "left out with --skip {entry}"
            ))),
            None => (check.run)(&ctx).await,
        };
        let (outcome, evidence) = match verdict {
            Ok(checks::Verdict::Pass) => (Outcome::Pass, None),
            Ok(checks::Verdict::Skip(why)) => (Outcome::Skip, Some(why)),
            Err(evidence) => (Outcome::Fail, Some(format!("{evidence:#}"))),
        };
        let result = CheckResult {
            id: check.id,
            description: check.description,
            outcome,
            evidence,
            duration_ms: millis(t0.elapsed()),
        };
        on_result(&result);
        results.push(result);
    }
    RunReport {
        gateway: ctx.gateway.base_url(),
        profile,
        model: ctx.model,
        checks: results,
        duration_ms: millis(started.elapsed()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_prefer_the_mapping_then_the_well_known_listed_name() {
        let mut ctx = Context::new(Target::parse("http://127.0.0.1:1").unwrap());
        assert_eq!(ctx.role_model(Role::Session), None);
        ctx.listed = vec![
            ListedModel {
                id: "conformance-session".into(),
                phase: Some("Ready".into()),
            },
            ListedModel {
                id: "conformance-cold".into(),
                phase: Some("Idle".into()),
            },
        ];
        assert_eq!(ctx.role_model(Role::Session), Some("conformance-session"));
        assert_eq!(ctx.role_model(Role::Prefix), None);
        assert_eq!(ctx.listed_phase("conformance-cold"), Some("Idle"));
        assert_eq!(ctx.listed_phase("nope"), None);
        ctx.roles.insert(Role::Session, "my-chat".into());
        assert_eq!(ctx.role_model(Role::Session), Some("my-chat"));
    }

    #[test]
    fn skip_entries_match_ids_and_group_prefixes() {
        let mut ctx = Context::new(Target::parse("http://127.0.0.1:1").expect("target"));
        ctx.skip = vec!["proto.embeddings.shape".into(), "routing.".into()];
        assert_eq!(
            ctx.skipped_by("proto.embeddings.shape"),
            Some("proto.embeddings.shape")
        );
        assert_eq!(ctx.skipped_by("routing.session.sticky"), Some("routing."));
        assert_eq!(ctx.skipped_by("proto.embeddings"), None);
        assert_eq!(ctx.skipped_by("proto.chat.shape"), None);
    }
}
