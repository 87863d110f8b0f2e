//! The kubeconfig of a member cluster, read from a Secret in the hub.
//!
//! The Secret named by `Cluster.spec.secretRef` holds the kubeconfig under
//! the key [`KUBECONFIG_KEY`]. Its current context is used. Because anyone
//! who can write that Secret would otherwise make the operator run
//! commands or read its own files, a kubeconfig must be self-contained:
//! exec plugins, auth providers and file references (`tokenFile`,
//! `certificate-authority`, `client-certificate`, `client-key`) are
//! rejected; inline data (`*-data`, `token`, basic auth) is accepted.
//! Messages never quote the Secret's content.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Key of the kubeconfig in the Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// Timeouts of clients talking to member clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberTimeouts {
    /// TCP/TLS connect.
    pub connect: Duration,
    /// Waiting for a response.
    pub read: Duration,
}

impl Default for MemberTimeouts {
    fn default() -> Self {
        MemberTimeouts {
            connect: Duration::from_secs(5),
            read: Duration::from_secs(20),
        }
    }
}

/// Why a member's kubeconfig cannot be used; [`KubeconfigProblem::reason`]
/// is the condition reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigProblem {
    /// The Secret has no `kubeconfig` key.
    #[error("Secret {0} has no key {KUBECONFIG_KEY:?}")]
    Missing(String),
    /// The value is not a usable kubeconfig.
    #[error("Secret {secret} key {KUBECONFIG_KEY:?}: {message}")]
    Invalid {
        /// Secret name.
        secret: String,
        /// What is wrong, without the content.
        message: String,
    },
    /// The kubeconfig asks for something the operator refuses to do.
    #[error("Secret {secret} key {KUBECONFIG_KEY:?}: {message}")]
    Unsafe {
        /// Secret name.
        secret: String,
        /// What is refused.
        message: String,
    },
}

impl KubeconfigProblem {
    /// Condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            KubeconfigProblem::Missing(_) => "KubeconfigMissing",
            KubeconfigProblem::Invalid { .. } => "KubeconfigInvalid",
            KubeconfigProblem::Unsafe { .. } => "KubeconfigUnsafe",
        }
    }
}

/// The kubeconfig text of `secret` (`data` first, then `stringData`).
pub fn kubeconfig_text(secret: &Secret) -> Result<String, KubeconfigProblem> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(KUBECONFIG_KEY))
                .map(|s| s.clone().into_bytes())
        })
        .ok_or_else(|| KubeconfigProblem::Missing(name.clone()))?;
    String::from_utf8(raw).map_err(|_| KubeconfigProblem::Invalid {
        secret: name,
        message: "not UTF-8 text".into(),
    })
}

/// Parses and vets the kubeconfig of `secret`.
pub fn parse(secret: &Secret) -> Result<Kubeconfig, KubeconfigProblem> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let text = kubeconfig_text(secret)?;
    let kc = Kubeconfig::from_yaml(&text).map_err(|_| KubeconfigProblem::Invalid {
        secret: name.clone(),
        message: "not a kubeconfig document".into(),
    })?;
    check_self_contained(&kc).map_err(|message| KubeconfigProblem::Unsafe {
        secret: name.clone(),
        message,
    })?;
    if kc.current_context.as_deref().unwrap_or("").is_empty() && kc.contexts.len() != 1 {
        return Err(KubeconfigProblem::Invalid {
            secret: name,
            message: "no current-context".into(),
        });
    }
    Ok(kc)
}

/// Refuses exec plugins, auth providers and file references.
pub fn check_self_contained(kc: &Kubeconfig) -> Result<(), String> {
    for named in &kc.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let who = &named.name;
        if user.exec.is_some() {
            return Err(format!(
                "user {who:?} uses an exec plugin, which is not allowed"
            ));
        }
        if user.auth_provider.is_some() {
            return Err(format!(
                "user {who:?} uses an auth provider, which is not allowed"
            ));
        }
        for (field, set) in [
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ] {
            if set {
                return Err(format!(
                    "user {who:?} refers to a file ({field}); use the inline -data form"
                ));
            }
        }
    }
    for named in &kc.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {:?} refers to a file (certificate-authority); use certificate-authority-data",
                named.name
            ));
        }
    }
    Ok(())
}

/// A client configuration for the member described by `kc` (its current
/// context, or its only context).
pub async fn member_config(
    kc: Kubeconfig,
    secret: &str,
    timeouts: MemberTimeouts,
) -> Result<kube::Config, KubeconfigProblem> {
    let context = match kc.current_context.as_deref() {
        Some(c) if !c.is_empty() => None,
        _ => kc.contexts.first().map(|c| c.name.clone()),
    };
    let options = KubeConfigOptions {
        context,
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| KubeconfigProblem::Invalid {
            secret: secret.to_owned(),
            message: describe(&e),
        })?;
    config.connect_timeout = Some(timeouts.connect);
    config.read_timeout = Some(timeouts.read);
    config.write_timeout = Some(timeouts.read);
    Ok(config)
}

