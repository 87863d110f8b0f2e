//! One request's exchange with a picker, on one ext_proc stream: the
//! request's head and body go out (the body in slices of at most
//! [`BODY_SLICE`], full-duplex streamed), and the picker answers with the
//! header changes, the body as it wants it forwarded, and the endpoints to
//! try in order; or with an immediate answer (429, 503) for the client.
//! The stream stays open for the response: its head goes to the picker
//! with the endpoint that served, and the picker's header changes are
//! applied to it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as In;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation as BodyChange, HttpBody, ProcessingRequest, ProcessingResponse,
};
use futures::channel::mpsc;
use tokio::sync::OwnedSemaphorePermit;

use super::wire::{self, Mutation, DESTINATION};
use super::PickerClient;

/// Largest body slice in one message (gRPC's default limit is 4 MiB).
pub const BODY_SLICE: usize = 1024 * 1024;

/// What the picker is asked about.
pub struct PickRequest<'a> {
    /// The method.
    pub method: &'a str,
    /// Path and query.
    pub path_and_query: &'a str,
    /// The host the client named.
    pub authority: &'a str,
    /// The client's headers.
    pub headers: &'a http::HeaderMap,
    /// The body, when the request has one.
    pub body: Option<&'a [u8]>,
}

/// The picker's decision.
pub struct Pick {
    /// Endpoints to try, in order (at least one).
    pub endpoints: Vec<SocketAddr>,
    /// Changes to the request's headers.
    pub headers: Mutation,
    /// The body to forward, when the picker sent one back.
    pub body: Option<Bytes>,
    /// The stream, for the response's head.
    pub response: ResponsePhase,
}

/// Why there is no pick.
#[derive(Debug)]
pub enum PickError {
    /// The picker could not be asked or did not answer in time, or broke
    /// the protocol: the pool's failure mode decides.
    Unavailable(String),
    /// The picker answered the request itself (e.g. 429 to shed load, 503
    /// without a ready endpoint).
    Refused {
        /// HTTP status.
        status: u16,
        /// Body for the client.
        body: Bytes,
    },
}

impl std::fmt::Display for PickError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PickError::Unavailable(why) => write!(f, "{why}"),
            PickError::Refused { status, .. } => write!(f, "answered {status} itself"),
        }
    }
}

/// The open stream after the pick, for the response's head.
pub struct ResponsePhase {
    out: mpsc::UnboundedSender<ProcessingRequest>,
    answers: tonic::Streaming<ProcessingResponse>,
    timeout: Duration,
    _slot: OwnedSemaphorePermit,
}

