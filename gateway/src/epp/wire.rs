//! The ext_proc messages of the endpoint-picker protocol, to and from the
//! gateway's own types: request and response heads as Envoy sends them
//! (pseudo-headers first), header mutations, the picked endpoints (the
//! `x-gateway-destination-endpoint` header or `envoy.lb` metadata) and the
//! endpoint that served (`metadata_context`).

use std::collections::HashMap;
use std::net::SocketAddr;

use envoy_types::pb::envoy::config::core::v3::{
    HeaderMap as EnvoyHeaders, HeaderValue as EnvoyHeader, Metadata,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{HeaderMutation, HttpHeaders};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use http::{HeaderMap, HeaderName, HeaderValue};

/// Namespace of the picker's metadata.
pub const LB_NAMESPACE: &str = "envoy.lb";
/// The picked endpoints (`ip:port[,ip:port...]`), header and metadata key.
pub const DESTINATION: &str = "x-gateway-destination-endpoint";
/// The endpoint that served, reported back to the picker.
pub const SERVED: &str = "x-gateway-destination-endpoint-served";

/// Header changes a picker asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mutation {
    /// Headers to set (replacing any of the same name).
    pub set: Vec<(HeaderName, HeaderValue)>,
    /// Headers to remove.
    pub remove: Vec<HeaderName>,
}

impl Mutation {
    /// The mutation a picker sent; names or values that are not valid
    /// HTTP, and pseudo-headers, are skipped.
    pub fn from_proto(m: Option<&HeaderMutation>) -> Self {
        let Some(m) = m else {
            return Mutation::default();
        };
        let set = m
            .set_headers
            .iter()
            .filter_map(|o| o.header.as_ref())
            .filter(|h| !h.key.starts_with(':'))
            .filter_map(|h| {
                let name = HeaderName::from_bytes(h.key.as_bytes()).ok()?;
                let raw = if h.raw_value.is_empty() {
                    h.value.as_bytes()
                } else {
                    &h.raw_value
                };
                Some((name, HeaderValue::from_bytes(raw).ok()?))
            })
            .collect();
        let remove = m
            .remove_headers
            .iter()
            .filter(|k| !k.starts_with(':'))
            .filter_map(|k| HeaderName::from_bytes(k.as_bytes()).ok())
            .collect();
        Mutation { set, remove }
    }

    /// Applies the mutation to a head.
    pub fn apply(&self, head: &mut impl HeadMut) {
        for name in &self.remove {
            head.remove(name);
        }
        for (name, value) in &self.set {
            head.set(name, value);
        }
    }

