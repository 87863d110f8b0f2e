//! The OCI client and `flexinfer-flashload pull` against a real registry
//! (Debian's `docker-registry`) on loopback, with artifacts pushed by the
//! `oras` Python package. Skipped (with a line saying so) when the
//! registry is not installed, unless `FLEXINFER_REQUIRE_REGISTRY=1`.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use flexinfer_flashload::artifact::{pull, pull_manifest, resolve, MARKER_NAME};
use flexinfer_flashload::progress::Counters;
use flexinfer_oci::{ClientOptions, Credentials, OciError, Reference, RegistryClient};
use support::registry::{pseudo_random, Registry};

const MIB: usize = 1 << 20;

fn client(registry: &str, credentials: Option<(&str, &str)>) -> RegistryClient {
    RegistryClient::new(
        registry,
        ClientOptions {
            credentials: credentials.map(|(u, p)| Credentials {
                username: u.into(),
                password: p.into(),
            }),
            ..Default::default()
        },
    )
    .unwrap()
}

fn model_files() -> (Vec<u8>, Vec<u8>) {
    (
        pseudo_random(4 * MIB + 123, 7),
        br#"{"architectures":["LlamaForCausalLM"],"hidden_size":64}"#.to_vec(),
    )
}

/// A plain registry holding `repo:v1` made of [`model_files`] (a GGUF
/// file and its config); `None` (the test returns, saying why) without
/// a registry.
fn registry_with_model(repo: &str) -> Option<(Registry, Vec<u8>, Vec<u8>)> {
    let reg = Registry::start(None)?;
    let (gguf, config) = model_files();
    reg.push(
        repo,
        "v1",
        &[("tiny.gguf", &gguf), ("config.json", &config)],
    );
    Some((reg, gguf, config))
}

fn flashload() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flexinfer-flashload"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    flexinfer_oci::Digest::of(bytes).hex().to_owned()
}

