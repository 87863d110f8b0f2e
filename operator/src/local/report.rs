//! Point-in-time view of every local model and shared group, for the admin
//! API (`GET /admin/models`) and for tests.

use std::net::SocketAddr;
use std::time::SystemTime;

use crate::policy::shared_gpu::LeaderReason;

use crate::lifecycle::Phase;

/// Everything the actuator knows, as of its latest step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActuatorReport {
    /// One entry per model, in spec order.
    pub models: Vec<ModelReport>,
    /// One entry per shared group, in order of first appearance in the specs.
    pub groups: Vec<GroupReport>,
}

impl ActuatorReport {
    /// The entry of `model`, if it exists.
    pub fn model(&self, model: &str) -> Option<&ModelReport> {
        self.models.iter().find(|m| m.name == model)
    }

    /// The entry of shared group `group`, if it exists.
    pub fn group(&self, group: &str) -> Option<&GroupReport> {
        self.groups.iter().find(|g| g.name == group)
    }
}

/// One model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReport {
    /// Model name.
    pub name: String,
    /// Current phase.
    pub phase: Phase,
    /// `127.0.0.1:<port>` while ready.
    pub endpoint: Option<SocketAddr>,
    /// The status message (see [`super::ModelStatus::message`]).
    pub message: Option<String>,
    /// When the phase last changed.
    pub since: SystemTime,
    /// Process id (and process group id) of the running child.
    pub pid: Option<u32>,
    /// Latest request served or activation.
    pub last_active: Option<SystemTime>,
    /// Requests queued for the model, as last reported by the gateway.
    pub queue_depth: u32,
    /// Shared group it belongs to.
    pub group: Option<String>,
    /// Current leader of that group.
    pub group_leader: Option<String>,
    /// Processes started so far (1 after the first start; each restart adds one).
    pub starts: u64,
    /// Times the model entered `Failed`.
    pub failures: u64,
    /// Failures since it was last ready; sets the retry backoff.
    pub consecutive_failures: u32,
}

/// One shared group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReport {
    /// Group name.
    pub name: String,
    /// Member models, in spec order.
    pub members: Vec<String>,
    /// The member allowed to run.
    pub leader: Option<String>,
    /// When the leader last changed.
    pub last_swap: Option<SystemTime>,
    /// Leader changes, oldest first (the most recent [`SWAP_HISTORY`] kept).
    pub swaps: Vec<SwapRecord>,
}

/// Leader changes kept per group.
pub const SWAP_HISTORY: usize = 64;

/// One leader change of a shared group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapRecord {
    /// When the policy decided it.
    pub at: SystemTime,
    /// The previous leader (`None` for the group's first leader).
    pub from: Option<String>,
    /// The new leader.
    pub to: String,
    /// Why the policy chose it.
    pub reason: LeaderReason,
}

impl SwapRecord {
    /// The reason as a stable name (`"FirstDemand"`, `"DemandPreemption"`, …).
    pub fn reason_str(&self) -> &'static str {
        reason_str(self.reason)
    }
}

/// Stable name of a leader reason.
pub fn reason_str(reason: LeaderReason) -> &'static str {
    match reason {
        LeaderReason::NoDemand => "NoDemand",
        LeaderReason::FirstDemand => "FirstDemand",
        LeaderReason::KeepLeader => "KeepLeader",
        LeaderReason::Cooldown => "Cooldown",
        LeaderReason::DemandPreemption => "DemandPreemption",
        LeaderReason::LeaderFailed => "LeaderFailed",
    }
}
