//! Pure decision functions. No I/O, no clock reads: time is a parameter.

pub mod gpu_group;
pub mod replicas;
pub mod shared_gpu;
pub mod shared_role;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Time as the policies see it: wall-clock, so it compares with Kubernetes
/// timestamps (`lastActiveTime`) and local activity alike.
pub type Timestamp = std::time::SystemTime;

/// A policy time as a Kubernetes `Time` (whole seconds, as the API
/// server stores it).
pub fn to_time(t: Timestamp) -> Time {
    let secs = t
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
}

/// A Kubernetes `Time` as a policy time.
pub fn from_time(t: &Time) -> Timestamp {
    std::time::SystemTime::from(t.0)
}

/// Time elapsed from `earlier` to `now`; zero when `earlier` is in the future.
pub fn since(now: Timestamp, earlier: Timestamp) -> std::time::Duration {
    now.duration_since(earlier).unwrap_or_default()
}
