//! CPU features and size from `/proc`.

use std::fs;
use std::path::Path;

use crate::inventory::CpuInfo;

/// Reads `cpuinfo` and `meminfo` under `proc_root` (normally `/proc`).
/// Missing files give zero cores and memory and no features.
pub fn discover(proc_root: &Path) -> CpuInfo {
    let cpuinfo = fs::read_to_string(proc_root.join("cpuinfo")).unwrap_or_default();
    let meminfo = fs::read_to_string(proc_root.join("meminfo")).unwrap_or_default();
    parse(&cpuinfo, &meminfo)
}

/// Parses the two files' contents.
pub fn parse(cpuinfo: &str, meminfo: &str) -> CpuInfo {
    let field = |line: &str, name: &str| -> Option<String> {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim().to_owned())
    };
    let cores = cpuinfo
        .lines()
        .filter(|line| field(line, "processor").is_some())
        .count();
    let flags = cpuinfo
        .lines()
        .find_map(|line| field(line, "flags"))
        .unwrap_or_default();
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    let memory_kib: u64 = meminfo
        .lines()
        .find_map(|line| field(line, "MemTotal"))
        .and_then(|value| value.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    CpuInfo {
        avx512: has("avx512f"),
        avx2: has("avx2"),
        cores: u32::try_from(cores).unwrap_or(u32::MAX),
        memory_bytes: memory_kib * 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flags_cores_and_memory() {
        let cpuinfo = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw\n\n\
                       processor\t: 1\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw\n";
        let meminfo = "MemTotal:       131072604 kB\nMemFree:         1000 kB\n";
        assert_eq!(
            parse(cpuinfo, meminfo),
            CpuInfo {
                avx512: true,
                avx2: true,
                cores: 2,
                memory_bytes: 131_072_604 * 1024,
            }
        );
    }

    #[test]
    fn avx512_needs_the_foundation_flag() {
        let info = parse("processor : 0\nflags : avx2 avx512_vnni\n", "");
        assert!(!info.avx512);
        assert!(info.avx2);
        assert_eq!(parse("", ""), CpuInfo::default());
    }
}
