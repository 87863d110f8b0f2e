//! The conformance suite: black-box checks against a FlexInfer gateway.
//!
//! - [`checks`]: the checks, each with a stable id.
//! - [`report`]: console, JSON and JUnit XML reports.
//! - [`local`]: `--local` mode, a simulator and a gateway started on loopback.
//! - [`http`]: the small HTTP client the checks use.

pub mod checks;
pub mod http;
pub mod local;
pub mod report;

use std::time::{Duration, Instant};

use serde::Serialize;

use self::http::Target;

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
}

/// Which checks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Protocol shapes, error answers and model extraction; a few seconds.
    Quick,
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
    if ctx.model.is_none() {
        ctx.model = checks::first_listed_model(&ctx).await;
    }
    let mut results = Vec::new();
    for check in checks::for_profile(profile) {
        let t0 = Instant::now();
        let verdict = (check.run)(&ctx).await;
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
