//! Tenants: who is calling, which models they may use, and the requests/s
//! and tokens/min budgets they spend (`--api-key-file`, see
//! `docs/tenants.md`).
//!
//! A key identifies one tenant. Admission takes one request and an
//! estimate of the request's tokens from the tenant's buckets (tenant-wide
//! and per model); when the answer ends the token buckets are corrected
//! with the `usage` the engine reported ([`TokenCharge`]).

mod bucket;
pub mod fleet;
pub mod fleet_usage;
pub mod keyfile;
mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::HeaderValue;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use bucket::{Bucket, Refusal};
pub use keyfile::{KeyFile, LimitSpec, Priority, TokenKind};
pub use usage::{Usage, UsageMeter, UsageStripper};

use crate::errors::ApiError;
use fleet::FleetView;
use keyfile::KeyDigest;

/// Name of the tenant of keys given by `--auth-token` / `--auth-token-file`.
pub const ANONYMOUS: &str = "anonymous";

/// A tenant: its name, models, priority and buckets.
#[derive(Debug)]
pub struct Tenant {
    /// Name in metrics, logs and reports.
    pub name: Arc<str>,
    /// Priority class of its requests.
    pub priority: Priority,
    models: Option<Vec<String>>,
    limits: Option<Arc<Limits>>,
    model_limits: HashMap<String, Arc<Limits>>,
    /// The secret the tenant's prefix-cache salt is derived with: a digest
    /// of its keys' digests, so the same on every replica reading the same
    /// keys and unknown to anyone without them.
    salt_key: KeyDigest,
    /// Every tenant's recent usage across the fleet (shared by all).
    usage: Arc<fleet_usage::FleetUsage>,
}

/// The secret a tenant's cache salt is keyed with, from its keys' digests
/// (in any order).
fn salt_key(name: &str, digests: &[KeyDigest]) -> KeyDigest {
    let mut sorted = digests.to_vec();
    sorted.sort_unstable();
    let mut hash = Sha256::new();
    hash.update(b"flexinfer cache salt key\0");
    hash.update(name.as_bytes());
    hash.update(b"\0");
    for d in &sorted {
        hash.update(d);
    }
    hash.finalize().into()
}

/// The buckets of one limit.
#[derive(Debug)]
pub struct Limits {
    spec: LimitSpec,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

impl Limits {
    fn new(spec: LimitSpec, fleet: &Arc<FleetView>) -> Self {
        let requests = spec.requests_per_second.map(|rps| {
            let burst = spec.burst.map_or(rps.ceil().max(1.0), f64::from);
            Bucket::shared(rps, burst, fleet.clone())
        });
        let tokens = spec.tokens_per_minute.map(|tpm| {
            let burst = spec.token_burst.unwrap_or(tpm) as f64;
            Bucket::shared(tpm as f64 / 60.0, burst, fleet.clone())
        });
        Self {
            spec,
            requests,
            tokens,
        }
    }

    /// The tokens a request is charged under this limit.
    fn cost(&self, estimate: Estimate) -> f64 {
        match self.spec.count_tokens {
            TokenKind::Input => estimate.prompt as f64,
            TokenKind::Output => estimate.output as f64,
            TokenKind::Total => (estimate.prompt + estimate.output) as f64,
        }
    }

    /// The tokens an answer actually used under this limit.
    fn used(&self, usage: &Usage) -> f64 {
        match self.spec.count_tokens {
            TokenKind::Input => usage.prompt_tokens as f64,
            TokenKind::Output => usage.completion_tokens as f64,
            TokenKind::Total => (usage.prompt_tokens + usage.completion_tokens) as f64,
        }
    }
}

/// What admission expects a request to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Prompt tokens ([`crate::tokens::estimate_prompt_tokens`]).
    pub prompt: u64,
    /// Output tokens: `max_tokens` / `max_completion_tokens` /
    /// `max_output_tokens`, 0 when absent (corrected at the end).
    pub output: u64,
}

