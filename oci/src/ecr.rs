//! Amazon ECR login: the `GetAuthorizationToken` call of the ECR API,
//! signed with AWS Signature Version 4, turned into the `AWS`/password
//! credentials the registry accepts (what `aws ecr get-login-password`
//! does). Used when a pull or a catalog targets ECR with AWS access keys
//! instead of a ready token; tokens last 12 hours, so every pull or sync
//! asks for a fresh one.

use std::fmt;
use std::time::SystemTime;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::credentials::Credentials;
use super::error::OciError;
use super::reference::host_of;

/// Signing service name of the ECR API.
pub const SERVICE: &str = "ecr";
/// `X-Amz-Target` of `GetAuthorizationToken`.
pub const TARGET: &str = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken";

/// AWS access keys. `Debug` redacts the secret and the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
    /// `AWS_SESSION_TOKEN` of temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl AwsCredentials {
    /// Keys from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
    /// `AWS_SESSION_TOKEN`; `None` unless the first two are set.
    pub fn from_env() -> Option<AwsCredentials> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(AwsCredentials {
            access_key_id: var("AWS_ACCESS_KEY_ID")?,
            secret_access_key: var("AWS_SECRET_ACCESS_KEY")?,
            session_token: var("AWS_SESSION_TOKEN"),
        })
    }
}

/// The region of an ECR registry host
/// (`<account>.dkr.ecr.<region>.amazonaws.com[.cn]`).
pub fn region_of(registry: &str) -> Option<String> {
    let host = host_of(registry);
    let (_, rest) = host.split_once(".dkr.ecr.")?;
    let region = rest.split('.').next()?;
    (!region.is_empty()).then(|| region.to_owned())
}

/// The ECR API endpoint of `region`.
pub fn endpoint(region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://api.ecr.{region}.{suffix}/")
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// `YYYYMMDDTHHMMSSZ` of `t` (UTC).
pub fn amz_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One request to sign.
#[derive(Debug, Clone)]
pub struct SigningRequest<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path (`/`).
    pub path: &'a str,
    /// Canonical query string (already sorted and encoded).
    pub query: &'a str,
    /// Headers to sign (name, value); `host` and `x-amz-date` included.
    pub headers: &'a [(&'a str, &'a str)],
    /// Body.
    pub payload: &'a [u8],
    /// Region.
    pub region: &'a str,
    /// Service (`ecr`).
    pub service: &'a str,
    /// `YYYYMMDDTHHMMSSZ`, equal to the `x-amz-date` header.
    pub amz_date: &'a str,
}

