//! Listing the models of one `spec.registries[]` entry: the repositories
//! (Harbor project API, `/v2/_catalog` or the listed `repositories`), their
//! tags, each tag's size, filtered by `spec.filter`.

use flexinfer_crds::v1alpha2::{
    CatalogEntry, CatalogFilter, OciProvider, RegistrySource, RegistryType,
};
use flexinfer_oci::catalog::{self, Repositories};
use flexinfer_oci::{ClientOptions, Credentials, RegistryClient, RegistryKind};

use super::filter;

/// `registry` field of entries from OCI registries.
pub const OCI_REGISTRY: &str = "OCI";
/// The most manifests read for sizes per registry and sync; tags beyond
/// are listed without a size.
pub const MAX_SIZED_ENTRIES: usize = 500;

/// Where a registry's `url` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryUrl {
    /// `host[:port]`.
    pub registry: String,
    /// Path after the host (Harbor project, or repository prefix), without
    /// slashes at either end; empty when none.
    pub path: String,
    /// `http://` was written.
    pub plain_http: bool,
}

/// Parses `url` (`registry.lan/models`, `https://ghcr.io`, `http://127.0.0.1:5000`).
pub fn parse_url(url: &str) -> Result<RegistryUrl, String> {
    let url = url.trim();
    let (plain_http, rest) = match url.split_once("://") {
        Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
            "http" => (true, rest),
            "https" | "oci" => (false, rest),
            other => {
                return Err(format!(
                    "unsupported scheme {other:?} in registry url {url:?}"
                ))
            }
        },
        None => (false, url),
    };
    let (registry, path) = rest.split_once('/').unwrap_or((rest, ""));
    if registry.is_empty() {
        return Err(format!("registry url {url:?} has no host"));
    }
    Ok(RegistryUrl {
        registry: registry.to_ascii_lowercase(),
        path: path.trim_matches('/').to_owned(),
        plain_http,
    })
}

/// The client flavour of a declared provider.
pub fn kind_of(provider: Option<OciProvider>, registry: &str) -> RegistryKind {
    match provider {
        Some(OciProvider::Generic) => RegistryKind::Generic,
        Some(OciProvider::Harbor) => RegistryKind::Harbor,
        Some(OciProvider::Ghcr) => RegistryKind::Ghcr,
        Some(OciProvider::Ecr) => RegistryKind::Ecr,
        None => RegistryKind::detect(registry),
    }
}

/// What to list for `source` at `url`.
pub fn repositories_of(
    source: &RegistrySource,
    url: &RegistryUrl,
    kind: RegistryKind,
) -> Result<Repositories, String> {
    if !source.repositories.is_empty() {
        let prefix = |r: &String| {
            if url.path.is_empty() || r.starts_with(&format!("{}/", url.path)) {
                r.clone()
            } else {
                format!("{}/{r}", url.path)
            }
        };
        return Ok(Repositories::Named(
            source.repositories.iter().map(prefix).collect(),
        ));
    }
    match kind {
        RegistryKind::Harbor if url.path.is_empty() => Err(format!(
            "Harbor registry {} needs its project in url ({}/<project>) or repositories",
            url.registry, url.registry
        )),
        RegistryKind::Harbor => Ok(Repositories::HarborProject(
            url.path.split('/').next().unwrap_or_default().to_owned(),
        )),
        RegistryKind::Ghcr | RegistryKind::Ecr => Err(format!(
            "registry {} does not list its repositories (/v2/_catalog); name them in repositories",
            url.registry
        )),
        RegistryKind::Generic => Ok(Repositories::Catalog {
            prefix: (!url.path.is_empty()).then(|| url.path.clone()),
        }),
    }
}

/// Lists the models of one registry entry, filtered. Errors are one line
/// naming the registry.
pub async fn list(
    source: &RegistrySource,
    credentials: Option<Credentials>,
    filter_spec: Option<&CatalogFilter>,
) -> Result<Vec<CatalogEntry>, String> {
    if source.type_ != RegistryType::Oci {
        return Err(format!(
            "registry type {:?} is not synced (only OCI registries are)",
            source.type_
        ));
    }
    let url = source
        .url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| "an OCI registry needs url".to_owned())
        .and_then(parse_url)?;
    let kind = kind_of(source.provider, &url.registry);
    let repositories = repositories_of(source, &url, kind)?;
    let client = RegistryClient::new(
        &url.registry,
        ClientOptions {
            credentials,
            plain_http: url.plain_http.then_some(true),
            kind: Some(kind),
            request_timeout: None,
            page_size: None,
        },
    )
    .map_err(|e| e.to_string())?;
    let names = catalog::repositories(&client, &repositories)
        .await
        .map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    for name in names {
        let mut tags = client.tags(&name).await.map_err(|e| e.to_string())?;
        if !filter::keeps(filter_spec, &name, &tags) {
            continue;
        }
        tags.sort();
        for tag in tags {
            let reference = format!("oci://{}/{name}:{tag}", url.registry);
            let size = if entries.len() < MAX_SIZED_ENTRIES {
                let parsed =
                    flexinfer_oci::Reference::parse(&reference).map_err(|e| e.to_string())?;
                let fetched = client.manifest(&parsed).await.map_err(|e| e.to_string())?;
                i64::try_from(fetched.manifest.layers_size()).ok()
            } else {
                None
            };
            entries.push(CatalogEntry {
                name: name.clone(),
                registry: OCI_REGISTRY.to_owned(),
                reference,
                size,
            });
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url: &str, repositories: &[&str], provider: Option<OciProvider>) -> RegistrySource {
        RegistrySource {
            type_: RegistryType::Oci,
            url: Some(url.into()),
            secret_ref: None,
            provider,
            repositories: repositories.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn urls_and_what_to_list() {
        let u = parse_url("https://Harbor.lan/models/").unwrap();
        assert_eq!(
            (u.registry.as_str(), u.path.as_str(), u.plain_http),
            ("harbor.lan", "models", false)
        );
        assert!(parse_url("http://127.0.0.1:5000").unwrap().plain_http);
        assert!(parse_url("ftp://x").is_err());

        let s = source("harbor.lan/models", &[], Some(OciProvider::Harbor));
        let u = parse_url(s.url.as_deref().unwrap()).unwrap();
        assert_eq!(
            repositories_of(&s, &u, kind_of(s.provider, &u.registry)).unwrap(),
            Repositories::HarborProject("models".into())
        );
        let s = source("ghcr.io/org", &["qwen", "org/llama"], None);
        let u = parse_url(s.url.as_deref().unwrap()).unwrap();
        assert_eq!(
            repositories_of(&s, &u, kind_of(None, &u.registry)).unwrap(),
            Repositories::Named(vec!["org/qwen".into(), "org/llama".into()])
        );
        let s = source("ghcr.io", &[], None);
        let u = parse_url("ghcr.io").unwrap();
        let err = repositories_of(&s, &u, kind_of(None, "ghcr.io")).unwrap_err();
        assert!(err.contains("name them in repositories"), "{err}");
        let u = parse_url("registry.lan:5000/team").unwrap();
        assert_eq!(
            repositories_of(
                &source("registry.lan:5000/team", &[], None),
                &u,
                RegistryKind::Generic
            )
            .unwrap(),
            Repositories::Catalog {
                prefix: Some("team".into())
            }
        );
    }
}
