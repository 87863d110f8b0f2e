//! Finding the parts of a large `ExtenderArgs` body without decoding it.
//!
//! A filter or prioritize request carries every candidate Node in full —
//! about 6 KiB each, 6 MiB for 1,000 nodes — and the extender needs only
//! each node's name, labels and annotations. Decoding the body with a
//! general JSON parser and then re-reading each node's metadata would cost
//! two passes over those megabytes; this module instead locates each
//! node's boundaries in a single pass that only tracks strings and
//! brackets, and hands only the small parts (the Pod, each node's
//! metadata) to `serde_json`. The parts it skips — most of each Node —
//! are classified 64 bytes at a time into bit masks of quotes, backslashes
//! and brackets, so skipping runs close to memory speed; strings it reads
//! are delimited with `memchr`.
//!
//! The scanner assumes well-formed JSON, which is what kube-scheduler
//! sends. On malformed input it returns an error or spans that the
//! subsequent `serde_json` decoding rejects; it never panics (every index
//! is bounds-checked).

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use flexinfer_crds::labels::PREFIX;

mod items;
pub mod known;
mod strings;

use known::KnownMap;
pub use known::{Identity, KnownNodes};

use crate::api::{NodeMetaView, NodeView, PrefixedMap};

/// Where a body could not be scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// What was expected.
    pub expected: &'static str,
    /// Byte offset in the body.
    pub offset: usize,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {} at byte {}", self.expected, self.offset)
    }
}

impl std::error::Error for ScanError {}

/// The top-level values of an `ExtenderArgs` body.
#[derive(Debug, Default)]
pub struct Args<'a> {
    /// The `Pod` value as JSON text, if the key is present.
    pub pod: Option<&'a str>,
    /// The items of `Nodes`, if `Nodes` is present and not `null`.
    pub nodes: Option<Vec<ScannedNode<'a>>>,
    /// The `NodeNames` value as JSON text, if the key is present.
    pub node_names: Option<&'a str>,
}

/// One item of `Nodes`: its JSON text and what the extender reads of it.
#[derive(Debug)]
pub struct ScannedNode<'a> {
    /// The node object, verbatim (not checked to be UTF-8: it is echoed,
    /// never read as text).
    pub raw: &'a [u8],
    /// Its name and `flexinfer.ai/` labels and annotations.
    pub view: ScannedView<'a>,
    /// Its name, uid and `resourceVersion` as written.
    pub identity: Identity<'a>,
}

/// A node's view: read from the request, or known from an earlier one
/// (see [`KnownNodes`]).
#[derive(Debug)]
pub enum ScannedView<'a> {
    /// Read from this request.
    Read(NodeView<'a>),
    /// The same node (name, uid, `resourceVersion`) was read before.
    Known(Arc<NodeView<'static>>),
}

impl<'a> Deref for ScannedView<'a> {
    type Target = NodeView<'a>;

    fn deref(&self) -> &NodeView<'a> {
        match self {
            ScannedView::Read(view) => view,
            ScannedView::Known(view) => view,
        }
    }
}

/// Splits an `ExtenderArgs` body into its parts in one pass, reading each
/// node's metadata on the way. Keys match case-insensitively, as Go's
/// decoder does; unknown keys are skipped.
pub fn args(body: &[u8]) -> Result<Args<'_>, ScanError> {
    args_with(body, None)
}

/// Like [`args`], taking the views of nodes in `known` from there
/// (skipping the rest of their metadata) and keeping there the views of
/// nodes read.
pub fn args_with<'a>(body: &'a [u8], known: Option<&KnownNodes>) -> Result<Args<'a>, ScanError> {
    let known = known.filter(|known| known.capacity() > 0);
    let guard = known.map(KnownNodes::read);
    let args = args_in(body, guard.as_deref())?;
    drop(guard);
    if let (Some(known), Some(nodes)) = (known, &args.nodes) {
        known.remember(nodes);
    }
    Ok(args)
}

