//! Model servers that an earlier gateway left running: it was killed
//! (SIGKILL, the OOM killer) before it could stop them, and a server still
//! holds the model's port. A server is ours when its environment carries
//! [`MANAGED_MODEL_ENV`] with the model's name; then it is stopped and the
//! model started afresh. A foreign server on the port is never touched.
//!
//! Linux only: the listener is found through `/proc/net/tcp{,6}` and the
//! sockets in `/proc/<pid>/fd`.

use std::path::Path;

/// Environment variable set on every model server the local actuator
/// starts, to the model's name.
pub const MANAGED_MODEL_ENV: &str = "FLEXINFER_MANAGED_MODEL";

/// TCP state `LISTEN` in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// The process listening on `port` (any local address) whose environment
/// says it serves `model`, if there is one and it can be read.
pub fn own_listener(port: u16, model: &str) -> Option<u32> {
    own_listener_in(Path::new("/proc"), port, model)
}

fn own_listener_in(proc: &Path, port: u16, model: &str) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["net/tcp", "net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(proc.join(table)) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let marker = format!("{MANAGED_MODEL_ENV}={model}");
    for entry in std::fs::read_dir(proc).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds_socket = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        });
        if holds_socket {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let ours = environ
                .split(|&b| b == 0)
                .any(|var| var == marker.as_bytes());
            return ours.then_some(pid);
        }
    }
    None
}

/// Inodes of the sockets listening on `port` in a `/proc/net/tcp` table.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let state = fields.get(3)?;
            let inode = fields.get(9)?.parse::<u64>().ok()?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *state == TCP_LISTEN && inode != 0).then_some(inode)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:B8CB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:B8CB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn finds_only_listening_sockets_of_the_port() {
        assert_eq!(listening_inodes(TABLE, 0xB8CB), [4242]);
        assert_eq!(listening_inodes(TABLE, 8080), [777]);
        assert!(listening_inodes(TABLE, 9).is_empty());
        assert!(listening_inodes("garbage\nnot a table", 80).is_empty());
    }

    #[test]
    fn a_listener_is_ours_only_with_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        std::fs::create_dir_all(proc.join("net")).unwrap();
        std::fs::write(proc.join("net/tcp"), TABLE).unwrap();
        std::fs::write(proc.join("net/tcp6"), "header\n").unwrap();
        let process = |pid: &str, inode: u64, environ: &[u8]| {
            let fd = proc.join(pid).join("fd");
            std::fs::create_dir_all(&fd).unwrap();
            std::os::unix::fs::symlink(format!("socket:[{inode}]"), fd.join("3")).unwrap();
            std::fs::write(proc.join(pid).join("environ"), environ).unwrap();
        };
        process("100", 4242, b"PATH=/bin\0FLEXINFER_MANAGED_MODEL=chat\0");
        process("200", 777, b"PATH=/bin\0");
        assert_eq!(own_listener_in(proc, 0xB8CB, "chat"), Some(100));
        assert_eq!(own_listener_in(proc, 0xB8CB, "other"), None);
        assert_eq!(own_listener_in(proc, 8080, "chat"), None, "foreign server");
        assert_eq!(own_listener_in(proc, 1234, "chat"), None, "nobody listens");
    }

    #[test]
    fn the_real_proc_tells_our_server_from_a_foreign_one() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let serve = format!(
            "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\ns.listen()\nprint('up',flush=True)\ntime.sleep(60)"
        );
        let spawn = |marker: Option<&str>| {
            let mut command = std::process::Command::new("python3");
            command
                .args(["-c", &serve])
                .stdout(std::process::Stdio::piped());
            if let Some(model) = marker {
                command.env(MANAGED_MODEL_ENV, model);
            }
            let mut child = command.spawn().expect("python3");
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.take().unwrap()),
                &mut line,
            )
            .unwrap();
            assert_eq!(line.trim(), "up");
            child
        };
        let mut ours = spawn(Some("chat"));
        assert_eq!(own_listener(port, "chat"), Some(ours.id()));
        assert_eq!(own_listener(port, "other"), None);
        ours.kill().unwrap();
        ours.wait().unwrap();
        let mut foreign = spawn(None);
        assert_eq!(own_listener(port, "chat"), None);
        foreign.kill().unwrap();
        foreign.wait().unwrap();
    }
}
