//! Pure decision functions. No I/O, no clock reads: time is a parameter.

pub mod gpu_group;
pub mod replicas;
pub mod shared_gpu;

/// Time as the policies see it: wall-clock, so it compares with Kubernetes
/// timestamps (`lastActiveTime`) and local activity alike.
pub type Timestamp = std::time::SystemTime;

/// Time elapsed from `earlier` to `now`; zero when `earlier` is in the future.
pub fn since(now: Timestamp, earlier: Timestamp) -> std::time::Duration {
    now.duration_since(earlier).unwrap_or_default()
}