fn args_in<'a>(body: &'a [u8], known: Option<&KnownMap>) -> Result<Args<'a>, ScanError> {
    let bytes = body;
    let start = skip_ws(bytes, 0);
    let mut args = Args::default();
    let end = object_members(bytes, start, |key, value_start| {
        if key.eq_ignore_ascii_case(b"Nodes") {
            let (items, end) = node_list(body, value_start, known)?;
            args.nodes = items;
            return Ok(end);
        }
        let end = value_end(bytes, value_start)?;
        if key.eq_ignore_ascii_case(b"Pod") {
            args.pod = Some(text(body, (value_start, end))?);
        } else if key.eq_ignore_ascii_case(b"NodeNames") {
            args.node_names = Some(text(body, (value_start, end))?);
        }
        Ok(end)
    })?;
    if skip_ws(bytes, end) != bytes.len() {
        return Err(error("end of input", end));
    }
    Ok(args)
}

/// The items of the `NodeList` value at `at` (`None` for `null`) and the
/// offset after it.
#[allow(clippy::type_complexity)]
fn node_list<'a>(
    body: &'a [u8],
    at: usize,
    known: Option<&KnownMap>,
) -> Result<(Option<Vec<ScannedNode<'a>>>, usize), ScanError> {
    let bytes = body;
    if bytes.get(at..at + 4) == Some(b"null") {
        return Ok((None, at + 4));
    }
    let mut items = Vec::new();
    let end = object_members(bytes, at, |key, value_start| {
        if !key.eq_ignore_ascii_case(b"items") {
            return value_end(bytes, value_start);
        }
        if bytes.get(value_start..value_start + 4) == Some(b"null") {
            return Ok(value_start + 4);
        }
        let (scanned, end) = items::node_items(body, value_start, known)?;
        items = scanned;
        Ok(end)
    })?;
    Ok((Some(items), end))
}

/// The name and the `flexinfer.ai/` labels and annotations of a Node
/// given as JSON text.
pub fn node_metadata(raw: &str) -> Result<NodeMetaView<'_>, ScanError> {
    let start = skip_ws(raw.as_bytes(), 0);
    let node = node_object(raw.as_bytes(), start, None)?;
    if skip_ws(raw.as_bytes(), node.end) != raw.len() {
        return Err(error("end of input", node.end));
    }
    Ok(node.read.metadata)
}

/// What [`node_object`] found.
struct NodeObject<'a> {
    /// The metadata read (partly, when the node was known).
    read: NodeView<'a>,
    /// The view of the known node with this identity.
    known: Option<Arc<NodeView<'static>>>,
    identity: Identity<'a>,
    /// The offset after the object.
    end: usize,
}

impl<'a> NodeObject<'a> {
    fn into_scanned(self, raw: &'a [u8]) -> ScannedNode<'a> {
        ScannedNode {
            raw,
            view: match self.known {
                Some(view) => ScannedView::Known(view),
                None => ScannedView::Read(self.read),
            },
            identity: self.identity,
        }
    }
}

/// Reads the node object at `at`: its name, uid, `resourceVersion` and
/// `flexinfer.ai/` labels and annotations. Once the identity is complete
/// and `known` has the node, the rest of `metadata` is skipped.
fn node_object<'a>(
    body: &'a [u8],
    at: usize,
    known: Option<&KnownMap>,
) -> Result<NodeObject<'a>, ScanError> {
    let bytes = body;
    let mut metadata = NodeMetaView::default();
    let mut identity = Identity::default();
    let mut found = None;
    let end = object_members(bytes, at, |key, value_start| {
        if key != b"metadata" {
            return value_end(bytes, value_start);
        }
        object_members(bytes, value_start, |key, value_start| {
            let part = match key {
                b"name" => &mut identity.name,
                b"uid" => &mut identity.uid,
                b"resourceVersion" => &mut identity.resource_version,
                b"labels" => return string_map(body, value_start, &mut metadata.labels),
                b"annotations" => return string_map(body, value_start, &mut metadata.annotations),
                _ => return value_end(bytes, value_start),
            };
            let end = string_end_checked(bytes, value_start)?;
            *part = bytes.get(value_start + 1..end - 1);
            if key == b"name" {
                metadata.name = string_value(body, value_start, end)?;
            }
            let Some(view) = known
                .filter(|_| found.is_none())
                .and_then(|map| known::lookup(map, &identity))
            else {
                return Ok(end);
            };
            found = Some(view);
            // Skip to the `}` that closes `metadata`.
            container_end_from(bytes, end, b'{', b'}', 1).map(|after| after - 1)
        })
    })?;
    Ok(NodeObject {
        read: NodeView { metadata },
        known: found,
        identity,
        end,
    })
}