#[tokio::test]
async fn resolves_pulls_verified_and_skips_an_identical_second_pull() {
    let Some((reg, gguf, config)) = registry_with_model("models/tiny") else {
        return;
    };
    let c = client(&reg.addr, None);

    // Tag → digest: the registry's Docker-Content-Digest and the sha256 of
    // the manifest bytes agree (the client checks both).
    let reference = Reference::parse(&format!("oci://{}/models/tiny:v1", reg.addr)).unwrap();
    let digest = resolve(&c, &reference).await.unwrap();
    let raw = reqwest::Client::new()
        .get(format!("http://{}/v2/models/tiny/manifests/v1", reg.addr))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap();
    let announced = raw.headers()["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = raw.bytes().await.unwrap();
    assert_eq!(digest.to_string(), announced);
    assert_eq!(digest.hex(), sha256_hex(&body));

    let tags = c.tags("models/tiny").await.unwrap();
    assert_eq!(tags, ["v1"]);

    let dest = tempfile::tempdir().unwrap();
    let counters = Counters::new(0);
    let summary = pull(&c, &reference, dest.path(), Some(counters.clone()))
        .await
        .unwrap();
    assert_eq!(summary.resolved.digest.as_ref(), Some(&digest));
    assert_eq!(std::fs::read(dest.path().join("tiny.gguf")).unwrap(), gguf);
    assert_eq!(
        std::fs::read(dest.path().join("config.json")).unwrap(),
        config
    );
    assert_eq!(summary.downloaded, (gguf.len() + config.len()) as u64);
    assert_eq!(counters.bytes.load(Ordering::Relaxed), summary.downloaded);
    assert!(!dest.path().join("tiny.gguf.partial").exists());
    assert!(dest.path().join(MARKER_NAME).exists());

    // Same digest again: nothing is downloaded.
    let again = pull(&c, &reference, dest.path(), None).await.unwrap();
    assert!(again.up_to_date);
    assert_eq!(again.downloaded, 0);

    // Pinned by digest (the one resolved) through the binary.
    let out_dir = tempfile::tempdir().unwrap();
    let out = flashload()
        .args([
            "pull",
            &format!("oci://{}/models/tiny@{digest}", reg.addr),
            "--progress",
            "off",
            "--dest",
        ])
        .arg(out_dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("pulled") && stdout.contains("2 files"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(out_dir.path().join("tiny.gguf")).unwrap(),
        gguf
    );
}

#[tokio::test]
async fn a_tampered_blob_and_a_wrong_digest_fail_with_clear_errors() {
    let Some((reg, gguf, _)) = registry_with_model("models/tampered") else {
        return;
    };
    let good = sha256_hex(&gguf);
    // Flip one byte of the stored blob, keeping its size.
    let blob = reg.blob_path(&good);
    let mut stored = std::fs::read(&blob).unwrap();
    stored[1000] ^= 0xff;
    std::fs::write(&blob, &stored).unwrap();
    let bad = sha256_hex(&stored);

    let dest = tempfile::tempdir().unwrap();
    let out = flashload()
        .args([
            "pull",
            &format!("oci://{}/models/tampered:v1", reg.addr),
            "--progress",
            "off",
            "--dest",
        ])
        .arg(dest.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected =
        format!("digest mismatch for layer tiny.gguf: expected sha256:{good}, got sha256:{bad}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(!dest.path().join("tiny.gguf").exists());
    assert!(
        !dest.path().join("tiny.gguf.partial").exists(),
        "a bad download is not kept"
    );
    assert!(!dest.path().join(MARKER_NAME).exists());

    // A digest the registry does not hold.
    let wrong = format!(
        "oci://{}/models/tampered@sha256:{}",
        reg.addr,
        sha256_hex(b"nope")
    );
    let c = client(&reg.addr, None);
    let err = pull(&c, &Reference::parse(&wrong).unwrap(), dest.path(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("not found on registry"), "{err}");
}

#[tokio::test]
async fn credentials_are_required_checked_and_accepted() {
    let Some(reg) = Registry::start(Some(("puller", "right-password"))) else {
        return;
    };
    let (gguf, config) = model_files();
    reg.push(
        "private/model",
        "v2",
        &[("tiny.gguf", &gguf), ("config.json", &config)],
    );
    let reference = format!("oci://{}/private/model:v2", reg.addr);
    let refused = format!("registry {} refused credentials (401)", reg.addr);

    let dest = tempfile::tempdir().unwrap();
    // Anonymous.
    let out = flashload()
        .args(["pull", &reference, "--progress", "off", "--dest"])
        .arg(dest.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&refused));
    // Wrong password, from the environment.
    let out = flashload()
        .args([
            "pull",
            &reference,
            "--progress",
            "off",
            "--username-env",
            "REG_USER",
            "--password-env",
            "REG_PASS",
            "--dest",
        ])
        .arg(dest.path())
        .env("REG_USER", "puller")
        .env("REG_PASS", "wrong-password")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&refused), "{stderr}");
    assert!(
        !stderr.contains("wrong-password"),
        "the password is never printed"
    );
    // Right password, from a Docker config (as a mounted pull Secret).
    let docker_config = dest.path().join("dockerconfig.json");
    let auth = base64_encode(b"puller:right-password");
    std::fs::write(
        &docker_config,
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, reg.addr),
    )
    .unwrap();
    let model_dir = dest.path().join("model");
    let out = flashload()
        .args(["pull", &reference, "--progress", "log", "--docker-config"])
        .arg(&docker_config)
        .arg("--dest")
        .arg(&model_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(model_dir.join("tiny.gguf")).unwrap(), gguf);
    assert_eq!(
        std::fs::read(model_dir.join("config.json")).unwrap(),
        config
    );
    // The library reports the typed error.
    let c = client(&reg.addr, Some(("puller", "nope")));
    let err = c.tags("private/model").await.unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
    let c = client(&reg.addr, Some(("puller", "right-password")));
    assert_eq!(c.tags("private/model").await.unwrap(), ["v2"]);
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn write_half(dest: &Path, name: &str, content: &[u8]) -> usize {
    let half = content.len() / 2;
    std::fs::write(dest.join(format!("{name}.partial")), &content[..half]).unwrap();
    half
}

#[tokio::test]
async fn an_interrupted_pull_resumes_with_a_range_request() {
    let Some((reg, gguf, config)) = registry_with_model("models/resume") else {
        return;
    };
    let (relay_addr, seen) = support::relay::start(reg.addr.clone()).await;
    let c = client(&relay_addr, None);
    let reference = Reference::parse(&format!("oci://{relay_addr}/models/resume:v1")).unwrap();

    let dest = tempfile::tempdir().unwrap();
    let half = write_half(dest.path(), "tiny.gguf", &gguf);
    let counters = Counters::new(0);
    let summary = pull(&c, &reference, dest.path(), Some(counters.clone()))
        .await
        .unwrap();
    let ranged = seen.requests_with(&format!("range: bytes={half}-"));
    assert_eq!(
        ranged.len(),
        1,
        "one Range request: {:?}",
        seen.requests.lock().unwrap()
    );
    assert!(ranged[0].contains(&format!("/blobs/sha256:{}", sha256_hex(&gguf))));
    assert_eq!(summary.resumed, half as u64);
    let rest = (gguf.len() - half + config.len()) as u64;
    assert_eq!(summary.downloaded, rest);
    assert_eq!(
        counters.bytes.load(Ordering::Relaxed),
        rest,
        "only the missing half came"
    );
    let down = seen.bytes_down.load(Ordering::Relaxed);
    assert!(
        down < gguf.len() as u64,
        "the relay carried {down} bytes, less than the blob"
    );
    assert_eq!(std::fs::read(dest.path().join("tiny.gguf")).unwrap(), gguf);

    // A server ignoring Range (200, whole blob): the download restarts
    // from zero and still verifies.
    let dest = tempfile::tempdir().unwrap();
    let half = write_half(dest.path(), "tiny.gguf", &gguf);
    // A corrupt partial must not survive a restart either.
    let mut corrupt = std::fs::read(dest.path().join("tiny.gguf.partial")).unwrap();
    corrupt[0] ^= 1;
    std::fs::write(dest.path().join("tiny.gguf.partial"), &corrupt).unwrap();
    seen.strip_range.store(true, Ordering::Relaxed);
    let summary = pull(&c, &reference, dest.path(), None).await.unwrap();
    assert!(seen.requests_with(&format!("range: bytes={half}-")).len() >= 2);
    assert_eq!(summary.resumed, 0);
    assert_eq!(summary.downloaded, (gguf.len() + config.len()) as u64);
    assert_eq!(std::fs::read(dest.path().join("tiny.gguf")).unwrap(), gguf);
}

/// Layers are fetched several at once, each on its own connection, and
/// the files are the same whatever the number of jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_are_fetched_in_parallel() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| {
            (
                format!("shard-{i}.bin"),
                pseudo_random(3 * MIB + i, 40 + i as u64),
            )
        })
        .collect();
    let named: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(name, bytes)| (name.as_str(), bytes.as_slice()))
        .collect();
    reg.push("models/sharded", "v1", &named);
    for jobs in [1u16, 4] {
        let (relay_addr, seen) = support::relay::start(reg.addr.clone()).await;
        let c = client(&relay_addr, None);
        let reference = Reference::parse(&format!("oci://{relay_addr}/models/sharded:v1")).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let fetched = c.manifest(&reference).await.unwrap();
        let summary = pull_manifest(
            &c,
            &reference,
            fetched,
            dest.path(),
            None,
            Instant::now(),
            jobs,
        )
        .await
        .unwrap();
        let total: usize = files.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(summary.downloaded, total as u64, "jobs {jobs}");
        for (name, bytes) in &files {
            assert_eq!(
                &std::fs::read(dest.path().join(name)).unwrap(),
                bytes,
                "jobs {jobs}"
            );
        }
        // The relay counts a connection until it has torn down both
        // directions, so one closing while its successor opens can add one.
        let most = seen.most_open.load(Ordering::SeqCst);
        if jobs == 1 {
            assert!(
                most <= 2,
                "one layer at a time: {most} connections were open at once"
            );
        } else {
            assert!(
                most >= 3,
                "jobs {jobs}: at most {most} connection(s) at once"
            );
        }
    }
}

