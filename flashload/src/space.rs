//! The pre-flight space check: refuse before copying anything when the
//! destination cannot hold the copy.

use std::io;
use std::path::Path;

use crate::sys;
use crate::units::megabytes;

/// Minimum headroom kept free on the destination filesystem.
pub const MIN_HEADROOM_BYTES: u64 = 10 << 20;

/// Where free space comes from; tests substitute a fixed figure.
pub trait SpaceProbe {
    /// Bytes that may still be written on the filesystem holding `dir`.
    fn available(&self, dir: &Path) -> io::Result<u64>;
}

/// The real filesystem, via `statvfs(2)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Statvfs;

impl SpaceProbe for Statvfs {
    fn available(&self, dir: &Path) -> io::Result<u64> {
        sys::available_bytes(dir)
    }
}

/// A fixed amount of free space.
#[derive(Debug, Clone, Copy)]
pub struct Fixed(pub u64);

impl SpaceProbe for Fixed {
    fn available(&self, _dir: &Path) -> io::Result<u64> {
        Ok(self.0)
    }
}

/// Headroom kept free beyond the copy itself: 5% of it, at least 10 MiB.
pub fn headroom(need: u64) -> u64 {
    (need / 20).max(MIN_HEADROOM_BYTES)
}

/// Checks that `need` more bytes fit.
///
/// * `available`: free bytes of the destination filesystem;
/// * `budget`: `--max-bytes`, the most the whole preload may occupy;
/// * `kept`: bytes already in place that the preload keeps (they count
///   against the budget but are already allocated on the filesystem).
///
/// Returns the one-line reason when it does not fit.
pub fn check(need: u64, available: u64, budget: Option<u64>, kept: u64) -> Result<(), String> {
    if let Some(budget) = budget {
        if need.saturating_add(kept) > budget {
            return Err(format!(
                "insufficient space: the preload needs {} ({} to copy, {} already in place) \
                 but --max-bytes allows {}; raise spec.flashLoader.tmpfsSizeLimit or exclude files",
                megabytes(need + kept),
                megabytes(need),
                megabytes(kept),
                megabytes(budget)
            ));
        }
    }
    let room = headroom(need);
    if need.saturating_add(room) > available {
        return Err(format!(
            "insufficient tmpfs space: need {} (+{} headroom) but only {} available; \
             raise spec.flashLoader.tmpfsSizeLimit or exclude files",
            megabytes(need),
            megabytes(room),
            megabytes(available)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_is_five_percent_with_a_floor() {
        assert_eq!(headroom(0), MIN_HEADROOM_BYTES);
        assert_eq!(headroom(1_000_000_000), 50_000_000);
    }

    #[test]
    fn refuses_when_the_filesystem_is_too_small() {
        let gb = 1_000_000_000;
        assert!(check(gb, 2 * gb, None, 0).is_ok());
        let err = check(gb, gb, None, 0).unwrap_err();
        assert!(err.starts_with("insufficient tmpfs space: need 1000.0 MB (+50.0 MB headroom) but only 1000.0 MB available"), "{err}");
    }

    #[test]
    fn refuses_when_over_the_budget() {
        let err = check(600, u64::MAX, Some(1000), 500).unwrap_err();
        assert!(err.contains("--max-bytes allows 0.0 MB"), "{err}");
        assert!(check(500, u64::MAX, Some(1000), 500).is_ok());
    }

    #[test]
    fn fixed_probe_reports_its_figure() {
        assert_eq!(Fixed(7).available(Path::new("/")).unwrap(), 7);
        assert!(Statvfs.available(Path::new("/")).is_ok());
    }
}