/// Reads the `flexinfer.ai/` entries of the string map (or `null`) at `at`
/// into `map`; returns the offset after it.
fn string_map<'a>(raw: &'a [u8], at: usize, map: &mut PrefixedMap<'a>) -> Result<usize, ScanError> {
    let bytes = raw;
    if bytes.get(at..at + 4) == Some(b"null") {
        return Ok(at + 4);
    }
    object_members(bytes, at, |key, value_start| {
        if !may_have_prefix(key) {
            return value_end(bytes, value_start);
        }
        let key = decode_key(key)?;
        if !key.starts_with(PREFIX) {
            return value_end(bytes, value_start);
        }
        let end = string_end_checked(bytes, value_start)?;
        map.insert(key, string_value(raw, value_start, end)?);
        Ok(end)
    })
}

/// Whether the raw (still escaped) `key` has the label prefix, or might
/// once decoded: it matches the prefix up to its first escape. A key that
/// differs from the prefix at a plain byte cannot decode to it, so only
/// the first few bytes of most keys are read. (Go writes no escapes in
/// keys; this only keeps odd input correct.)
fn may_have_prefix(key: &[u8]) -> bool {
    let common = key
        .iter()
        .zip(PREFIX.as_bytes())
        .take_while(|(a, b)| a == b)
        .count();
    common == PREFIX.len() || key.get(common) == Some(&b'\\')
}

/// A key as text: borrowed when it has no escapes.
fn decode_key(key: &[u8]) -> Result<Cow<'_, str>, ScanError> {
    if let Some(text) = strings::plain_ascii(key) {
        return Ok(Cow::Borrowed(text));
    }
    let text = std::str::from_utf8(key).map_err(|_| error("a UTF-8 key", 0))?;
    if !key.contains(&b'\\') {
        return Ok(Cow::Borrowed(text));
    }
    serde_json::from_str::<String>(&format!("\"{text}\""))
        .map(Cow::Owned)
        .map_err(|_| error("a valid key", 0))
}

/// The string value spanning `from..to` (quotes included), unescaped only
/// when it has escapes.
fn string_value(raw: &[u8], from: usize, to: usize) -> Result<Cow<'_, str>, ScanError> {
    if let Some(text) = raw
        .get(from + 1..to.saturating_sub(1))
        .and_then(strings::plain_ascii)
    {
        return Ok(Cow::Borrowed(text));
    }
    let quoted = text(raw, (from, to)).map_err(|_| error("a UTF-8 string", from))?;
    let inner = quoted
        .get(1..quoted.len().saturating_sub(1))
        .ok_or(error("a string", from))?;
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(quoted)
        .map(Cow::Owned)
        .map_err(|_| error("a valid string", from))
}

/// Like [`string_end`], but first checks that a string starts at `at`.
fn string_end_checked(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    if bytes.get(at) != Some(&b'"') {
        return Err(error("a string", at));
    }
    string_end(bytes, at)
}

type Span = (usize, usize);

fn slice(body: &[u8], (from, to): Span) -> Result<&[u8], ScanError> {
    body.get(from..to).ok_or(error("a value", from))
}

/// The span as text; only the parts the extender reads are checked to be
/// UTF-8, never the whole body.
fn text(body: &[u8], span: Span) -> Result<&str, ScanError> {
    std::str::from_utf8(slice(body, span)?).map_err(|_| error("UTF-8 text", span.0))
}

fn error(expected: &'static str, offset: usize) -> ScanError {
    ScanError { expected, offset }
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// Calls `member(key, value_start)` for each member of the object starting
/// at `at` (keys raw, without quotes); the callback consumes the value and
/// returns the offset after it. Returns the offset after `}`.
fn object_members<'b>(
    bytes: &'b [u8],
    at: usize,
    mut member: impl FnMut(&'b [u8], usize) -> Result<usize, ScanError>,
) -> Result<usize, ScanError> {
    if bytes.get(at) != Some(&b'{') {
        return Err(error("an object", at));
    }
    let mut at = skip_ws(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Ok(at + 1);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return Err(error("a key", at));
        }
        let key_end = string_end(bytes, at)?;
        let key = bytes.get(at + 1..key_end - 1).unwrap_or_default();
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return Err(error("':'", at));
        }
        let value_end = member(key, skip_ws(bytes, at + 1))?;
        at = skip_ws(bytes, value_end);
        match bytes.get(at) {
            Some(b',') => at = skip_ws(bytes, at + 1),
            Some(b'}') => return Ok(at + 1),
            _ => return Err(error("',' or '}'", at)),
        }
    }
}

