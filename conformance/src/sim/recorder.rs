//! A bounded log of the requests that reached the simulator, so gateway tests
//! can check what was forwarded (path, headers, body, model).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, Method, Uri};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// One request as it arrived. Headers and digest are kept raw and only turned
/// into strings when serialized, to keep recording cheap.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// Arrival order, starting at 1, unique per server.
    pub seq: u64,
    /// Arrival time in milliseconds since the Unix epoch.
    pub received_at_ms: u64,
    /// HTTP method.
    pub method: Method,
    /// Path without the query.
    pub path: String,
    /// Raw query string, if any.
    pub query: Option<String>,
    /// All request headers.
    pub headers: HeaderMap,
    /// Body length in bytes.
    pub body_len: usize,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
    /// `model` from a JSON body or a multipart field, if present.
    pub model: Option<String>,
    /// The `Content-Type` header, if present.
    pub content_type: Option<String>,
}

impl RequestRecord {
    /// Builds a record for a request; `model` comes from [`crate::sim::intake`].
    pub fn new(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        model: Option<String>,
    ) -> Self {
        let content_type = headers
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Self {
            seq: 0,
            received_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            method: method.clone(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            headers: headers.clone(),
            body_len: body.len(),
            body_sha256: Sha256::digest(body).into(),
            model,
            content_type,
        }
    }

    /// The body digest as lowercase hex.
    pub fn body_sha256_hex(&self) -> String {
        hex::encode(self.body_sha256)
    }
}

/// Headers as a JSON object; repeated headers are joined with `, `.
struct HeadersJson<'a>(&'a HeaderMap);

impl Serialize for HeadersJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.keys_len()))?;
        for name in self.0.keys() {
            let joined = self
                .0
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()))
                .collect::<Vec<_>>()
                .join(", ");
            map.serialize_entry(name.as_str(), &joined)?;
        }
        map.end()
    }
}

impl Serialize for RequestRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("RequestRecord", 10)?;
        s.serialize_field("seq", &self.seq)?;
        s.serialize_field("received_at_ms", &self.received_at_ms)?;
        s.serialize_field("method", self.method.as_str())?;
        s.serialize_field("path", &self.path)?;
        s.serialize_field("query", &self.query)?;
        s.serialize_field("headers", &HeadersJson(&self.headers))?;
        s.serialize_field("body_len", &self.body_len)?;
        s.serialize_field("body_sha256", &self.body_sha256_hex())?;
        s.serialize_field("model", &self.model)?;
        s.serialize_field("content_type", &self.content_type)?;
        s.end()
    }
}

/// The ring of the last `capacity` records.
///
/// A plain mutex around a `VecDeque` of `Arc`s: the critical section is one
/// push (and maybe one pop), so contention stays negligible next to the
/// request itself.
#[derive(Debug)]
pub struct RequestRecorder {
    capacity: usize,
    next_seq: AtomicU64,
    ring: Mutex<VecDeque<Arc<RequestRecord>>>,
}

impl RequestRecorder {
    /// A recorder keeping at most `capacity` records; `0` keeps none.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            next_seq: AtomicU64::new(1),
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
        }
    }

    /// Numbers the record, stores it (dropping the oldest when full) and returns it shared.
    pub fn record(&self, mut record: RequestRecord) -> Arc<RequestRecord> {
        record.seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let record = Arc::new(record);
        if self.capacity > 0 {
            let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(Arc::clone(&record));
        }
        record
    }

    /// The stored records, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<RequestRecord>> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.iter().cloned().collect()
    }

    /// Forgets every stored record and returns how many there were.
    pub fn clear(&self) -> usize {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let n = ring.len();
        ring.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &str) -> RequestRecord {
        let mut headers = HeaderMap::new();
        headers.append("x-a", "1".parse().expect("value"));
        headers.append("x-a", "2".parse().expect("value"));
        headers.insert("content-type", "application/json".parse().expect("value"));
        let uri: Uri = format!("{path}?q=1").parse().expect("uri");
        RequestRecord::new(&Method::POST, &uri, &headers, b"abc", Some("m".into()))
    }

    #[test]
    fn keeps_the_newest_records() {
        let recorder = RequestRecorder::new(2);
        for path in ["/a", "/b", "/c"] {
            recorder.record(record(path));
        }
        let paths: Vec<_> = recorder.snapshot().iter().map(|r| r.path.clone()).collect();
        assert_eq!(paths, ["/b", "/c"]);
        assert_eq!(recorder.snapshot()[1].seq, 3);
        assert_eq!(recorder.clear(), 2);
        assert!(recorder.snapshot().is_empty());
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let recorder = RequestRecorder::new(0);
        recorder.record(record("/a"));
        assert!(recorder.snapshot().is_empty());
    }

    #[test]
    fn serializes_as_documented() {
        let value = serde_json::to_value(record("/v1/x")).expect("json");
        assert_eq!(value["method"], "POST");
        assert_eq!(value["path"], "/v1/x");
        assert_eq!(value["query"], "q=1");
        assert_eq!(value["headers"]["x-a"], "1, 2");
        assert_eq!(value["body_len"], 3);
        assert_eq!(
            value["body_sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(value["model"], "m");
        assert_eq!(value["content_type"], "application/json");
    }
}
