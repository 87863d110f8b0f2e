//! A filter result that points into its request instead of copying it.
//!
//! A filter call with full Node objects answers with the passing nodes
//! verbatim: for 1,000 nodes that is megabytes of the request echoed back.
//! Copying them into a fresh buffer costs a memory copy and, for a buffer
//! that size, a page fault per 4 KiB. A [`FilterResponse`] instead lists
//! segments: ranges of the request body (runs of consecutive passing
//! nodes become one range) and the few bytes of JSON written around them.
//! The HTTP layer sends the ranges as zero-copy slices of the request's
//! [`Bytes`]; [`FilterResponse::to_vec`] joins them for in-process callers.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};

/// One piece of a response: a range of the request body, or bytes of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Request(Range<usize>),
    Own(Vec<u8>),
}

/// A response body made of request ranges and written JSON, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterResponse {
    segments: Vec<Segment>,
    len: usize,
}

impl FilterResponse {
    /// A response of bytes of its own only (errors, name lists).
    pub fn owned(bytes: Vec<u8>) -> Self {
        let mut response = FilterResponse::default();
        response.push_bytes(&bytes);
        response
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the response has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many bytes are ranges of the request (not copied).
    pub fn borrowed_len(&self) -> usize {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Request(range) => range.len(),
                Segment::Own(_) => 0,
            })
            .sum()
    }

    /// Appends written bytes, joining them to a previous written segment.
    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        self.len += bytes.len();
        if let Some(Segment::Own(last)) = self.segments.last_mut() {
            last.extend_from_slice(bytes);
        } else {
            self.segments.push(Segment::Own(bytes.to_vec()));
        }
    }

    /// A writer appending to the current written segment.
    pub(crate) fn writer(&mut self) -> SegmentWriter<'_> {
        SegmentWriter { response: self }
    }

    /// Appends `range` of the request body.
    pub(crate) fn push_request(&mut self, range: Range<usize>) {
        self.len += range.len();
        self.segments.push(Segment::Request(range));
    }

    /// The whole response as one buffer, `body` being the request it
    /// points into.
    pub fn to_vec(&self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for segment in &self.segments {
            match segment {
                Segment::Request(range) => {
                    out.extend_from_slice(body.get(range.clone()).unwrap_or_default())
                }
                Segment::Own(bytes) => out.extend_from_slice(bytes),
            }
        }
        out
    }

    /// The response as an HTTP body whose request ranges are slices of
    /// `body` (no copy).
    pub fn into_body(self, body: &Bytes) -> SegmentBody {
        let chunks: VecDeque<Bytes> = self
            .segments
            .into_iter()
            .map(|segment| match segment {
                Segment::Request(range) if range.end <= body.len() => body.slice(range),
                Segment::Request(_) => Bytes::new(),
                Segment::Own(bytes) => Bytes::from(bytes),
            })
            .filter(|chunk| !chunk.is_empty())
            .collect();
        let remaining = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        SegmentBody { chunks, remaining }
    }
}

/// [`std::io::Write`] into a [`FilterResponse`]'s written bytes.
pub(crate) struct SegmentWriter<'a> {
    response: &'a mut FilterResponse,
}

impl std::io::Write for SegmentWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.response.push_bytes(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An HTTP body of ready chunks with an exact length, so the response
/// carries `Content-Length` and the chunks go out with vectored writes.
#[derive(Debug)]
pub struct SegmentBody {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl Body for SegmentBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let chunk = self.chunks.pop_front();
        if let Some(chunk) = &chunk {
            self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
        }
        Poll::Ready(chunk.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn joins_request_ranges_and_written_bytes_in_order() {
        let body = b"0123456789";
        let mut response = FilterResponse::default();
        response.push_bytes(b"[");
        response.push_request(2..5);
        response.push_bytes(b",");
        response.push_bytes(b"x");
        response.push_request(7..9);
        response.push_bytes(b"]");
        assert_eq!(response.to_vec(body), b"[234,x78]");
        assert_eq!(response.len(), 9);
        assert_eq!(response.borrowed_len(), 5);
    }

    #[tokio::test]
    async fn http_body_slices_the_request_and_reports_its_length() {
        let body = Bytes::from_static(b"{\"a\":1}{\"b\":2}");
        let mut response = FilterResponse::default();
        response.push_bytes(b"[");
        response.push_request(0..7);
        response.push_bytes(b",");
        response.push_request(7..14);
        response.push_bytes(b"]");
        let expected = response.to_vec(&body);
        let http = response.into_body(&body);
        assert_eq!(http.size_hint().exact(), Some(expected.len() as u64));
        let collected = http.collect().await.unwrap().to_bytes();
        assert_eq!(collected, expected);
    }

    #[test]
    fn out_of_range_request_segments_are_dropped_not_panicked_on() {
        let mut response = FilterResponse::default();
        response.push_request(5..50);
        assert!(response.to_vec(b"short").is_empty());
    }
}