/// The `Authorization` header value of `request` (AWS Signature
/// Version 4).
pub fn authorization(request: &SigningRequest<'_>, keys: &AwsCredentials) -> String {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let signed_headers = headers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        request.path,
        request.query,
        hex::encode(Sha256::digest(request.payload))
    );
    let date = &request.amz_date[..8.min(request.amz_date.len())];
    let scope = format!("{date}/{}/{}/aws4_request", request.region, request.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        request.amz_date,
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac_sha256(
        format!("AWS4{}", keys.secret_access_key).as_bytes(),
        date.as_bytes(),
    );
    for part in [request.region, request.service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let signature = hex::encode(hmac_sha256(&key, string_to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        keys.access_key_id
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenResponse {
    authorization_data: Vec<AuthorizationData>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorizationData {
    authorization_token: String,
}

/// Calls `GetAuthorizationToken` at `endpoint` (see [`endpoint`]) for
/// `region` and returns the registry credentials (`AWS` and the decoded
/// password). An answer of 400/403 means the keys were refused.
pub async fn login(
    http: &reqwest::Client,
    endpoint_url: &str,
    region: &str,
    keys: &AwsCredentials,
    now: SystemTime,
) -> Result<Credentials, OciError> {
    let url = reqwest::Url::parse(endpoint_url).map_err(|e| {
        OciError::Credentials(format!("invalid ECR endpoint {endpoint_url:?}: {e}"))
    })?;
    let host = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let date = amz_date(now);
    let payload = b"{}";
    let content_type = "application/x-amz-json-1.1";
    let mut headers: Vec<(&str, &str)> = vec![
        ("content-type", content_type),
        ("host", &host),
        ("x-amz-date", &date),
        ("x-amz-target", TARGET),
    ];
    if let Some(token) = &keys.session_token {
        headers.push(("x-amz-security-token", token));
    }
    let path = if url.path().is_empty() {
        "/"
    } else {
        url.path()
    };
    let auth = authorization(
        &SigningRequest {
            method: "POST",
            path,
            query: "",
            headers: &headers,
            payload,
            region,
            service: SERVICE,
            amz_date: &date,
        },
        keys,
    );
    let mut request = http
        .post(url.clone())
        .header("authorization", auth)
        .body(payload.to_vec());
    for (name, value) in &headers {
        if *name != "host" {
            request = request.header(*name, *value);
        }
    }
    let response = request.send().await.map_err(|error| OciError::Http {
        host: host.clone(),
        error,
    })?;
    let status = response.status();
    if matches!(status.as_u16(), 400 | 401 | 403) {
        let body = response.text().await.unwrap_or_default();
        return Err(OciError::Credentials(format!(
            "ECR GetAuthorizationToken at {host} refused the AWS keys ({}): {}",
            status.as_u16(),
            body.chars().take(200).collect::<String>()
        )));
    }
    if !status.is_success() {
        return Err(OciError::Status {
            host,
            status: status.as_u16(),
            what: "GetAuthorizationToken".to_owned(),
            body: response
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect(),
        });
    }
    let body: TokenResponse = response
        .json()
        .await
        .map_err(|error| OciError::Http { host, error })?;
    let token = body
        .authorization_data
        .into_iter()
        .next()
        .map(|d| d.authorization_token)
        .ok_or_else(|| OciError::Credentials("ECR returned no authorization data".into()))?;
    let credentials = Credentials {
        username: String::new(),
        password: token,
    }
    .adapted(super::credentials::RegistryKind::Ecr);
    if credentials.username != super::credentials::ECR_USER {
        return Err(OciError::Credentials(
            "ECR authorization token is not base64 of AWS:<password>".into(),
        ));
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn example_keys() -> AwsCredentials {
        AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    /// The worked example of the AWS Signature Version 4 documentation
    /// (IAM `ListUsers`, 2015-08-30T12:36:00Z).
    #[test]
    fn signs_the_documented_example() {
        let headers = [
            (
                "Content-Type",
                "application/x-www-form-urlencoded; charset=utf-8",
            ),
            ("Host", "iam.amazonaws.com"),
            ("X-Amz-Date", "20150830T123600Z"),
        ];
        let auth = authorization(
            &SigningRequest {
                method: "GET",
                path: "/",
                query: "Action=ListUsers&Version=2010-05-08",
                headers: &headers,
                payload: b"",
                region: "us-east-1",
                service: "iam",
                amz_date: "20150830T123600Z",
            },
            &example_keys(),
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn dates_regions_and_endpoints() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        assert_eq!(amz_date(t), "20150830T123600Z");
        assert_eq!(
            amz_date(SystemTime::UNIX_EPOCH + Duration::from_secs(951_825_600)),
            "20000229T120000Z"
        );
        assert_eq!(
            region_of("123456789012.dkr.ecr.eu-west-3.amazonaws.com").as_deref(),
            Some("eu-west-3")
        );
        assert_eq!(region_of("ghcr.io"), None);
        assert_eq!(
            endpoint("us-east-1"),
            "https://api.ecr.us-east-1.amazonaws.com/"
        );
        assert_eq!(
            endpoint("cn-north-1"),
            "https://api.ecr.cn-north-1.amazonaws.com.cn/"
        );
        let shown = format!(
            "{:?}",
            AwsCredentials {
                session_token: Some("tok-secret".into()),
                ..example_keys()
            }
        );
        assert!(
            !shown.contains("EXAMPLEKEY") && !shown.contains("tok-secret"),
            "{shown}"
        );
    }
}
