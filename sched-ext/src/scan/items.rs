//! Scanning the node items of one request on several threads.
//!
//! 1,000 full Nodes are about 6 MiB, and one core reads them in about
//! 2 ms. The items array is cut into one part per core at guessed item
//! boundaries: each guess is a place where the bytes that open the first
//! item (`{"metadata":` as Go writes Nodes) follow `},`. In valid JSON
//! such a place is outside any string, but it may still be inside an
//! item (a nested object with the same first key), so guesses are only
//! trusted once proven: each worker scans items from its start and stops
//! when the item it reaches next begins exactly at a later guess. The
//! answer is stitched from the first worker on, following only those
//! proven stops, so it is exactly what one serial scan gives — items,
//! end offset and first error alike. A wrong guess costs time, never
//! correctness: the worker before it scans on past it.

use std::sync::OnceLock;

use flexinfer_jsonscan::{error, skip_ws};

use super::{node_object, KnownMap, ScanError, ScannedNode};

/// Smallest part worth a thread of its own.
const MIN_PART_BYTES: usize = 512 * 1024;

/// Most parts one request is cut into.
const MAX_PARTS: usize = 8;

/// Longest first key taken as the pattern that opens an item.
const MAX_OPENING: usize = 64;

/// The items of the array whose `[` is at `at`, and the offset after `]`.
/// Nodes in `known` are taken from there.
pub(super) fn node_items<'a>(
    body: &'a [u8],
    at: usize,
    known: Option<&KnownMap>,
) -> Result<(Vec<ScannedNode<'a>>, usize), ScanError> {
    node_items_in(body, at, parts(body.len().saturating_sub(at)), known)
}

/// [`node_items`], cut into at most `parts` parts.
fn node_items_in<'a>(
    body: &'a [u8],
    at: usize,
    parts: usize,
    known: Option<&KnownMap>,
) -> Result<(Vec<ScannedNode<'a>>, usize), ScanError> {
    if body.get(at) != Some(&b'[') {
        return Err(error("an array", at));
    }
    let first = skip_ws(body, at + 1);
    if body.get(first) == Some(&b']') {
        return Ok((Vec::new(), first + 1));
    }
    let starts = guesses(body, first, parts);
    if starts.is_empty() {
        return serial(body, first, known);
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let later = &starts[i + 1..];
                scope.spawn(move || Part::scan(body, start, later, known))
            })
            .collect();
        let head = Part::scan(body, first, &starts, known);
        let mut tails: Vec<Option<Part<'_>>> = workers
            .into_iter()
            .map(|worker| worker.join().ok())
            .collect();
        stitch(body, &starts, head, &mut tails, known)
    })
}

/// Scans every item on this thread.
fn serial<'a>(
    body: &'a [u8],
    first: usize,
    known: Option<&KnownMap>,
) -> Result<(Vec<ScannedNode<'a>>, usize), ScanError> {
    let part = Part::scan(body, first, &[], known);
    match part.end {
        PartEnd::Closed(end) => Ok((part.items, end)),
        PartEnd::Failed(err) => Err(err),
        // No guesses, so no stops.
        PartEnd::Stopped(_) => Err(error("',' or ']'", first)),
    }
}

/// How many parts a region of `len` bytes is cut into.
fn parts(len: usize) -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
    });
    cores.min(len / MIN_PART_BYTES).clamp(1, MAX_PARTS)
}

/// Guessed starts of items, one near each cut of `first..body.len()` into
/// `parts`, increasing; empty when nothing is guessed.
fn guesses(body: &[u8], first: usize, parts: usize) -> Vec<usize> {
    let mut starts: Vec<usize> = Vec::new();
    if parts < 2 {
        return starts;
    }
    let Some(pattern) = opening(body, first) else {
        return starts;
    };
    let finder = memchr::memmem::Finder::new(&pattern);
    let len = body.len() - first;
    for cut in 1..parts {
        let from = (first + len / parts * cut).max(starts.last().map_or(first, |s| s + 1));
        let Some(found) = body.get(from..).and_then(|rest| finder.find(rest)) else {
            break;
        };
        // The item starts after the `},` of the pattern.
        starts.push(from + found + 2);
    }
    starts
}