/// The offset just after the value starting at `at`.
fn value_end(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    match bytes.get(at) {
        Some(b'"') => string_end(bytes, at),
        Some(b'{') => container_end(bytes, at, b'{', b'}'),
        Some(b'[') => container_end(bytes, at, b'[', b']'),
        Some(b) if b.is_ascii_alphanumeric() || *b == b'-' => {
            let mut end = at;
            while bytes
                .get(end)
                .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
            {
                end += 1;
            }
            Ok(end)
        }
        _ => Err(error("a value", at)),
    }
}

/// The offset just after the string whose opening quote is at `at`.
fn string_end(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    let mut i = at + 1;
    loop {
        i = strings::find_quote_or_backslash(bytes, i).ok_or(error("'\"'", at))?;
        if bytes.get(i) == Some(&b'"') {
            return Ok(i + 1);
        }
        // A backslash escapes the next byte (`\u` hex digits need no care).
        i += 2;
    }
}

/// Bytes per [`Block`]: one bit of each mask per byte, lowest bit first.
const BLOCK: usize = 64;

/// Where a block of [`BLOCK`] bytes has quotes, backslashes and the two
/// brackets of one kind.
#[derive(Debug, PartialEq, Eq)]
struct Block {
    quotes: u64,
    backslashes: u64,
    opens: u64,
    closes: u64,
}

impl Block {
    /// The four masks, in the order quotes, backslashes, opens, closes.
    fn from_masks([quotes, backslashes, opens, closes]: [u64; 4]) -> Block {
        Block {
            quotes,
            backslashes,
            opens,
            closes,
        }
    }

    /// Classifies `bytes` with SSE2, which every x86-64 CPU has.
    #[cfg(target_arch = "x86_64")]
    fn new(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of the x86-64 baseline, and `chunk` is
            // 16 readable bytes (unaligned loads are allowed).
            unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                    let eq = _mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8));
                    *mask |= u64::from(_mm_movemask_epi8(eq) as u16) << (16 * k);
                }
            }
        }
        Block::from_masks(masks)
    }

    /// Classifies `bytes` with AVX2, 32 bytes per instruction.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
        };
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(32).enumerate() {
            // SAFETY: `chunk` is 32 readable bytes (unaligned loads are
            // allowed).
            let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast::<__m256i>()) };
            for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                let eq = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte as i8));
                *mask |= u64::from(_mm256_movemask_epi8(eq) as u32) << (32 * k);
            }
        }
        Block::from_masks(masks)
    }

    /// Classifies `bytes` with AVX-512BW: one compare per mask.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn avx512(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m512i, _mm512_cmpeq_epi8_mask, _mm512_loadu_si512, _mm512_set1_epi8,
        };
        // SAFETY: `bytes` is 64 readable bytes (unaligned loads are
        // allowed).
        let v = unsafe { _mm512_loadu_si512(bytes.as_ptr().cast::<__m512i>()) };
        let mask = |byte: u8| _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte as i8));
        Block::from_masks([mask(b'"'), mask(b'\\'), mask(open), mask(close)])
    }

    /// Classifies `bytes` with [`Block::portable`].
    #[cfg(not(target_arch = "x86_64"))]
    fn new(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        Block::portable(bytes, open, close)
    }

    /// Classifies `bytes` eight at a time in plain integer arithmetic (the
    /// path for other targets, and the reference in tests).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(8).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let word = u64::from_le_bytes(word);
            for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                *mask |= byte_bits(word, byte) << (8 * k);
            }
        }
        Block::from_masks(masks)
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// Bit `k` set where byte `k` of `word` (little-endian) equals `byte`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn byte_bits(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    // High bit of each byte set exactly where that byte of `x` is zero.
    let zero = !(((x & LOWS) + LOWS) | x) & !LOWS;
    // Gather the eight high bits into the low byte.
    ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

/// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