/// Throughput figure of a ~50 MiB artifact over loopback (printed; the
/// assertion is only that it completes and verifies).
#[tokio::test]
async fn pull_throughput_of_a_50_mib_artifact() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let big = pseudo_random(48 * MIB, 11);
    let small = pseudo_random(2 * MIB, 12);
    reg.push(
        "models/big",
        "v1",
        &[("model.gguf", &big), ("tokenizer.bin", &small)],
    );
    let c = Arc::new(client(&reg.addr, None));
    let reference = Reference::parse(&format!("oci://{}/models/big:v1", reg.addr)).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let summary = pull(&c, &reference, dest.path(), None).await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(summary.downloaded, (big.len() + small.len()) as u64);
    assert_eq!(std::fs::read(dest.path().join("model.gguf")).unwrap(), big);
    eprintln!(
        "figure: pulled {:.1} MiB over loopback in {secs:.2} s = {:.1} MiB/s (sha256 verified; {} build)",
        summary.downloaded as f64 / MIB as f64,
        summary.downloaded as f64 / MIB as f64 / secs,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
}

// The binary runs while the token front serves: more than one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_handshake_gets_a_token_per_scope() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    let (gguf, config) = model_files();
    reg.push(
        "team/model",
        "v1",
        &[("tiny.gguf", &gguf), ("config.json", &config)],
    );
    let front = support::token_front::start(&reg.addr, "robot$team+puller", "robot-secret").await;
    let reference = Reference::parse(&format!("oci://{}/team/model:v1", front.addr)).unwrap();

    // Right credentials: a token for the repository's pull scope, fetched
    // once and reused for the manifest and both blobs.
    let c = client(&front.addr, Some(("robot$team+puller", "robot-secret")));
    let dest = tempfile::tempdir().unwrap();
    let summary = pull(&c, &reference, dest.path(), None).await.unwrap();
    assert_eq!(summary.files.len(), 2);
    assert_eq!(std::fs::read(dest.path().join("tiny.gguf")).unwrap(), gguf);
    assert_eq!(front.token_requests(), ["repository:team/model:pull"]);
    assert_eq!(c.tags("team/model").await.unwrap(), ["v1"]);
    assert_eq!(c.catalog().await.unwrap(), ["team/model"]);
    assert_eq!(
        front.token_requests(),
        ["repository:team/model:pull", "registry:catalog:*"]
    );

    // Wrong credentials: the token endpoint refuses them.
    let out = flashload()
        .args([
            "pull",
            &reference.to_string(),
            "--progress",
            "off",
            "--username-env",
            "U",
            "--password-env",
            "P",
            "--dest",
        ])
        .arg(tempfile::tempdir().unwrap().path())
        .env("U", "robot$team+puller")
        .env("P", "not-the-secret")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "registry {} refused credentials (401)",
            front.addr
        )),
        "{stderr}"
    );
    // No credentials at all: no token.
    let anonymous = client(&front.addr, None);
    let err = anonymous.tags("team/model").await.unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
}