/// `},` followed by the bytes of the first item up to its first key's
/// colon, e.g. `},{"metadata":`; `None` when that key is not written
/// compactly or is too long to be a useful pattern.
fn opening(body: &[u8], first: usize) -> Option<Vec<u8>> {
    let head = body.get(first..first + MAX_OPENING.min(body.len() - first))?;
    if head.get(..2) != Some(b"{\"") {
        return None;
    }
    let close = 2 + memchr::memchr2(b'"', b'\\', &head[2..])?;
    if head.get(close) != Some(&b'"') || head.get(close + 1) != Some(&b':') {
        return None;
    }
    let mut pattern = b"},".to_vec();
    pattern.extend_from_slice(&head[..close + 2]);
    Some(pattern)
}

/// The items one worker scanned and where it ended.
struct Part<'a> {
    items: Vec<ScannedNode<'a>>,
    end: PartEnd,
}

enum PartEnd {
    /// The next item starts at the given index of the worker's stops.
    Stopped(usize),
    /// The array ended; the offset after `]`.
    Closed(usize),
    /// The items from the start are not valid.
    Failed(ScanError),
}

impl<'a> Part<'a> {
    /// Scans items from `start` until the array ends or the next item
    /// starts exactly at one of `stops` (increasing).
    fn scan(body: &'a [u8], start: usize, stops: &[usize], known: Option<&KnownMap>) -> Part<'a> {
        let mut items = Vec::new();
        let end = Self::scan_into(body, start, stops, known, &mut items);
        Part { items, end }
    }

    fn scan_into(
        body: &'a [u8],
        mut at: usize,
        stops: &[usize],
        known: Option<&KnownMap>,
        items: &mut Vec<ScannedNode<'a>>,
    ) -> PartEnd {
        let mut next_stop = 0;
        loop {
            let node = match node_object(body, at, known) {
                Ok(node) => node,
                Err(err) => return PartEnd::Failed(err),
            };
            let end = node.end;
            items.push(node.into_scanned(&body[at..end]));
            at = skip_ws(body, end);
            match body.get(at) {
                Some(b',') => at = skip_ws(body, at + 1),
                Some(b']') => return PartEnd::Closed(at + 1),
                _ => return PartEnd::Failed(error("',' or ']'", at)),
            }
            while stops.get(next_stop).is_some_and(|&stop| stop < at) {
                next_stop += 1;
            }
            if stops.get(next_stop) == Some(&at) {
                return PartEnd::Stopped(next_stop);
            }
        }
    }
}

/// Joins the parts along proven stops, starting with `head`; `tails[i]`
/// is the part that started at `starts[i]` (`None` if its thread died,
/// which the scanner, never panicking, does not do: that part is then
/// scanned again here).
fn stitch<'a>(
    body: &'a [u8],
    starts: &[usize],
    head: Part<'a>,
    tails: &mut [Option<Part<'a>>],
    known: Option<&KnownMap>,
) -> Result<(Vec<ScannedNode<'a>>, usize), ScanError> {
    let mut items = head.items;
    let mut end = head.end;
    // Index of the first guess after the current part's start.
    let mut base = 0;
    loop {
        match end {
            PartEnd::Closed(after) => return Ok((items, after)),
            PartEnd::Failed(err) => return Err(err),
            PartEnd::Stopped(k) => {
                let index = base + k;
                let part = tails
                    .get_mut(index)
                    .and_then(Option::take)
                    .unwrap_or_else(|| {
                        let later = starts.get(index + 1..).unwrap_or(&[]);
                        Part::scan(body, starts[index], later, known)
                    });
                items.extend(part.items);
                end = part.end;
                base = index + 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Names, raw texts and end of every scan of `body`'s array at `at`
    /// cut into 1 to 6 parts; all must agree.
    fn scan_all_ways(body: &[u8], at: usize) -> Result<(Vec<String>, usize), ScanError> {
        let outcomes: Vec<_> = (1..=6)
            .map(|parts| {
                node_items_in(body, at, parts, None).map(|(items, end)| {
                    let seen: Vec<(String, &[u8])> = items
                        .iter()
                        .map(|item| (item.view.metadata.name.to_string(), item.raw))
                        .collect();
                    (seen, end)
                })
            })
            .collect();
        for (parts, outcome) in outcomes.iter().enumerate().skip(1) {
            assert_eq!(outcome, &outcomes[0], "{} parts", parts + 1);
        }
        outcomes[0]
            .clone()
            .map(|(seen, end)| (seen.into_iter().map(|(name, _)| name).collect(), end))
    }

    fn node(i: usize) -> Value {
        json!({"metadata": {"name": format!("n{i}"), "labels": {"flexinfer.ai/gpu.vendor": "AMD"}},
               "status": {"conditions": [{"type": "Ready"}, {"type": "DiskPressure"}],
                          "images": [{"names": ["registry/image:tag"], "sizeBytes": 1}]}})
    }

    fn array(items: &[Value]) -> Vec<u8> {
        serde_json::to_vec(&Value::Array(items.to_vec())).unwrap()
    }

    #[test]
    fn every_cut_gives_the_serial_answer() {
        for count in [1, 2, 3, 5, 40] {
            let items: Vec<Value> = (0..count).map(node).collect();
            let body = array(&items);
            let (names, end) = scan_all_ways(&body, 0).unwrap();
            assert_eq!(names.len(), count);
            assert_eq!(names.last().unwrap(), &format!("n{}", count - 1));
            assert_eq!(end, body.len());
        }
    }

    #[test]
    fn guesses_inside_items_are_not_trusted() {
        // Items whose nested objects open like an item: every guess may
        // land inside an item.
        let items: Vec<Value> = (0..30)
            .map(|i| {
                let mut item = node(i);
                item["status"]["nested"] =
                    json!([{"metadata": {"name": "inner"}}, {"metadata": {"name": "inner2"}}]);
                item
            })
            .collect();
        let body = array(&items);
        let starts = guesses(&body, 1, 6);
        assert!(!starts.is_empty());
        let (names, end) = scan_all_ways(&body, 0).unwrap();
        assert_eq!(names, (0..30).map(|i| format!("n{i}")).collect::<Vec<_>>());
        assert_eq!(end, body.len());
    }

    #[test]
    fn errors_are_the_serial_errors() {
        let items: Vec<Value> = (0..20).map(node).collect();
        let good = array(&items);
        let text = String::from_utf8(good).unwrap();
        let at_n11 = text.find("\"n11\"").unwrap();
        let next_item = at_n11 + text[at_n11..].find("},{\"metadata\"").unwrap();
        let mut missing_comma = text.clone();
        missing_comma.remove(next_item + 1);
        // Break an item late in the array, one early, a separator, the end.
        for broken in [
            text.replacen("\"name\":\"n17\"", "\"name\":n17", 1),
            text.replacen("\"name\":\"n2\"", "\"name\" \"n2\"", 1),
            missing_comma,
            text[..text.len() - 1].to_string(),
        ] {
            assert_ne!(broken, text);
            assert!(scan_all_ways(broken.as_bytes(), 0).is_err(), "{broken}");
        }
    }

    #[test]
    fn bodies_without_a_compact_opening_are_scanned_serially() {
        let items: Vec<Value> = (0..10).map(node).collect();
        let pretty = serde_json::to_vec_pretty(&Value::Array(items)).unwrap();
        assert!(guesses(&pretty, 2, 4).is_empty());
        let (names, _) = scan_all_ways(&pretty, 0).unwrap();
        assert_eq!(names.len(), 10);
        assert_eq!(scan_all_ways(b"[ ]", 0).unwrap(), (vec![], 3));
        assert!(scan_all_ways(b"{}", 0).is_err());
    }

    #[test]
    fn mutated_bodies_give_the_serial_answer_however_cut() {
        // Random byte changes anywhere (inside strings, on brackets, on the
        // cuts' patterns): every cut must still agree with one serial scan,
        // error or not, and never panic.
        let items: Vec<Value> = (0..24).map(node).collect();
        let good = array(&items);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"{}[]\",:\\ ax0";
        for _ in 0..600 {
            let mut body = good.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % body.len() as u64) as usize;
                body[at] = alphabet[(next() % alphabet.len() as u64) as usize];
            }
            let _ = scan_all_ways(&body, 0);
        }
    }

    #[test]
    fn the_opening_is_the_first_key() {
        assert_eq!(
            opening(br#"{"metadata":{"name":"a"}}"#, 0).as_deref(),
            Some(&br#"},{"metadata":"#[..])
        );
        assert_eq!(opening(br#"{"a\"b":1}"#, 0), None);
        assert_eq!(opening(br#"{ "a":1}"#, 0), None);
        assert_eq!(opening(br#"{"unterminated"#, 0), None);
    }
}