/// `x-ratelimit-*` headers in OpenAI's style, as values ready for the
/// answer's head.
pub type RateHeaders = Vec<(&'static str, HeaderValue)>;

/// Formats a reset time as OpenAI does (`1s`, `6m0s`, `250ms`).
fn reset(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64().ceil() as u64;
    match secs {
        s if s < 60 => format!("{s}s"),
        s => format!("{}m{}s", s / 60, s % 60),
    }
}

/// The limit, remaining and reset headers of one bucket, given its
/// capacity and its level (tokens left, time until full).
fn rate_headers(
    kind: &str,
    capacity: f64,
    (left, full_in): (f64, Duration),
) -> [(&'static str, HeaderValue); 3] {
    let (limit, remaining, reset_name) = match kind {
        "requests" => (
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ),
        _ => (
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
        ),
    };
    // `reset` writes digits and unit letters only: always a valid value.
    let reset_value =
        HeaderValue::try_from(reset(full_in)).unwrap_or_else(|_| HeaderValue::from_static("0s"));
    [
        (limit, HeaderValue::from(capacity as u64)),
        (remaining, HeaderValue::from(left as u64)),
        (reset_name, reset_value),
    ]
}

/// The code of a charge refused only because this replica took its share
/// of the fleet's exchange window: the request is tried again in the next
/// window rather than refused ([`fleet`]).
pub const NEXT_WINDOW: &str = "rate_limit_next_window";

/// The 429 for a refused charge.
fn refused(kind: &str, tenant: &str, refusal: Refusal, bucket: &Bucket, cost: f64) -> ApiError {
    let headers = rate_headers(kind, bucket.capacity(), bucket.remaining())
        .into_iter()
        .map(|(name, value)| (name, value.to_str().unwrap_or_default().to_owned()))
        .collect();
    let mut err = match refusal {
        Refusal::NextWindow(wait) => {
            let mut e = ApiError::rate_limited(wait.as_secs_f64().ceil() as u64);
            e.code = NEXT_WINDOW;
            e.message = format!(
                "Rate limit reached for tenant {tenant} on {kind} on this replica: please retry after {}",
                reset(wait)
            );
            e
        }
        Refusal::Wait(wait) => {
            let mut e = ApiError::rate_limited(wait.as_secs_f64().ceil() as u64);
            e.message = format!(
                "Rate limit reached for tenant {tenant} on {kind}: please retry after {}",
                reset(wait)
            );
            e
        }
        Refusal::TooLarge => {
            let mut e = ApiError::rate_limited(bucket.remaining().1.as_secs_f64().ceil() as u64);
            e.message = format!(
                "Request too large for tenant {tenant}: it needs {} {kind}, the limit is {}",
                cost as u64,
                bucket.capacity() as u64
            );
            e
        }
    };
    err.extra_mut().headers = headers;
    err
}

impl Tenant {
    fn from_spec(
        spec: &keyfile::TenantSpec,
        digests: &[KeyDigest],
        previous: Option<&Tenant>,
        fleet: &Arc<FleetView>,
        usage: &Arc<fleet_usage::FleetUsage>,
    ) -> Self {
        // Buckets of unchanged limits carry over a reload.
        let keep = |old: Option<&Arc<Limits>>, spec: LimitSpec| match old {
            Some(old) if old.spec == spec => old.clone(),
            _ => Arc::new(Limits::new(spec, fleet)),
        };
        Self {
            name: Arc::from(spec.name.as_str()),
            priority: spec.priority,
            models: spec.models.clone(),
            limits: spec
                .limits
                .map(|l| keep(previous.and_then(|p| p.limits.as_ref()), l)),
            model_limits: spec
                .model_limits
                .iter()
                .map(|(model, l)| {
                    let old = previous.and_then(|p| p.model_limits.get(model));
                    (model.clone(), keep(old, *l))
                })
                .collect(),
            salt_key: salt_key(&spec.name, digests),
            usage: usage.clone(),
        }
    }

    fn anonymous(digests: &[KeyDigest], usage: &Arc<fleet_usage::FleetUsage>) -> Self {
        Self {
            name: Arc::from(ANONYMOUS),
            priority: Priority::Normal,
            models: None,
            limits: None,
            model_limits: HashMap::new(),
            salt_key: salt_key(ANONYMOUS, digests),
            usage: usage.clone(),
        }
    }

    /// One of its requests used `tokens` (prompt and completion) here:
    /// counted in its fleet-wide recent usage.
    pub fn used(&self, tokens: u64) {
        self.usage.used_here(&self.name, tokens);
    }

    /// The `cache_salt` engines get for this tenant's requests whose own
    /// salt was `client` (raw JSON): the same on every replica, different
    /// between tenants, and not computable without the tenant's keys.
    pub fn cache_salt(&self, client: Option<&str>) -> String {
        let mut hash = Sha256::new();
        hash.update(self.salt_key);
        hash.update(client.unwrap_or_default().as_bytes());
        let digest = hash.finalize();
        format!("t-{}", hex::encode(&digest[..16]))
    }

    /// Whether the tenant may use `model` (an exact name, or a prefix
    /// pattern ending in `*`).
    pub fn allows(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|patterns| {
            patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => model.starts_with(prefix),
                None => p == model,
            })
        })
    }

    /// The most output tokens one request of `model` with `prompt` prompt
    /// tokens can be charged by the tenant's token budgets that count
    /// output: the smallest such bucket, less the prompt where it counts
    /// both. `None` when no budget counts output.
    pub fn output_room(&self, model: &str, prompt: u64) -> Option<u64> {
        self.limits_for(model)
            .filter_map(|l| {
                let bucket = l.tokens.as_ref()?;
                let capacity = bucket.capacity() as u64;
                match l.spec.count_tokens {
                    TokenKind::Input => None,
                    TokenKind::Output => Some(capacity),
                    TokenKind::Total => Some(capacity.saturating_sub(prompt)),
                }
            })
            .min()
    }

    /// Whether any limit applies to `model`'s requests.
    pub fn has_limits(&self, model: &str) -> bool {
        self.limits.is_some() || self.model_limits.contains_key(model)
    }

    fn limits_for<'a>(&'a self, model: &str) -> impl Iterator<Item = &'a Arc<Limits>> + 'a {
        self.limits.iter().chain(self.model_limits.get(model))
    }

    /// Takes one request and the estimated tokens from every limit of
    /// `model`; on refusal nothing stays taken. The charge corrects the
    /// token buckets when the answer's usage is known.
    pub fn admit(&self, model: &str, estimate: Estimate) -> Result<TokenCharge, ApiError> {
        let limits: Vec<&Arc<Limits>> = self.limits_for(model).collect();
        let mut taken_requests: Vec<&Bucket> = Vec::new();
        let undo = |requests: &[&Bucket], tokens: &[(Arc<Limits>, f64)]| {
            requests.iter().for_each(|b| b.adjust(1.0));
            for (l, cost) in tokens {
                if let Some(b) = &l.tokens {
                    b.adjust(*cost);
                }
            }
        };
        // The headers show the narrowest limit (the per-model one when
        // there is one), as its buckets stood right after the charge.
        let narrowest = limits.len().saturating_sub(1);
        let mut headers = RateHeaders::with_capacity(6);
        for (i, l) in limits.iter().enumerate() {
            if let Some(b) = &l.requests {
                match b.take_reporting(1.0) {
                    Ok(level) if i == narrowest => {
                        headers.extend(rate_headers("requests", b.capacity(), level))
                    }
                    Ok(_) => {}
                    Err(r) => {
                        undo(&taken_requests, &[]);
                        return Err(refused("requests", &self.name, r, b, 1.0));
                    }
                }
                taken_requests.push(b);
            }
        }
        let mut charged: Vec<(Arc<Limits>, f64)> = Vec::new();
        for (i, l) in limits.iter().enumerate() {
            if let Some(b) = &l.tokens {
                let cost = l.cost(estimate);
                match b.take_reporting(cost) {
                    Ok(level) if i == narrowest => {
                        headers.extend(rate_headers("tokens", b.capacity(), level))
                    }
                    Ok(_) => {}
                    Err(r) => {
                        undo(&taken_requests, &charged);
                        return Err(refused("tokens", &self.name, r, b, cost));
                    }
                }
                charged.push(((*l).clone(), cost));
            }
        }
        Ok(TokenCharge {
            charged,
            headers,
            settled: false,
        })
    }

    /// The tenant's entry in `/admin/tenants`.
    fn report(&self) -> Value {
        let limit = |l: &Limits| {
            let bucket = |b: &Option<Bucket>| {
                b.as_ref().map(|b| {
                    let (left, full_in) = b.remaining();
                    json!({"capacity": b.capacity() as u64, "remaining": left as u64, "fullInSeconds": full_in.as_secs_f64()})
                })
            };
            json!({
                "requestsPerSecond": l.spec.requests_per_second,
                "tokensPerMinute": l.spec.tokens_per_minute,
                "countTokens": format!("{:?}", l.spec.count_tokens).to_lowercase(),
                "requests": bucket(&l.requests),
                "tokens": bucket(&l.tokens),
            })
        };
        json!({
            "name": &*self.name,
            "priority": self.priority.as_str(),
            "models": self.models,
            "limits": self.limits.as_deref().map(limit),
            "modelLimits": self.model_limits.iter().map(|(m, l)| (m.clone(), limit(l))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// Tokens taken at admission, corrected once the answer's usage is known:
/// refunded when the engine did not answer with success, set to the real
/// figure when it reported usage, left at the estimate otherwise.
#[derive(Debug)]
pub struct TokenCharge {
    charged: Vec<(Arc<Limits>, f64)>,
    /// `x-ratelimit-*` headers after admission.
    pub headers: RateHeaders,
    settled: bool,
}

impl TokenCharge {
    /// Whether any token bucket was charged.
    pub fn charges_tokens(&self) -> bool {
        !self.charged.is_empty()
    }

    /// Corrects the buckets: `succeeded` when the engine answered 2xx,
    /// with the usage it reported.
    pub fn settle(&mut self, succeeded: bool, usage: Option<&Usage>) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        for (limits, cost) in &self.charged {
            let Some(bucket) = &limits.tokens else {
                continue;
            };
            match (succeeded, usage) {
                (false, _) => bucket.adjust(*cost),
                (true, Some(u)) => bucket.adjust(cost - limits.used(u)),
                (true, None) => {}
            }
        }
    }
}

impl Drop for TokenCharge {
    fn drop(&mut self) {
        // An answer that never reached its end (the client left, the
        // gateway failed) keeps its estimate.
        self.settle(true, None);
    }
}

/// The tenants of every accepted key, swapped whole on reload.
pub struct Tenants {
    path: Option<PathBuf>,
    /// Keys from `--auth-token` / `--auth-token-file`: one anonymous tenant.
    anonymous: Vec<KeyDigest>,
    table: ArcSwap<HashMap<KeyDigest, Arc<Tenant>>>,
    /// The replicas the budgets are shared by ([`fleet`]).
    fleet: Arc<FleetView>,
    /// Tenants' recent usage across the fleet ([`fleet_usage`]).
    usage: Arc<fleet_usage::FleetUsage>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tenants({} keys)", self.table.load().len())
    }
}

impl Tenants {
    /// Tenants from the key file at `path` (when given) plus `plain_keys`
    /// as the anonymous tenant; errors name the file's line.
    pub fn load<I, S>(path: Option<&Path>, plain_keys: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let anonymous = plain_keys
            .into_iter()
            .filter(|k| !k.as_ref().trim().is_empty())
            .map(|k| Sha256::digest(k.as_ref().trim().as_bytes()).into())
            .collect();
        let tenants = Self {
            path: path.map(Path::to_path_buf),
            anonymous,
            table: ArcSwap::from_pointee(HashMap::new()),
            fleet: Arc::default(),
            usage: Arc::default(),
        };
        tenants.reload()?;
        anyhow::ensure!(
            !tenants.table.load().is_empty(),
            "auth is enabled but no API key was given"
        );
        Ok(tenants)
    }

    /// Reads the key file again; on error the keys in force stay.
    /// Returns the number of tenants.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let file = match &self.path {
            Some(path) => Some(KeyFile::load(path)?),
            None => None,
        };
        let previous = self.table.load();
        let by_name: HashMap<&str, &Arc<Tenant>> =
            previous.values().map(|t| (&*t.name, t)).collect();
        let mut table = HashMap::new();
        let anonymous = Arc::new(Tenant::anonymous(&self.anonymous, &self.usage));
        for digest in &self.anonymous {
            table.insert(*digest, anonymous.clone());
        }
        let specs = file.as_ref().map_or(&[][..], |f| &f.tenants[..]);
        for spec in specs {
            let old = by_name.get(spec.name.as_str()).map(|t| t.as_ref());
            let digests = spec
                .keys
                .iter()
                .map(|key| keyfile::digest_of(key).map_err(|e| anyhow::anyhow!(e)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let tenant = Arc::new(Tenant::from_spec(
                spec,
                &digests,
                old,
                &self.fleet,
                &self.usage,
            ));
            for digest in digests {
                if table.insert(digest, tenant.clone()).is_some() {
                    anyhow::bail!(
                        "a key of tenant {:?} is also given by --auth-token",
                        spec.name
                    );
                }
            }
        }
        let count = specs.len() + usize::from(!self.anonymous.is_empty());
        drop(by_name);
        drop(previous);
        self.table.store(Arc::new(table));
        Ok(count)
    }

    /// The replicas the budgets are shared by.
    pub fn fleet(&self) -> &Arc<FleetView> {
        &self.fleet
    }

    /// Tenants' recent usage across the fleet: the queue's turn order.
    pub fn usage(&self) -> &Arc<fleet_usage::FleetUsage> {
        &self.usage
    }

    /// Whether the replicas have anything to exchange: budgets, or several
    /// tenants whose usage orders the queue.
    pub fn shares_state(&self) -> bool {
        self.has_limits() || self.each_tenant().len() > 1
    }

    /// Every tenant once (a tenant has one entry per key).
    fn each_tenant(&self) -> Vec<Arc<Tenant>> {
        let table = self.table.load();
        let mut seen = std::collections::HashSet::new();
        table
            .values()
            .filter(|t| seen.insert(Arc::as_ptr(t)))
            .cloned()
            .collect()
    }

    /// Whether any tenant has a budget.
    pub fn has_limits(&self) -> bool {
        self.each_tenant()
            .iter()
            .any(|t| t.limits.is_some() || !t.model_limits.is_empty())
    }

    /// What this replica spent from each budget since the last call; a
    /// new exchange window begins.
    pub fn next_window(&self) -> Vec<fleet::Spent> {
        let mut out = Vec::new();
        for tenant in self.each_tenant() {
            let scopes = tenant
                .limits
                .iter()
                .map(|l| (None, l))
                .chain(tenant.model_limits.iter().map(|(m, l)| (Some(m), l)));
            for (model, limits) in scopes {
                for (kind, bucket) in [("requests", &limits.requests), ("tokens", &limits.tokens)] {
                    let Some(bucket) = bucket else { continue };
                    let amount = bucket.next_window();
                    if amount != 0.0 {
                        out.push(fleet::Spent {
                            tenant: tenant.name.to_string(),
                            model: model.cloned(),
                            kind: kind.to_owned(),
                            amount,
                        });
                    }
                }
            }
        }
        // Not a budget: what each tenant used here, for the queue's turns.
        for (tenant, amount) in self.usage.take_unsent() {
            out.push(fleet::Spent {
                tenant: tenant.to_string(),
                model: None,
                kind: fleet::USED.to_owned(),
                amount,
            });
        }
        out
    }

    /// Takes what a peer replica spent from the same budgets here; budgets
    /// this replica does not have (another key file) are skipped.
    pub fn spent_elsewhere(&self, spent: &[fleet::Spent]) {
        let tenants = self.each_tenant();
        let by_name: HashMap<&str, &Arc<Tenant>> = tenants.iter().map(|t| (&*t.name, t)).collect();
        for s in spent {
            let Some(tenant) = by_name.get(s.tenant.as_str()) else {
                continue;
            };
            if s.kind == fleet::USED {
                self.usage.used_elsewhere(&tenant.name, s.amount);
                continue;
            }
            let limits = match &s.model {
                None => tenant.limits.as_ref(),
                Some(model) => tenant.model_limits.get(model),
            };
            let bucket = limits.and_then(|l| match s.kind.as_str() {
                "requests" => l.requests.as_ref(),
                "tokens" => l.tokens.as_ref(),
                _ => None,
            });
            if let Some(bucket) = bucket.filter(|_| s.amount.is_finite()) {
                bucket.spent_elsewhere(s.amount);
            }
        }
    }

    /// The key file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The tenant of `key` (the bare key, without a scheme).
    pub fn identify(&self, key: &[u8]) -> Option<Arc<Tenant>> {
        let digest: KeyDigest = Sha256::digest(key).into();
        self.table.load().get(&digest).cloned()
    }

    /// `/admin/tenants`: every tenant, its limits and what is left of them.
    pub fn report(&self) -> Value {
        let table = self.table.load();
        let mut seen = std::collections::BTreeMap::new();
        for tenant in table.values() {
            seen.entry(tenant.name.to_string())
                .or_insert_with(|| tenant.report());
        }
        json!({"tenants": seen.into_values().collect::<Vec<_>>()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(yaml: &str) -> (tempfile::NamedTempFile, Tenants) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), yaml).unwrap();
        let t = Tenants::load(Some(file.path()), ["plain"]).unwrap();
        (file, t)
    }

    const FILE: &str = "tenants:\n  - name: a\n    keys: [ka]\n    models: [llama, \"qwen-*\"]\n    limits: {requestsPerSecond: 1, burst: 2, tokensPerMinute: 60}\n";

    #[test]
    fn keys_name_their_tenant_and_models() {
        let (_f, t) = tenants(FILE);
        let a = t.identify(b"ka").unwrap();
        assert_eq!(&*a.name, "a");
        assert!(a.allows("llama") && a.allows("qwen-7b") && !a.allows("llama2"));
        assert_eq!(&*t.identify(b"plain").unwrap().name, ANONYMOUS);
        assert!(t.identify(b"kb").is_none());
    }

    #[test]
    fn an_admission_carries_the_rate_limit_headers_of_its_charge() {
        let (_f, t) = tenants(FILE);
        let a = t.identify(b"ka").unwrap();
        let est = Estimate {
            prompt: 40,
            output: 10,
        };
        let charge = a.admit("llama", est).unwrap();
        let got: Vec<(&str, &str)> = charge
            .headers
            .iter()
            .map(|(k, v)| (*k, v.to_str().unwrap()))
            .collect();
        let names: Vec<&str> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ]
        );
        // Burst 2, one taken; 60 tokens, 50 taken, refilled at 1 a second.
        assert_eq!((got[0].1, got[1].1), ("2", "1"));
        assert_eq!((got[3].1, got[4].1), ("60", "10"));
        assert!(["49s", "50s"].contains(&got[5].1), "{}", got[5].1);
        assert!(["999ms", "1s"].contains(&got[2].1), "{}", got[2].1);
    }

    #[test]
    fn budgets_refuse_then_refund_unused_tokens() {
        let (_f, t) = tenants(FILE);
        let a = t.identify(b"ka").unwrap();
        let est = Estimate {
            prompt: 40,
            output: 10,
        };
        let mut first = a.admit("llama", est).unwrap();
        let err = a.admit("llama", est).unwrap_err();
        assert_eq!((err.status, err.code), (429, "rate_limit_exceeded"));
        assert!(err
            .headers()
            .iter()
            .any(|(k, _)| *k == "x-ratelimit-remaining-tokens"));
        // The answer used 5 tokens, not 50: 45 come back.
        first.settle(
            true,
            Some(&Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                cached_tokens: None,
            }),
        );
        assert!(a.admit("llama", est).is_ok());
        // Two requests of burst 2 were taken: the third is refused.
        let err = a.admit("llama", Estimate::default()).unwrap_err();
        assert!(err.message.contains("requests"), "{}", err.message);
    }

    /// Two replicas reading the same key file: what one spent is taken
    /// from the other's buckets, once.
    #[test]
    fn what_one_replica_spent_is_taken_from_the_others_budgets() {
        let (_f1, here) = tenants(FILE);
        let (_f2, there) = tenants(FILE);
        let est = Estimate {
            prompt: 30,
            output: 10,
        };
        drop(here.identify(b"ka").unwrap().admit("llama", est).unwrap());
        let spent = here.next_window();
        let tokens = spent.iter().find(|s| s.kind == "tokens").expect("tokens");
        assert_eq!((tokens.tenant.as_str(), tokens.amount), ("a", 40.0));
        assert!(here.next_window().is_empty(), "sent once");
        there.spent_elsewhere(&spent);
        assert!(there.next_window().is_empty(), "not sent on");
        let a = there.identify(b"ka").unwrap();
        let err = a.admit("llama", est).unwrap_err();
        assert!(err.message.contains("tokens"), "{}", err.message);
        // Budgets this replica does not have are skipped.
        let unknown = fleet::Spent {
            tenant: "z".into(),
            model: None,
            kind: "tokens".into(),
            amount: 1e9,
        };
        there.spent_elsewhere(&[unknown]);
    }

    #[test]
    fn cache_salts_are_keyed_by_the_tenants_keys() {
        let (_f, t) = tenants("tenants:\n  - {name: a, keys: [ka]}\n  - {name: b, keys: [kb]}\n");
        let (a, b) = (t.identify(b"ka").unwrap(), t.identify(b"kb").unwrap());
        let salt = a.cache_salt(None);
        assert_eq!(salt, a.cache_salt(None));
        assert_eq!(salt.len(), 34);
        assert_ne!(salt, b.cache_salt(None));
        assert_ne!(salt, a.cache_salt(Some("\"x\"")));
        // Not the digest of the public name alone, as it once was.
        let mut named = Sha256::new();
        named.update(b"flexinfer cache salt\0a\0");
        assert_ne!(salt, format!("t-{}", hex::encode(&named.finalize()[..16])));
        // Same keys, same salt (another replica); other keys, another salt.
        let (_g, again) = tenants("tenants:\n  - {name: a, keys: [ka]}\n");
        assert_eq!(again.identify(b"ka").unwrap().cache_salt(None), salt);
        let (_h, other) = tenants("tenants:\n  - {name: a, keys: [kz]}\n");
        assert_ne!(other.identify(b"kz").unwrap().cache_salt(None), salt);
    }

    #[test]
    fn a_bad_reload_keeps_the_keys_in_force() {
        let (f, t) = tenants(FILE);
        std::fs::write(f.path(), "tenants:\n  - name: a\n    keys: [ka\n").unwrap();
        let err = t.reload().unwrap_err().to_string();
        assert!(err.contains("line"), "{err}");
        assert!(t.identify(b"ka").is_some());
        std::fs::write(f.path(), "tenants:\n  - name: b\n    keys: [kb]\n").unwrap();
        t.reload().unwrap();
        assert!(t.identify(b"ka").is_none() && t.identify(b"kb").is_some());
    }
}