// The binary runs while the fake ECR API serves: more than one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecr_keys_are_exchanged_for_a_registry_token() {
    let ecr_password = "eyJwYXlsb2FkIjoiZWNyLXRva2VuIn0";
    let Some(reg) = Registry::start(Some(("AWS", ecr_password))) else {
        return;
    };
    let (gguf, config) = model_files();
    reg.push(
        "team/model",
        "v1",
        &[("tiny.gguf", &gguf), ("config.json", &config)],
    );
    let ecr = support::fake_ecr::start("AKIDFLEXINFERTEST", "us-west-2", ecr_password).await;
    let reference = format!("oci://{}/team/model:v1", reg.addr);
    let run = |access_key: &str| {
        let dest = tempfile::tempdir().unwrap();
        let out = flashload()
            .args([
                "pull",
                &reference,
                "--progress",
                "off",
                "--registry-kind",
                "ecr",
                "--ecr-region",
                "us-west-2",
                "--ecr-endpoint",
                &ecr.endpoint,
                "--dest",
            ])
            .arg(dest.path())
            .env("AWS_ACCESS_KEY_ID", access_key)
            .env("AWS_SECRET_ACCESS_KEY", "secret-key-never-printed")
            .env_remove("AWS_SESSION_TOKEN")
            .output()
            .unwrap();
        (out, dest)
    };
    let (out, dest) = run("AKIDFLEXINFERTEST");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(dest.path().join("tiny.gguf")).unwrap(), gguf);
    let calls = ecr.calls();
    assert_eq!(calls.len(), 1);
    assert!(
        calls[0].contains("SignedHeaders=content-type;host;x-amz-date;x-amz-target"),
        "{}",
        calls[0]
    );

    let (out, _dest) = run("AKIDSOMEONEELSE");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refused the AWS keys (400)"), "{stderr}");
    assert!(!stderr.contains("secret-key-never-printed"));
}