/// The offset just after the object or array opening at `at`, 64 bytes at
/// a time: each block is classified into bit masks, escaped quotes are
/// dropped, the bytes inside strings found by a prefix XOR of the quotes,
/// and the brackets outside strings counted. Only its own bracket kind is
/// counted: in well-formed JSON each kind balances on its own.
fn container_end(bytes: &[u8], at: usize, open: u8, close: u8) -> Result<usize, ScanError> {
    container_end_from(bytes, at, open, close, 0)
}

/// Like [`container_end`], starting `depth` brackets deep at `at` (outside
/// any string): with depth 1, the offset after the bracket that closes
/// the container `at` is in.
fn container_end_from(
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(avx512) = Avx512::detect() {
            // SAFETY: `Avx512::detect` found AVX-512BW, POPCNT and
            // PCLMULQDQ on this CPU.
            return unsafe { container_end_avx512(avx512, bytes, at, open, close, depth) };
        }
        if let Some(avx2) = Avx2::detect() {
            // SAFETY: `Avx2::detect` found AVX2 and POPCNT on this CPU.
            return unsafe { container_end_avx2(avx2, bytes, at, open, close, depth) };
        }
    }
    container_end_with(Baseline, bytes, at, open, close, depth)
}

/// [`container_end`] compiled for AVX-512BW, POPCNT and PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,popcnt,pclmulqdq")]
fn container_end_avx512(
    avx512: Avx512,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    container_end_with(avx512, bytes, at, open, close, depth)
}

/// [`container_end`] compiled for AVX2 and POPCNT (bracket counts are
/// population counts).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn container_end_avx2(
    avx2: Avx2,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    container_end_with(avx2, bytes, at, open, close, depth)
}

/// How blocks are classified: one implementation per instruction set.
trait Classify: Copy {
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block;

    /// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
    #[inline(always)]
    fn prefix_xor(self, x: u64) -> u64 {
        prefix_xor(x)
    }
}

/// The instructions every CPU of the target has.
#[derive(Clone, Copy)]
struct Baseline;

impl Classify for Baseline {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        Block::new(bytes, open, close)
    }
}

/// Proof that the CPU has AVX2 and POPCNT: only [`Avx2::detect`] makes one.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    fn detect() -> Option<Avx2> {
        (std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("popcnt"))
            .then_some(Avx2(()))
    }
}