/// A short description of a kubeconfig loading error that cannot echo
/// credentials.
fn describe(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as E;
    match e {
        E::CurrentContextNotSet => "no current-context".into(),
        E::LoadContext(name) => format!("context {name:?} not found"),
        E::LoadClusterOfContext(name) => format!("cluster {name:?} not found"),
        E::MissingClusterUrl => "the cluster has no server URL".into(),
        E::ParseClusterUrl(_) => "the cluster's server URL does not parse".into(),
        E::ParseProxyUrl(_) => "the cluster's proxy-url does not parse".into(),
        E::LoadCertificateAuthority(_) => "certificate-authority-data does not decode".into(),
        E::LoadClientCertificate(_) => "client-certificate-data does not decode".into(),
        E::LoadClientKey(_) => "client-key-data does not decode".into(),
        E::ParseCertificates(_) => "a certificate is not valid PEM".into(),
        _ => "cannot load the kubeconfig".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    const PLAIN: &str = "apiVersion: v1
kind: Config
clusters:
- name: east
  cluster:
    server: https://east.example.com:6443
    certificate-authority-data: Zm9v
contexts:
- name: east
  context: {cluster: east, user: admin}
current-context: east
users:
- name: admin
  user: {token: s3cr3t-token}
";

    fn secret(key: &str, text: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("east-kubeconfig".into());
        s.data = Some([(key.to_owned(), ByteString(text.as_bytes().to_vec()))].into());
        s
    }

    #[test]
    fn reads_a_self_contained_kubeconfig() {
        let kc = parse(&secret(KUBECONFIG_KEY, PLAIN)).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("east"));
        let mut s = Secret::default();
        s.metadata.name = Some("x".into());
        s.string_data = Some([(KUBECONFIG_KEY.to_owned(), PLAIN.to_owned())].into());
        assert!(parse(&s).is_ok());
    }

    #[test]
    fn problems_name_the_secret_and_never_the_content() {
        let missing = parse(&secret("config", PLAIN)).unwrap_err();
        assert_eq!(missing.reason(), "KubeconfigMissing");
        assert_eq!(
            missing.to_string(),
            "Secret east-kubeconfig has no key \"kubeconfig\""
        );
        let garbage = parse(&secret(KUBECONFIG_KEY, "token: [s3cr3t")).unwrap_err();
        assert_eq!(garbage.reason(), "KubeconfigInvalid");
        assert!(!garbage.to_string().contains("s3cr3t"), "{garbage}");

        let refused = [
            (
                "  user: {exec: {command: /bin/sh, apiVersion: client.authentication.k8s.io/v1}}",
                "exec plugin",
            ),
            ("  user: {auth-provider: {name: gcp}}", "auth provider"),
            ("  user: {tokenFile: /var/run/secrets/token}", "tokenFile"),
            ("  user: {client-key: /etc/key.pem}", "client-key"),
        ];
        for (user, expected) in refused {
            let text = PLAIN.replace("  user: {token: s3cr3t-token}", user);
            let err = parse(&secret(KUBECONFIG_KEY, &text)).unwrap_err();
            assert_eq!(err.reason(), "KubeconfigUnsafe", "{user}");
            assert!(err.to_string().contains(expected), "{err}");
        }
        let ca_file = PLAIN.replace(
            "certificate-authority-data: Zm9v",
            "certificate-authority: /etc/ca.pem",
        );
        let err = parse(&secret(KUBECONFIG_KEY, &ca_file)).unwrap_err();
        assert!(
            err.to_string().contains("certificate-authority-data"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn member_config_uses_the_current_context_and_sets_timeouts() {
        let text = "apiVersion: v1
kind: Config
clusters:
- name: m
  cluster: {server: 'http://127.0.0.1:6443'}
contexts:
- name: m
  context: {cluster: m, user: u, namespace: tenants}
users:
- name: u
  user: {}
";
        let kc = parse(&secret(KUBECONFIG_KEY, text)).unwrap();
        let t = MemberTimeouts {
            connect: Duration::from_secs(2),
            read: Duration::from_secs(7),
        };
        let config = member_config(kc, "s", t).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:6443/");
        assert_eq!(config.default_namespace, "tenants");
        assert_eq!(config.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(config.read_timeout, Some(Duration::from_secs(7)));
    }
}
