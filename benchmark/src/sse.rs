//! Server-sent event framing: turns the bytes of a streamed response, split
//! anywhere by the network, into the `data:` payloads of complete events.

/// An incremental SSE parser.
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    /// A parser with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; calls `on_event` with the data of each event completed
    /// by them (lines `data: x` joined by `\n`; other fields ignored).
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(&[u8])) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let line = &self.pending[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                if self.has_data {
                    on_event(&self.data);
                    self.data.clear();
                    self.has_data = false;
                }
            } else if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            start = end + 1;
        }
        self.pending.drain(..start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, |e| out.push(String::from_utf8_lossy(e).into_owned()));
        }
        out
    }

    #[test]
    fn splits_events_across_arbitrary_chunk_boundaries() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: comment\n\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let whole = events(&[stream]);
        assert_eq!(whole, ["{\"a\":1}", "{\"b\":2}", "one\ntwo", "[DONE]"]);
        for split in 1..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(events(&[a, b]), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole);
    }

    #[test]
    fn an_unfinished_event_is_held_back() {
        assert!(events(&[b"data: {\"a\""]).is_empty());
        assert!(events(&[b"data: x\n"]).is_empty());
    }
}