impl ResponsePhase {
    /// Sends the response head with the endpoint that served, and returns
    /// the picker's changes to it. The stream ends afterwards: response
    /// bodies are not sent to the picker.
    pub async fn head(
        mut self,
        status: u16,
        headers: &http::HeaderMap,
        served: SocketAddr,
    ) -> Result<Mutation, String> {
        let message = ProcessingRequest {
            request: Some(Out::ResponseHeaders(wire::response_headers(
                status, headers,
            ))),
            metadata_context: Some(wire::served_metadata(served)),
            ..ProcessingRequest::default()
        };
        self.out
            .unbounded_send(message)
            .map_err(|_| "the picker's stream is closed".to_string())?;
        let answer = tokio::time::timeout(self.timeout, async {
            loop {
                match self.answers.message().await {
                    Ok(Some(ProcessingResponse {
                        response: Some(In::ResponseHeaders(h)),
                        ..
                    })) => {
                        return Ok(Mutation::from_proto(
                            h.response.as_ref().and_then(|r| r.header_mutation.as_ref()),
                        ))
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => return Err("the picker ended the stream".to_string()),
                    Err(status) => return Err(format!("the picker failed: {}", status.message())),
                }
            }
        })
        .await;
        answer.unwrap_or_else(|_| {
            Err(format!(
                "no answer to the response head within {:?}",
                self.timeout
            ))
        })
    }
}

impl PickerClient {
    /// Asks the picker about one request, within its timeout and its bound
    /// on requests in flight.
    pub async fn pick(&self, request: PickRequest<'_>) -> Result<Pick, PickError> {
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            PickError::Unavailable(format!(
                "the picker at {} has {} requests in flight already",
                self.addr, self.max_in_flight
            ))
        })?;
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.exchange(request, slot)).await {
            Ok(result) => result,
            Err(_) => Err(PickError::Unavailable(format!(
                "the picker at {} did not pick within {timeout:?}",
                self.addr
            ))),
        }
    }

    async fn exchange(
        &self,
        request: PickRequest<'_>,
        slot: OwnedSemaphorePermit,
    ) -> Result<Pick, PickError> {
        let unavailable =
            |why: String| PickError::Unavailable(format!("picker at {}: {why}", self.addr));
        let (out, stream) = mpsc::unbounded();
        let body = request.body.filter(|b| !b.is_empty());
        let head = wire::request_headers(
            request.method,
            request.path_and_query,
            request.authority,
            request.headers,
            body.is_none(),
        );
        // The receiver lives until the call ends: a send cannot fail first.
        let send = |r: Out| {
            let _ = out.unbounded_send(ProcessingRequest {
                request: Some(r),
                ..ProcessingRequest::default()
            });
        };
        // Everything goes out before the call: a picker may hold its answer
        // to the head until the body's end.
        send(Out::RequestHeaders(head));
        if let Some(body) = body {
            let slices = body.len().div_ceil(BODY_SLICE);
            for (i, slice) in body.chunks(BODY_SLICE).enumerate() {
                send(Out::RequestBody(HttpBody {
                    body: slice.to_vec(),
                    end_of_stream: i + 1 == slices,
                    ..HttpBody::default()
                }));
            }
        }
        let mut client = ExternalProcessorClient::new(self.channel.clone())
            .max_decoding_message_size(64 * 1024 * 1024);
        let mut answers = client
            .process(stream)
            .await
            .map_err(|s| unavailable(format!("{} ({:?})", s.message(), s.code())))?
            .into_inner();
        let mut headers: Option<Mutation> = None;
        let mut endpoints = Vec::new();
        let mut forwarded: Option<BytesMut> = None;
        let mut body_done = body.is_none();
        while headers.is_none() || !body_done {
            let answer = answers
                .message()
                .await
                .map_err(|s| unavailable(format!("{} ({:?})", s.message(), s.code())))?
                .ok_or_else(|| unavailable("the stream ended before a pick".into()))?;
            if endpoints.is_empty() {
                endpoints = wire::metadata_endpoints(answer.dynamic_metadata.as_ref());
            }
            match answer.response {
                Some(In::RequestHeaders(h)) => {
                    let m = Mutation::from_proto(
                        h.response.as_ref().and_then(|r| r.header_mutation.as_ref()),
                    );
                    if endpoints.is_empty() {
                        if let Some(v) = m.get(DESTINATION).and_then(|v| v.to_str().ok()) {
                            endpoints = wire::endpoints(v);
                        }
                    }
                    headers = Some(m);
                }
                Some(In::RequestBody(b)) => {
                    let change = b
                        .response
                        .and_then(|r| r.body_mutation)
                        .and_then(|m| m.mutation);
                    match change {
                        Some(BodyChange::StreamedResponse(s)) => {
                            forwarded
                                .get_or_insert_with(BytesMut::new)
                                .extend_from_slice(&s.body);
                            body_done |= s.end_of_stream;
                        }
                        Some(BodyChange::Body(b)) => {
                            forwarded = Some(BytesMut::from(&b[..]));
                            body_done = true;
                        }
                        Some(BodyChange::ClearBody(true)) => {
                            forwarded = Some(BytesMut::new());
                            body_done = true;
                        }
                        // No change: the body goes as it is.
                        _ => body_done = true,
                    }
                }
                Some(In::ImmediateResponse(r)) => {
                    let status = r
                        .status
                        .map(|s| s.code)
                        .and_then(|c| u16::try_from(c).ok())
                        .filter(|c| (200..=599).contains(c))
                        .unwrap_or(503);
                    return Err(PickError::Refused {
                        status,
                        body: Bytes::from(r.body),
                    });
                }
                _ => {}
            }
        }
        if endpoints.is_empty() {
            return Err(unavailable(format!("it named no endpoint ({DESTINATION})")));
        }
        Ok(Pick {
            endpoints,
            headers: headers.unwrap_or_default(),
            body: forwarded.map(BytesMut::freeze),
            response: ResponsePhase {
                out,
                answers,
                timeout: self.timeout,
                _slot: slot,
            },
        })
    }
}