/// Proof that the CPU has AVX-512BW, POPCNT and PCLMULQDQ: only
/// [`Avx512::detect`] makes one.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    fn detect() -> Option<Avx512> {
        (std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("popcnt")
            && std::is_x86_feature_detected!("pclmulqdq"))
        .then_some(Avx512(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx512 {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        // SAFETY: an `Avx512` exists only on a CPU with AVX-512BW.
        unsafe { Block::avx512(bytes, open, close) }
    }

    /// A carry-less multiplication by all ones is the prefix XOR.
    #[inline(always)]
    fn prefix_xor(self, x: u64) -> u64 {
        use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x};
        // SAFETY: an `Avx512` exists only on a CPU with PCLMULQDQ.
        unsafe {
            let product =
                _mm_clmulepi64_si128(_mm_set_epi64x(0, x as i64), _mm_set_epi64x(0, -1), 0);
            _mm_cvtsi128_si64(product) as u64
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        // SAFETY: an `Avx2` exists only on a CPU with AVX2.
        unsafe { Block::avx2(bytes, open, close) }
    }
}

#[inline(always)]
fn container_end_with(
    classify: impl Classify,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    mut depth: usize,
) -> Result<usize, ScanError> {
    // All ones while inside a string across a block boundary.
    let mut in_string = 0u64;
    // Whether the first byte of the next block is escaped.
    let mut escaped_carry = 0u64;
    let mut i = at;
    let mut padded = [b' '; BLOCK];
    while i < bytes.len() {
        let block: &[u8; BLOCK] = match bytes.get(i..i + BLOCK) {
            Some(full) => full.try_into().map_err(|_| error("a value", i))?,
            None => {
                let tail = bytes.get(i..).unwrap_or_default();
                for (byte, &b) in padded.iter_mut().zip(tail) {
                    *byte = b;
                }
                &padded
            }
        };
        let Block {
            quotes,
            backslashes,
            opens,
            closes,
        } = classify.classify(block, open, close);

        let mut escaped = escaped_carry;
        escaped_carry = 0;
        let mut rest = backslashes & !escaped;
        while rest != 0 {
            let bit = rest.trailing_zeros();
            if bit == 63 {
                escaped_carry = 1;
            } else {
                escaped |= 1 << (bit + 1);
            }
            // The byte after a backslash is escaped, even a backslash.
            rest &= !(1 << bit) & !escaped;
        }

        let strings = classify.prefix_xor(quotes & !escaped) ^ in_string;
        in_string = ((strings as i64) >> 63) as u64;
        let opens = opens & !strings;
        let closes = closes & !strings;
        // The depth can only reach zero in a block with at least as many
        // closing brackets as the depth; otherwise count them all at once.
        let close_count = closes.count_ones() as usize;
        if close_count < depth {
            depth = depth + opens.count_ones() as usize - close_count;
            i += BLOCK;
            continue;
        }
        let mut brackets = opens | closes;
        while brackets != 0 {
            let bit = brackets.trailing_zeros();
            brackets &= brackets - 1;
            if opens & (1 << bit) != 0 {
                depth += 1;
            } else {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Ok(i + bit as usize + 1);
                }
            }
        }
        i += BLOCK;
    }
    Err(error("a closing bracket", at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(body: &str) -> Result<Args<'_>, ScanError> {
        args(body.as_bytes())
    }

    fn raw<'a>(args: &Args<'a>) -> Option<Vec<&'a str>> {
        args.nodes.as_ref().map(|nodes| {
            nodes
                .iter()
                .map(|node| std::str::from_utf8(node.raw).unwrap())
                .collect()
        })
    }

    #[test]
    fn finds_pod_nodes_and_names() {
        let body = r#" {"Pod":{"metadata":{"name":"p","annotations":{"a":"}{\"]["}}},
            "Nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"}}, {"metadata":{"name":"n\u0032"},"status":{"images":[{"names":["x"]}]}}]},
            "NodeNames":null} "#;
        let spans = parse(body).unwrap();
        let pod: Value = serde_json::from_str(spans.pod.unwrap()).unwrap();
        assert_eq!(pod["metadata"]["annotations"]["a"], "}{\"][");
        let nodes = raw(&spans).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0], r#"{"metadata":{"name":"n1"}}"#);
        let second: Value = serde_json::from_str(nodes[1]).unwrap();
        assert_eq!(second["metadata"]["name"], "n2");
        let names: Vec<_> = spans
            .nodes
            .as_ref()
            .unwrap()
            .iter()
            .map(|node| node.view.metadata.name.as_ref())
            .collect();
        assert_eq!(names, ["n1", "n2"]);
        assert_eq!(spans.node_names, Some("null"));
    }

    #[test]
    fn keys_match_case_insensitively_and_unknown_keys_are_skipped() {
        let body = r#"{"extra":[1,{"x":[2]}],"pod":{},"nodenames":["a","b"],"nodes":null,"n":-1.5e3,"t":true}"#;
        let spans = parse(body).unwrap();
        assert_eq!(spans.pod, Some("{}"));
        assert_eq!(spans.node_names, Some(r#"["a","b"]"#));
        assert!(spans.nodes.is_none());
    }

    #[test]
    fn empty_and_null_items() {
        for body in [
            r#"{"Nodes":{"items":null}}"#,
            r#"{"Nodes":{"items":[]}}"#,
            r#"{"Nodes":{}}"#,
        ] {
            assert_eq!(raw(&parse(body).unwrap()), Some(vec![]), "{body}");
        }
        let empty = parse("{}").unwrap();
        assert!(empty.pod.is_none() && empty.nodes.is_none() && empty.node_names.is_none());
    }

    #[test]
    fn matches_serde_on_generated_requests() {
        for count in [0, 1, 7] {
            let items: Vec<Value> = (0..count)
                .map(|i| {
                    json!({"metadata": {"name": format!("n{i}"), "labels": {"k\"{": "v]\\"}},
                           "status": {"images": [{"names": ["a", "b\\\"}"]}], "n": [1.5, null, false]}})
                })
                .collect();
            let request = json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"metadata": {}, "items": items}});
            for body in [
                request.to_string(),
                serde_json::to_string_pretty(&request).unwrap(),
            ] {
                let spans = parse(&body).unwrap();
                let parsed: Vec<Value> = raw(&spans)
                    .unwrap()
                    .iter()
                    .map(|item| serde_json::from_str(item).unwrap())
                    .collect();
                assert_eq!(parsed, items);
                for (node, item) in spans.nodes.as_ref().unwrap().iter().zip(&items) {
                    assert_eq!(
                        node.view.metadata.name,
                        item["metadata"]["name"].as_str().unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for body in [
            "",
            "   ",
            "[]",
            "{",
            "{\"Pod\"",
            "{\"Pod\":",
            "{\"Pod\":}",
            "{\"Pod\":{}",
            "{\"Pod\":{} x",
            "{\"Pod\":\"unterminated}",
            "{\"Pod\":\"ends in backslash\\",
            "{\"Nodes\":{\"items\":[{\"a\":1},]}}",
            "{\"Nodes\":{\"items\":[{\"a\":1}}}",
            "{\"Nodes\":{\"items\":{}}}",
            "{\"Nodes\":[]}",
            "{Pod:{}}",
            "{\"Pod\":{}}}",
            "{\"a\" 1}",
        ] {
            assert!(parse(body).is_err(), "{body:?}");
        }
    }

    #[test]
    fn arbitrary_prefixes_never_panic() {
        let body = json!({"Pod": {"metadata": {"name": "p\\\"x"}},
                          "Nodes": {"items": [{"metadata": {"name": "a"}}, {"b": [1, "]"]}]}})
        .to_string();
        for end in 0..body.len() {
            let _ = parse(&body[..end]);
        }
    }
    /// A small deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn block_classification_matches_bytes() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"\"\\{}[]a \x80\xff\x00";
        for _ in 0..500 {
            let mut bytes = [0u8; BLOCK];
            for byte in &mut bytes {
                *byte = alphabet[rng.below(alphabet.len())];
            }
            let bits = |wanted: u8| {
                bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| b == wanted)
                    .fold(0u64, |mask, (k, _)| mask | 1 << k)
            };
            let expected = Block {
                quotes: bits(b'"'),
                backslashes: bits(b'\\'),
                opens: bits(b'{'),
                closes: bits(b'}'),
            };
            assert_eq!(Block::new(&bytes, b'{', b'}'), expected);
            assert_eq!(Block::portable(&bytes, b'{', b'}'), expected);
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                assert_eq!(avx2.classify(&bytes, b'{', b'}'), expected);
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(avx512) = Avx512::detect() {
                assert_eq!(avx512.classify(&bytes, b'{', b'}'), expected);
                let x = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                assert_eq!(avx512.prefix_xor(x), prefix_xor(x));
            }
        }
    }

    /// A random JSON value nested up to `depth` levels, with strings that
    /// hold brackets, quotes and backslashes.
    fn random_value(rng: &mut Rng, depth: usize) -> Value {
        let pieces = ["{", "}", "[", "]", "\\", "\"", "x", "long text "];
        match if depth == 0 {
            rng.below(2)
        } else {
            rng.below(4)
        } {
            0 => Value::String(
                (0..rng.below(12))
                    .map(|_| pieces[rng.below(pieces.len())])
                    .collect(),
            ),
            1 => json!(rng.below(1000)),
            2 => Value::Array(
                (0..rng.below(5))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..rng.below(5))
                    .map(|k| (format!("k{k}"), random_value(rng, depth - 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn deeply_nested_containers_end_where_serde_says() {
        let mut rng = Rng(0x51_7cc1_b727_220a);
        for _ in 0..400 {
            let value = random_value(&mut rng, 8);
            for text in [
                value.to_string(),
                serde_json::to_string_pretty(&value).unwrap(),
            ] {
                let body = format!("{text} ,[]}}");
                let end = value_end(body.as_bytes(), 0).unwrap();
                assert_eq!(end, text.len(), "{text}");
                // The baseline path too, wherever the CPU would pick AVX2.
                let brackets = match value {
                    Value::Object(_) => Some((b'{', b'}')),
                    Value::Array(_) => Some((b'[', b']')),
                    _ => None,
                };
                if let Some((open, close)) = brackets {
                    let end = container_end_with(Baseline, body.as_bytes(), 0, open, close, 0);
                    assert_eq!(end, Ok(text.len()), "{text}");
                    #[cfg(target_arch = "x86_64")]
                    if let Some(avx2) = Avx2::detect() {
                        // SAFETY: detected.
                        let end =
                            unsafe { container_end_avx2(avx2, body.as_bytes(), 0, open, close, 0) };
                        assert_eq!(end, Ok(text.len()), "{text}");
                    }
                }
            }
        }
    }

    #[test]
    fn escaped_label_keys_are_decoded_before_the_prefix_check() {
        let raw = r#"{"metadata":{"name":"n","labels":{
            "\u0066lexinfer.ai/gpu.vendor":"AMD",
            "flexinfer.ai\/gpu.arch":"gfx1100",
            "fl\u0065xinfer.ai/gpu.count":"2",
            "flexinfer.a":"short",
            "flexinfer.aj/gpu.vram":"no",
            "\u0067pu":"other",
            "kubernetes.io/hostname":"n"}}}"#;
        let metadata = node_metadata(raw).unwrap();
        let labels = &metadata.labels;
        assert_eq!(labels.get("flexinfer.ai/gpu.vendor"), Some("AMD"));
        assert_eq!(labels.get("flexinfer.ai/gpu.arch"), Some("gfx1100"));
        assert_eq!(labels.get("flexinfer.ai/gpu.count"), Some("2"));
        assert_eq!(labels.get("flexinfer.aj/gpu.vram"), None);
        assert!(may_have_prefix(b"flexinfer.ai/x"));
        assert!(may_have_prefix(b"\\u0066lexinfer.ai/x"));
        assert!(!may_have_prefix(b"kubernetes.io/os"));
        assert!(!may_have_prefix(b"flexinfer"));
    }

    #[test]
    fn strings_end_at_the_first_unescaped_quote_at_any_length() {
        // Lengths around memchr's vector widths.
        for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 200] {
            for escape_at in [None, Some(0), Some(len.saturating_sub(1))] {
                let mut text = "a".repeat(len);
                if let Some(at) = escape_at.filter(|_| len > 0) {
                    text.replace_range(at..at + 1, "\\\"");
                }
                let body = format!("\"{text}\" \"tail\"");
                assert_eq!(string_end(body.as_bytes(), 0), Ok(text.len() + 2), "{body}");
            }
            let unterminated = format!("\"{}", "a".repeat(len));
            assert!(string_end(unterminated.as_bytes(), 0).is_err());
        }
    }

    #[test]
    fn escapes_and_brackets_across_block_boundaries() {
        for pad in 0..2 * BLOCK {
            for tricky in [r#"\\"#, r#"\""#, r#"\\\""#, "}]{[", r#"\\\\"#, r#"\u0022"#] {
                let value = json!({"metadata": {"name": "n"},
                                   "status": {"a": "x".repeat(pad), "b": [tricky, {"c": tricky}], "d": {}}});
                let body =
                    json!({"Nodes": {"items": [value, {"metadata": {"name": "m"}}]}}).to_string();
                let spans = parse(&body).unwrap();
                let nodes = raw(&spans).unwrap();
                assert_eq!(nodes.len(), 2, "{body}");
                assert_eq!(serde_json::from_str::<Value>(nodes[0]).unwrap(), value);
                assert_eq!(nodes[1], r#"{"metadata":{"name":"m"}}"#);
            }
        }
    }

    #[test]
    fn mutated_and_truncated_fixture_never_panics() {
        let node: Value =
            serde_json::from_str(include_str!("../tests/fixtures/node-gpu.json")).unwrap();
        let pod: Value =
            serde_json::from_str(include_str!("../tests/fixtures/pod-vllm.json")).unwrap();
        let body = json!({"Pod": pod, "Nodes": {"metadata": {}, "items": [node.clone(), node]}})
            .to_string()
            .into_bytes();
        let spans = args(&body).unwrap();
        assert_eq!(spans.nodes.unwrap().len(), 2);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        // Includes bytes that are not UTF-8: the scanner reads bytes.
        let alphabet = b"\"\\{}[],: a0n\xff\xc3";
        for round in 0..3000 {
            let mut bytes = body.clone();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(bytes.len());
                match rng.below(3) {
                    0 => bytes[at] = alphabet[rng.below(alphabet.len())],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            if round % 2 == 0 {
                bytes.truncate(rng.below(bytes.len()));
            }
            if let Ok(spans) = args(&bytes) {
                // Whatever is found lies within the body.
                for node in spans.nodes.iter().flatten() {
                    assert!(bytes.windows(node.raw.len()).any(|w| w == node.raw));
                }
            }
        }
    }
}
