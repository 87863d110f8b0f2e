//! Listing what a registry holds, for catalogs: repositories (Harbor's
//! project API, the generic `/v2/_catalog`, or a given list), then the
//! tags of each and, on request, each tag's size from its manifest.

use reqwest::header::AUTHORIZATION;
use serde::Deserialize;

use super::client::{next_link, RegistryClient};
use super::error::{OciError, Result};
use super::reference::Reference;

/// Page size of Harbor's repository listing.
pub const HARBOR_PAGE_SIZE: usize = 100;

/// Where the repositories of a registry come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repositories {
    /// Harbor: `/api/v2.0/projects/<project>/repositories`.
    HarborProject(String),
    /// `/v2/_catalog`, keeping names under `prefix` when given.
    Catalog {
        /// Repository prefix (`org/models`), without trailing slash.
        prefix: Option<String>,
    },
    /// These repositories (registries that refuse `_catalog`: GHCR, ECR).
    Named(Vec<String>),
}

/// One tag of one repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Repository path.
    pub repository: String,
    /// Tag.
    pub tag: String,
    /// `oci://registry/repository:tag`.
    pub reference: Reference,
    /// Sum of the layer sizes, when manifests were read.
    pub size: Option<u64>,
}

#[derive(Deserialize)]
struct HarborRepository {
    name: String,
}

/// The repositories `source` names on `client`'s registry, sorted.
pub async fn repositories(client: &RegistryClient, source: &Repositories) -> Result<Vec<String>> {
    let mut out = match source {
        Repositories::HarborProject(project) => harbor_repositories(client, project).await?,
        Repositories::Catalog { prefix } => {
            let all = client.catalog().await?;
            match prefix
                .as_deref()
                .map(|p| p.trim_matches('/'))
                .filter(|p| !p.is_empty())
            {
                Some(p) => all
                    .into_iter()
                    .filter(|r| r == p || r.starts_with(&format!("{p}/")))
                    .collect(),
                None => all,
            }
        }
        Repositories::Named(names) => names.clone(),
    };
    out.sort();
    out.dedup();
    Ok(out)
}

/// Harbor's repositories of `project` (names come back as
/// `project/repo`), with the client's credentials as Basic auth.
pub async fn harbor_repositories(client: &RegistryClient, project: &str) -> Result<Vec<String>> {
    let host = client.registry().to_owned();
    let mut out = Vec::new();
    let mut url = format!(
        "{}/api/v2.0/projects/{project}/repositories?page=1&page_size={HARBOR_PAGE_SIZE}",
        client.base_url()
    );
    for _ in 0..10_000 {
        let mut request = client.http().get(&url);
        if let Some(c) = client.credentials() {
            request = request.header(AUTHORIZATION, c.basic_header());
        }
        let response = request.send().await.map_err(|error| OciError::Http {
            host: host.clone(),
            error,
        })?;
        match response.status().as_u16() {
            401 => return Err(OciError::Unauthorized { host }),
            403 => {
                return Err(OciError::Denied {
                    host,
                    what: format!("project {project}"),
                })
            }
            404 => {
                return Err(OciError::NotFound {
                    host,
                    what: format!("project {project}"),
                })
            }
            _ => {}
        }
        let response = client
            .expect_success(response, &format!("project {project}"))
            .await?;
        let next = next_link(response.headers());
        let page: Vec<HarborRepository> =
            response.json().await.map_err(|error| OciError::Http {
                host: host.clone(),
                error,
            })?;
        out.extend(page.into_iter().map(|r| r.name));
        match next {
            Some(n) => {
                let n = if n.starts_with('/') {
                    format!("{}{n}", client.base_url())
                } else {
                    n
                };
                if n == url {
                    break;
                }
                url = n;
            }
            None => break,
        }
    }
    Ok(out)
}

/// Every tag of every repository, with sizes from the manifests when
/// `with_sizes` (one manifest request per tag).
pub async fn artifacts(
    client: &RegistryClient,
    repositories: &[String],
    with_sizes: bool,
) -> Result<Vec<Artifact>> {
    let mut out = Vec::new();
    for repository in repositories {
        let mut tags = client.tags(repository).await?;
        tags.sort();
        for tag in tags {
            let reference =
                Reference::parse(&format!("oci://{}/{repository}:{tag}", client.registry()))?;
            let size = if with_sizes {
                Some(client.manifest(&reference).await?.manifest.layers_size())
            } else {
                None
            };
            out.push(Artifact {
                repository: repository.clone(),
                tag,
                reference,
                size,
            });
        }
    }
    Ok(out)
}
