//! End-to-end behaviour of the `flexinfer-flashload` binary on real
//! directories: byte-identical copies, restart semantics, refusals, checksum
//! mismatches and cleanup.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flexinfer_flashload::preload::{self, Options, Outcome};
use flexinfer_flashload::space::Fixed;
use flexinfer_flashload::MARKER_NAME;

const BIN: &str = env!("CARGO_BIN_EXE_flexinfer-flashload");

/// Deterministic bytes (xorshift), so every file has distinct content.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A model-like tree: two multi-chunk files (with --chunk-size 1Mi), an
/// empty file, many small files in nested directories, odd modes, a symlink.
fn model_tree(root: &Path) {
    fs::create_dir_all(root.join("weights")).unwrap();
    fs::write(
        root.join("weights/model-00001.safetensors"),
        bytes(1, 5 << 20),
    )
    .unwrap();
    fs::write(
        root.join("weights/model-00002.safetensors"),
        bytes(2, (3 << 20) + 12_345),
    )
    .unwrap();
    fs::write(root.join("empty.txt"), b"").unwrap();
    for i in 0..120 {
        let dir = root.join(format!("shards/{}", i % 7));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join(format!("part-{i}.bin")),
            bytes(100 + i, (i as usize * 997) % 40_000),
        )
        .unwrap();
    }
    fs::write(root.join("run.sh"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(root.join("secret.json"), b"{}").unwrap();
    fs::set_permissions(root.join("secret.json"), fs::Permissions::from_mode(0o400)).unwrap();
    symlink(
        "weights/model-00001.safetensors",
        root.join("model.safetensors"),
    )
    .unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join(".git/HEAD"), b"ref").unwrap();
}

/// Every regular file, symlink and directory below `root` with what must survive the copy.
fn snapshot(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == MARKER_NAME || rel.starts_with(".git") {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                walk(root, &path, out);
                format!("dir {:o}", meta.mode() & 0o7777)
            } else {
                let content = fs::read(&path).unwrap();
                format!(
                    "file {:o} {} {} {:x}",
                    meta.mode() & 0o7777,
                    meta.size(),
                    meta.mtime(),
                    content
                        .iter()
                        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)))
                )
            };
            out.push((rel, what));
        }
    }
    walk(root, root, &mut out);
    out
}

struct Fixture {
    _dir: tempfile::TempDir,
    src: PathBuf,
    dst: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("shm/models");
    model_tree(&src);
    Fixture {
        _dir: dir,
        src,
        dst,
    }
}

