//! What a real node changes on the host, captured before and put back
//! after: the sysctls kubelet and CNI set, the whole nftables ruleset
//! (iptables-nft's tables included: kubelet's and kube-proxy's chains, CNI's
//! masquerading), network links (the CNI bridge, veths), mount points
//! (the kubelet's folder, volumes, container root filesystems) and cgroup
//! folders (`kubepods`, `docker`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The sysctls a node sets: kubelet's kernel defaults, and forwarding (the
/// CNI bridge plugin as gateway).
pub const SYSCTLS: [&str; 5] = [
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
];

/// Which links, mount points and cgroup folders a comparison or a restore
/// considers: those whose name starts with one of the prefixes (a cgroup
/// folder by its last component); empty lists mean all. Other tests of the
/// same binary make links and mounts of their own meanwhile.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Link name prefixes.
    pub links: Vec<String>,
    /// Mount point prefixes.
    pub mounts: Vec<String>,
    /// Cgroup folder names.
    pub cgroups: Vec<String>,
}

impl Scope {
    fn has(prefixes: &[String], name: &str) -> bool {
        prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    fn link(&self, name: &str) -> bool {
        Self::has(&self.links, name)
    }

    fn mount(&self, path: &str) -> bool {
        Self::has(&self.mounts, path)
    }

    fn cgroup(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        Self::has(&self.cgroups, name)
    }
}

/// A set compared between two captures: its name, before, after, and
/// whether an item is within the scope.
type Compared<'a> = (
    &'a str,
    &'a BTreeSet<String>,
    &'a BTreeSet<String>,
    fn(&Scope, &str) -> bool,
);

/// One capture of the host's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    sysctls: Vec<(String, String)>,
    ruleset: String,
    links: BTreeSet<String>,
    mounts: BTreeSet<String>,
    cgroups: BTreeSet<String>,
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn sysctl_path(name: &str) -> String {
    format!("/proc/sys/{}", name.replace('.', "/"))
}

impl HostState {
    /// The host as it is now.
    pub fn capture() -> HostState {
        let sysctls = SYSCTLS
            .iter()
            .map(|name| {
                let value = std::fs::read_to_string(sysctl_path(name)).unwrap_or_default();
                (name.to_string(), value.trim().to_owned())
            })
            .collect();
        let links = output("ip", &["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .collect();
        let mounts = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(str::to_owned)
            .collect();
        let mut cgroups = BTreeSet::new();
        if let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") {
            for controller in controllers.flatten() {
                if let Ok(children) = std::fs::read_dir(controller.path()) {
                    for child in children.flatten() {
                        if child.path().is_dir() {
                            cgroups.insert(child.path().display().to_string());
                        }
                    }
                }
            }
        }
        HostState {
            sysctls,
            ruleset: output("nft", &["list", "ruleset"]),
            links,
            mounts,
            cgroups,
        }
    }

    /// Whether `path` was a mount point.
    pub fn has_mount(&self, path: &str) -> bool {
        self.mounts.contains(path)
    }

    /// What differs in `now` from this capture within `scope`, one line
    /// each; empty when the host is as it was.
    pub fn differences(&self, now: &HostState, scope: &Scope) -> Vec<String> {
        let mut out = Vec::new();
        for ((name, was), (_, is)) in self.sysctls.iter().zip(&now.sysctls) {
            if was != is {
                out.push(format!("sysctl {name}: {was} -> {is}"));
            }
        }
        if self.ruleset != now.ruleset {
            out.push(format!(
                "nftables ruleset changed ({} -> {} lines)",
                self.ruleset.lines().count(),
                now.ruleset.lines().count()
            ));
        }
        let sets: [Compared; 3] = [
            ("link", &self.links, &now.links, Scope::link),
            ("mount", &self.mounts, &now.mounts, Scope::mount),
            ("cgroup", &self.cgroups, &now.cgroups, Scope::cgroup),
        ];
        for (what, was, is, ours) in sets {
            out.extend(
                is.difference(was)
                    .filter(|x| ours(scope, x))
                    .map(|x| format!("{what} added: {x}")),
            );
            out.extend(
                was.difference(is)
                    .filter(|x| ours(scope, x))
                    .map(|x| format!("{what} removed: {x}")),
            );
        }
        out
    }

    /// Puts the host back as captured: sysctls, the nftables ruleset, and
    /// the links, mount points (lazily, deepest first) and cgroup folders
    /// within `scope` added since.
    pub fn restore(&self, scope: &Scope) {
        let now = HostState::capture();
        let added: Vec<&String> = now.mounts.difference(&self.mounts).collect();
        for mount in added.into_iter().rev() {
            if scope.mount(mount) {
                let _ = Command::new("umount").args(["-l", mount]).status();
            }
        }
        for link in now.links.difference(&self.links) {
            if scope.link(link) {
                let _ = Command::new("ip").args(["link", "del", link]).status();
            }
        }
        if now.ruleset != self.ruleset {
            let _ = Command::new("nft").args(["flush", "ruleset"]).status();
            if !self.ruleset.trim().is_empty() {
                let file =
                    std::env::temp_dir().join(format!("flexinfer-nft-{}", std::process::id()));
                if std::fs::write(&file, &self.ruleset).is_ok() {
                    let _ = Command::new("nft").arg("-f").arg(&file).status();
                    let _ = std::fs::remove_file(&file);
                }
            }
        }
        for cgroup in now.cgroups.difference(&self.cgroups) {
            if scope.cgroup(cgroup) {
                remove_tree(Path::new(cgroup));
            }
        }
        for (name, value) in &self.sysctls {
            let _ = std::fs::write(sysctl_path(name), value);
        }
    }
}

/// Removes a cgroup folder and its children (cgroup folders are removed
/// with rmdir, leaves first).
fn remove_tree(dir: &Path) {
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.path().is_dir() {
                remove_tree(&child.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