    /// The value set for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&HeaderValue> {
        self.set.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// A head whose headers a [`Mutation`] changes.
pub trait HeadMut {
    /// Sets `name` to `value`, replacing what it had.
    fn set(&mut self, name: &HeaderName, value: &HeaderValue);
    /// Removes `name`.
    fn remove(&mut self, name: &HeaderName);
}

impl HeadMut for HeaderMap {
    fn set(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.insert(name.clone(), value.clone());
    }
    fn remove(&mut self, name: &HeaderName) {
        HeaderMap::remove(self, name);
    }
}

impl HeadMut for pingora_http::RequestHeader {
    fn set(&mut self, name: &HeaderName, value: &HeaderValue) {
        let _ = self.insert_header(name.clone(), value.clone());
    }
    fn remove(&mut self, name: &HeaderName) {
        self.remove_header(name);
    }
}

impl HeadMut for pingora_http::ResponseHeader {
    fn set(&mut self, name: &HeaderName, value: &HeaderValue) {
        let _ = self.insert_header(name.clone(), value.clone());
    }
    fn remove(&mut self, name: &HeaderName) {
        self.remove_header(name);
    }
}

fn header(key: &str, value: &[u8]) -> EnvoyHeader {
    EnvoyHeader {
        key: key.to_string(),
        raw_value: value.to_vec(),
        ..EnvoyHeader::default()
    }
}

/// A head as Envoy sends it: the pseudo-headers, then every header.
fn head(pseudo: &[(&str, &[u8])], headers: &HeaderMap, end_of_stream: bool) -> HttpHeaders {
    let list = pseudo
        .iter()
        .map(|(key, value)| header(key, value))
        .chain(
            headers
                .iter()
                .map(|(name, value)| header(name.as_str(), value.as_bytes())),
        )
        .collect();
    HttpHeaders {
        headers: Some(EnvoyHeaders { headers: list }),
        end_of_stream,
        ..HttpHeaders::default()
    }
}

/// A request head: `:method`, `:path`, `:authority`, `:scheme`, then
/// every header.
pub fn request_headers(
    method: &str,
    path_and_query: &str,
    authority: &str,
    headers: &HeaderMap,
    end_of_stream: bool,
) -> HttpHeaders {
    let pseudo: [(&str, &[u8]); 4] = [
        (":method", method.as_bytes()),
        (":path", path_and_query.as_bytes()),
        (":authority", authority.as_bytes()),
        (":scheme", b"http"),
    ];
    head(&pseudo, headers, end_of_stream)
}

/// A response head: `:status`, then every header.
pub fn response_headers(status: u16, headers: &HeaderMap) -> HttpHeaders {
    head(
        &[(":status", status.to_string().as_bytes())],
        headers,
        false,
    )
}

/// `envoy.lb: {x-gateway-destination-endpoint-served: ip:port}`.
pub fn served_metadata(served: SocketAddr) -> Metadata {
    let inner = Struct {
        fields: HashMap::from([(
            SERVED.to_string(),
            Value {
                kind: Some(Kind::StringValue(served.to_string())),
            },
        )]),
    };
    Metadata {
        filter_metadata: HashMap::from([(LB_NAMESPACE.to_string(), inner)]),
        ..Metadata::default()
    }
}

/// The endpoints of an `ip:port[,ip:port...]` list; what does not parse
/// is skipped.
pub fn endpoints(list: &str) -> Vec<SocketAddr> {
    list.split(',')
        .filter_map(|e| e.trim().parse::<SocketAddr>().ok())
        .collect()
}

/// The endpoints in the picker's `envoy.lb` metadata, if it gave any.
pub fn metadata_endpoints(metadata: Option<&Struct>) -> Vec<SocketAddr> {
    let Some(lb) = metadata
        .and_then(|m| m.fields.get(LB_NAMESPACE))
        .and_then(|v| match &v.kind {
            Some(Kind::StructValue(s)) => Some(s),
            _ => None,
        })
    else {
        return Vec::new();
    };
    match lb.fields.get(DESTINATION).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(s)) => endpoints(s),
        Some(Kind::ListValue(l)) => l
            .values
            .iter()
            .filter_map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => s.parse().ok(),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;

    #[test]
    fn endpoints_come_from_lists_and_metadata() {
        assert_eq!(
            endpoints("10.0.0.1:3000, bad,10.0.0.2:3000"),
            vec![
                "10.0.0.1:3000".parse().unwrap(),
                "10.0.0.2:3000".parse().unwrap()
            ]
        );
        let inner = Struct {
            fields: HashMap::from([(
                DESTINATION.to_string(),
                Value {
                    kind: Some(Kind::StringValue("10.0.0.9:8000".into())),
                },
            )]),
        };
        let md = Struct {
            fields: HashMap::from([(
                LB_NAMESPACE.to_string(),
                Value {
                    kind: Some(Kind::StructValue(inner)),
                },
            )]),
        };
        assert_eq!(
            metadata_endpoints(Some(&md)),
            vec!["10.0.0.9:8000".parse().unwrap()]
        );
        assert!(metadata_endpoints(None).is_empty());
        let served = served_metadata("10.0.0.9:8000".parse().unwrap());
        let lb = &served.filter_metadata[LB_NAMESPACE].fields[SERVED];
        assert_eq!(lb.kind, Some(Kind::StringValue("10.0.0.9:8000".into())));
    }

    #[test]
    fn mutations_skip_pseudo_headers_and_invalid_values() {
        let opt = |k: &str, v: &[u8]| HeaderValueOption {
            header: Some(header(k, v)),
            ..HeaderValueOption::default()
        };
        let m = HeaderMutation {
            set_headers: vec![
                opt("x-a", b"1"),
                opt(":status", b"500"),
                opt("x-bad", b"a\nb"),
            ],
            remove_headers: vec!["x-gone".into(), ":path".into()],
        };
        let m = Mutation::from_proto(Some(&m));
        assert_eq!(m.set.len(), 1);
        assert_eq!(m.get("x-a").unwrap(), "1");
        assert_eq!(m.remove, vec![HeaderName::from_static("x-gone")]);
        let mut h = HeaderMap::new();
        h.insert("x-gone", "v".parse().unwrap());
        m.apply(&mut h);
        assert_eq!(h.len(), 1);
        let head = request_headers("POST", "/v1", "a.example", &h, false);
        let keys: Vec<_> = head
            .headers
            .unwrap()
            .headers
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(keys, [":method", ":path", ":authority", ":scheme", "x-a"]);
    }
}