#[tokio::test]
async fn harbor_projects_are_listed_through_its_api_page_by_page() {
    use flexinfer_oci::catalog::{artifacts, repositories, Repositories};
    use flexinfer_oci::RegistryKind;
    let Some(reg) = Registry::start(None) else {
        return;
    };
    for repo in ["team/a", "team/b", "team/c", "other/d"] {
        reg.push(repo, "v1", &[("f.bin", b"weights")]);
    }
    let front = support::token_front::start(&reg.addr, "robot$team+lister", "s3cret").await;
    let c = RegistryClient::new(
        &front.addr,
        ClientOptions {
            credentials: Some(Credentials {
                username: "robot$team+lister".into(),
                password: "s3cret".into(),
            }),
            kind: Some(RegistryKind::Harbor),
            ..Default::default()
        },
    )
    .unwrap();
    let names = repositories(&c, &Repositories::HarborProject("team".into()))
        .await
        .unwrap();
    assert_eq!(
        names,
        ["team/a", "team/b", "team/c"],
        "three pages followed"
    );
    let found = artifacts(&c, &names, true).await.unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].size, Some(7));
    assert_eq!(
        found[2].reference.to_string(),
        format!("oci://{}/team/c:v1", front.addr)
    );

    let refused = client(&front.addr, Some(("robot$team+lister", "wrong")));
    let err = repositories(&refused, &Repositories::HarborProject("team".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
}

#[tokio::test]
async fn the_catalog_follows_link_pagination() {
    let Some(reg) = Registry::start(None) else {
        return;
    };
    for repo in ["models/a", "models/b", "models/c", "models/d", "models/e"] {
        reg.push(repo, "v1", &[("f.bin", repo.as_bytes())]);
    }
    reg.push("models/a", "v2", &[("f.bin", b"x")]);
    let (relay_addr, seen) = support::relay::start(reg.addr.clone()).await;
    let c = RegistryClient::new(
        &relay_addr,
        ClientOptions {
            page_size: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        c.catalog().await.unwrap(),
        ["models/a", "models/b", "models/c", "models/d", "models/e"]
    );
    let pages = seen.requests_with("/v2/_catalog");
    assert_eq!(pages.len(), 3, "5 repositories in pages of 2: {pages:?}");
    assert!(pages[1].contains("last=models"), "{}", pages[1]);
    // (docker-registry 2.8 answers tags in one page whatever `n` says.)
    let mut tags = c.tags("models/a").await.unwrap();
    tags.sort();
    assert_eq!(tags, ["v1", "v2"]);
}
