//! Pod addresses the real API server accepts. kube-apiserver refuses
//! loopback (and link-local) addresses in EndpointSlices, so the Pods of
//! the simulated kubelet cannot live on `127.0.x.y` as they do with the
//! in-memory server. They live instead in a network namespace this test
//! process creates: a veth pair joins it to the host namespace (host side
//! `10.N.0.1/16`), each Pod gets its own `10.N.a.b` on the namespace side,
//! and its process runs inside the namespace (`ip netns exec`). Traffic to
//! those addresses never leaves the machine: it crosses the veth pair into
//! the namespace. Needs root (CAP_NET_ADMIN) and `ip`.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sim::PodProcess;

/// A network namespace for Pods, removed on drop.
pub struct PodNetwork {
    name: String,
    pod_side: String,
    second_octet: u8,
    next: AtomicU32,
    ip_tool: PathBuf,
}

fn ip_tool() -> Option<PathBuf> {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn run(ip: &PathBuf, args: &[&str]) -> std::io::Result<()> {
    let out = Command::new(ip).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl PodNetwork {
    /// Creates the namespace and its link to the host namespace, on a
    /// `10.N.0.0/16` no interface of the machine routes yet.
    pub fn create() -> std::io::Result<Self> {
        // One at a time per process, so that two networks never pick the
        // same free /16 or names.
        static CREATING: std::sync::Mutex<u32> = std::sync::Mutex::new(0);
        let mut created = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        let n = *created;
        *created += 1;
        let ip_tool = ip_tool().ok_or_else(|| std::io::Error::other("no `ip` command"))?;
        let routes = Command::new(&ip_tool).args(["-4", "route"]).output()?;
        let routes = String::from_utf8_lossy(&routes.stdout).into_owned();
        let pid = std::process::id();
        let second_octet = (0..50u32)
            .map(|i| 200 + ((pid + n + i) % 50) as u8)
            .find(|o| !routes.contains(&format!("10.{o}.")))
            .ok_or_else(|| std::io::Error::other("no free 10.N.0.0/16"))?;
        // Interface names hold 15 characters.
        let tag = format!("{}n{}", pid % 100_000, n % 100);
        let network = PodNetwork {
            name: format!("flexinfer-pods-{pid}-{n}"),
            pod_side: format!("fxp{tag}"),
            second_octet,
            next: AtomicU32::new(0),
            ip_tool,
        };
        let host_side = format!("fxh{tag}");
        let ip = &network.ip_tool;
        let ns = network.name.as_str();
        let host_address = format!("10.{second_octet}.0.1/16");
        run(ip, &["netns", "add", ns])?;
        run(
            ip,
            &[
                "link",
                "add",
                &host_side,
                "type",
                "veth",
                "peer",
                "name",
                &network.pod_side,
            ],
        )?;
        run(ip, &["link", "set", &network.pod_side, "netns", ns])?;
        run(ip, &["addr", "add", &host_address, "dev", &host_side])?;
        run(ip, &["link", "set", &host_side, "up"])?;
        run(ip, &["netns", "exec", ns, "ip", "link", "set", "lo", "up"])?;
        run(
            ip,
            &[
                "netns",
                "exec",
                ns,
                "ip",
                "link",
                "set",
                &network.pod_side,
                "up",
            ],
        )?;
        Ok(network)
    }

    /// The host's address on the link to the namespace: not loopback, so
    /// an EndpointSlice may name it for a process on the host.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.second_octet, 0, 1)
    }

    /// A new Pod address, assigned inside the namespace.
    pub fn next_ip(&self) -> std::io::Result<Ipv4Addr> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let addr = Ipv4Addr::new(
            10,
            self.second_octet,
            (n / 250 + 1) as u8,
            (n % 250 + 2) as u8,
        );
        run(
            &self.ip_tool,
            &[
                "netns",
                "exec",
                &self.name,
                "ip",
                "addr",
                "add",
                &format!("{addr}/16"),
                "dev",
                &self.pod_side,
            ],
        )?;
        Ok(addr)
    }

    /// `process` run inside the namespace.
    pub fn wrap(&self, process: PodProcess) -> PodProcess {
        let mut args = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            self.name.clone(),
            process.program.display().to_string(),
        ];
        args.extend(process.args);
        PodProcess {
            program: self.ip_tool.clone(),
            args,
            ..process
        }
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // Deleting the namespace deletes the pair's both ends.
        let _ = run(&self.ip_tool, &["netns", "delete", &self.name]);
    }
}