fn command(f: &Fixture, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--src")
        .arg(&f.src)
        .arg("--dst")
        .arg(&f.dst)
        .args(["--chunk-size", "1Mi", "--progress", "off"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .env_remove("FLASH_SRC")
        .env_remove("FLASH_DST");
    cmd
}

fn flashload(f: &Fixture, extra: &[&str]) -> Output {
    command(f, extra).args(["--jobs", "3"]).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// The one line an error leaves on stderr.
fn error_line(o: &Output) -> String {
    let lines: Vec<_> = stderr(o)
        .lines()
        .filter(|l| l.starts_with("flexinfer-flashload: error:"))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1, "stderr: {}", stderr(o));
    lines[0].clone()
}

#[test]
fn mixed_tree_copies_byte_identical_with_every_method() {
    for method in ["auto", "sendfile", "copy-file-range", "read-write"] {
        let f = fixture();
        let out = flashload(&f, &["--method", method]);
        assert_ok(&out);
        assert_eq!(
            snapshot(&f.src)[..],
            snapshot(&f.dst)[..],
            "method {method}"
        );
        assert!(!f.dst.join(".git").exists(), "default exclusions apply");
        let line = stdout(&out);
        assert!(line.starts_with("flashload: copied 125 files, "), "{line}");
        assert!(
            line.contains(" bytes in ") && line.contains(" GB/s"),
            "{line}"
        );
        assert!(f.dst.join(MARKER_NAME).is_file());
    }
}

#[test]
fn verified_copies_record_checksums_in_the_marker() {
    for algorithm in ["xxh3-128", "sha256"] {
        let f = fixture();
        let out = flashload(&f, &["--verify", "--checksum", algorithm]);
        assert_ok(&out);
        assert!(stdout(&out).contains(&format!("verified sizes and {algorithm} checksums")));
        assert_eq!(snapshot(&f.src), snapshot(&f.dst));
        let marker: serde_json::Value =
            serde_json::from_slice(&fs::read(f.dst.join(MARKER_NAME)).unwrap()).unwrap();
        assert_eq!(marker["checksum"]["algorithm"], algorithm);
        let big = marker["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == "weights/model-00001.safetensors")
            .unwrap();
        assert_eq!(big["chunks"].as_array().unwrap().len(), 5);
    }
}

#[test]
fn a_complete_copy_is_skipped_and_a_changed_source_redone() {
    let f = fixture();
    assert_ok(&flashload(&f, &[]));
    let again = flashload(&f, &[]);
    assert_ok(&again);
    assert!(
        stdout(&again).contains("already holds a complete copy (125 files,"),
        "{}",
        stdout(&again)
    );

    fs::write(f.src.join("shards/3/part-3.bin"), b"new content").unwrap();
    fs::remove_file(f.src.join("shards/4/part-4.bin")).unwrap();
    let redo = flashload(&f, &[]);
    assert_ok(&redo);
    assert!(
        stdout(&redo).starts_with("flashload: copied 1 files, 11 bytes"),
        "{}",
        stdout(&redo)
    );
    assert!(
        stdout(&redo).contains("kept 123 files"),
        "{}",
        stdout(&redo)
    );
    assert_eq!(snapshot(&f.src), snapshot(&f.dst));
}

#[test]
fn an_interrupted_copy_is_redone_on_the_next_run() {
    let f = fixture();
    // About 11 MB at 6 MB/s: killed after a fraction of it.
    let mut child = command(&f, &["--rate-limit", "6M", "--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let started = |dst: &Path| {
        fs::read_dir(dst.join("weights"))
            .map(|d| d.count() > 0)
            .unwrap_or(false)
    };
    while !started(&f.dst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !f.dst.join(MARKER_NAME).exists(),
        "a killed copy has no marker"
    );
    let leftovers = fs::read_dir(f.dst.join("weights")).unwrap().count();
    assert!(leftovers > 0, "the kill came after the copy started");

    let redo = flashload(&f, &[]);
    assert_ok(&redo);
    assert!(
        stdout(&redo).starts_with("flashload: copied "),
        "{}",
        stdout(&redo)
    );
    assert_eq!(snapshot(&f.src), snapshot(&f.dst));
    let tmp_left = snapshot(&f.dst)
        .iter()
        .any(|(p, _)| p.ends_with(".flash-tmp"));
    assert!(!tmp_left);
    let skip = flashload(&f, &[]);
    assert!(stdout(&skip).contains("already holds a complete copy"));
}

#[test]
fn sigterm_stops_the_copy_and_removes_it() {
    let f = fixture();
    let child = command(&f, &["--rate-limit", "4M", "--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: sends SIGTERM to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let line = error_line(&out);
    assert!(
        line.contains("interrupted by signal 15; partial copy removed"),
        "{line}"
    );
    assert!(snapshot(&f.dst).is_empty(), "{:?}", snapshot(&f.dst));
}

#[test]
fn insufficient_space_is_refused_before_copying() {
    let f = fixture();
    let out = flashload(&f, &["--max-bytes", "4Mi"]);
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert!(
        line.contains("insufficient space: the preload needs 10.8 MB"),
        "{line}"
    );
    assert!(line.contains("--max-bytes allows 4.2 MB"), "{line}");
    assert!(snapshot(&f.dst).is_empty(), "nothing was copied");
}

#[test]
fn free_space_comes_from_the_probe() {
    let f = fixture();
    let options = Options {
        src: f.src.clone(),
        dst: f.dst.clone(),
        jobs: 2,
        buffer_bytes: 1 << 20,
        chunk_bytes: 1 << 20,
        verify: false,
        algorithm: flexinfer_flashload::checksum::Algorithm::Xxh3,
        manifest: None,
        scan: flexinfer_flashload::scan::ScanOptions::with_excludes([""; 0], None),
        max_bytes: None,
        fsync: false,
        method: flexinfer_flashload::copy::Method::Auto,
        rate_limit: None,
        progress: flexinfer_flashload::progress::ProgressMode::Off,
        log_interval: Duration::from_secs(5),
    };
    let err = preload::run(&options, &Fixed(12 << 20)).unwrap_err();
    assert!(
        format!("{err:#}").starts_with(
            "insufficient tmpfs space: need 10.8 MB (+10.5 MB headroom) but only 12.6 MB available"
        ),
        "{err:#}"
    );
    assert!(snapshot(&f.dst).is_empty());
    let summary = preload::run(&options, &Fixed(1 << 30)).unwrap();
    assert!(matches!(
        summary.outcome,
        Outcome::Copied { files: 125, .. }
    ));
}

#[test]
fn checksum_mismatch_against_the_manifest_is_detected() {
    let f = fixture();
    let manifest = f.dst.parent().unwrap().join("manifest.json");
    fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    let out = Command::new(BIN)
        .arg("--src")
        .arg(&f.src)
        .arg("--emit-manifest")
        .arg(&manifest)
        .args(["--chunk-size", "1Mi", "--progress", "off"])
        .output()
        .unwrap();
    assert_ok(&out);

    // Same size, one byte different, in the fourth chunk of a large file.
    let path = f.src.join("weights/model-00001.safetensors");
    let mut content = fs::read(&path).unwrap();
    content[(3 << 20) + 17] ^= 0xff;
    fs::write(&path, content).unwrap();

    let out = flashload(&f, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert!(
        line.contains("checksum mismatch in weights/model-00001.safetensors (bytes 3145728..4194304): manifest has xxh3-128"),
        "{line}"
    );
    assert!(line.contains("partial copy removed"), "{line}");
    assert!(snapshot(&f.dst).is_empty(), "{:?}", snapshot(&f.dst));

    // A source that matches again copies and verifies.
    fs::write(&path, bytes(1, 5 << 20)).unwrap();
    let out = flashload(&f, &["--manifest", manifest.to_str().unwrap()]);
    assert_ok(&out);
    assert_eq!(snapshot(&f.src), snapshot(&f.dst));
}

#[test]
fn a_corrupted_copy_is_found_by_verify_and_redone() {
    let f = fixture();
    assert_ok(&flashload(&f, &["--verify"]));
    let path = f.dst.join("weights/model-00002.safetensors");
    let meta = fs::metadata(&path).unwrap();
    let mut content = fs::read(&path).unwrap();
    content[100] ^= 1;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&path, content).unwrap();
    let file = fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(meta.modified().unwrap()).unwrap();

    // Without --verify the quick check trusts the marker.
    assert!(stdout(&flashload(&f, &[])).contains("already holds a complete copy"));
    let out = flashload(&f, &["--verify"]);
    assert_ok(&out);
    assert!(
        stdout(&out).starts_with("flashload: copied 125 files"),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&f.src), snapshot(&f.dst));
}

#[test]
fn source_not_matching_the_manifest_is_refused() {
    let f = fixture();
    let manifest = f.src.parent().unwrap().join("m.json");
    let out = Command::new(BIN)
        .arg("--src")
        .arg(&f.src)
        .arg("--emit-manifest")
        .arg(&manifest)
        .output()
        .unwrap();
    assert_ok(&out);
    fs::write(f.src.join("extra.bin"), b"x").unwrap();
    let out = flashload(&f, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert!(line.contains("source does not match manifest"), "{line}");
    assert!(line.contains("extra.bin: not in manifest"), "{line}");
}

#[test]
fn cleanup_removes_the_preload() {
    let f = fixture();
    assert_ok(&flashload(&f, &[]));
    let out = Command::new(BIN)
        .arg("--cleanup")
        .arg("--dst")
        .arg(&f.dst)
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(stdout(&out).contains("removed"), "{}", stdout(&out));
    assert!(!f.dst.exists());
    let out = Command::new(BIN)
        .arg("--cleanup")
        .arg("--dst")
        .arg(&f.dst)
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(stdout(&out).contains("nothing to remove"));
}

#[test]
fn bad_input_gets_a_one_line_reason() {
    let f = fixture();
    let out = Command::new(BIN)
        .args(["--src", "/no/such/source", "--dst"])
        .arg(&f.dst)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(error_line(&out).contains("cannot read source directory /no/such/source"));

    let inside = f.src.join("sub");
    let out = Command::new(BIN)
        .arg("--src")
        .arg(&f.src)
        .arg("--dst")
        .arg(&inside)
        .output()
        .unwrap();
    assert!(error_line(&out).contains("overlap"), "{}", stderr(&out));

    let out = Command::new(BIN)
        .env("FLASH_SRC", &f.src)
        .env_remove("FLASH_DST")
        .output()
        .unwrap();
    assert_eq!(
        error_line(&out),
        "flexinfer-flashload: error: --dst (FLASH_DST) must be set"
    );
}

#[test]
fn operator_environment_variables_are_honoured() {
    let f = fixture();
    let out = Command::new(BIN)
        .env("FLASH_SRC", &f.src)
        .env("FLASH_DST", &f.dst)
        .env("FLASH_CONCURRENCY", "4")
        .env("FLASH_BUFFER_KB", "1024")
        .env("FLASH_VERIFY", "yes")
        .env("FLASH_EXCLUDE", "shards/,secret")
        .env("FLASH_VARIANT", "fp16")
        .env("FLASH_PROGRESS", "log")
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(stdout(&out).contains("copied 4 files"), "{}", stdout(&out));
    assert!(stdout(&out).contains("xxh3-128 checksums"));
    assert!(!f.dst.join("shards").exists() && !f.dst.join("secret.json").exists());
}
