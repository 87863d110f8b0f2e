#[path = "../tests/support/mod.rs"]
mod support;
use std::time::Instant;
use flexinfer_sched::{scan, api::NodeView};
fn main() {
    let nodes = support::nodes(1000);
    let body = support::extender_args(&support::pod(), &nodes);
    let body = std::str::from_utf8(&body).unwrap();
    let mut mins = [std::time::Duration::MAX; 5];
    for _ in 0..40 {
        let t = Instant::now();
        let _: serde::de::IgnoredAny = serde_json::from_str(body).unwrap();
        let floor = t.elapsed();
        let t = Instant::now();
        let spans = scan::args(body).unwrap();
        let scan_t = t.elapsed();
        let items = spans.nodes.unwrap();
        let t = Instant::now();
        let mut n = 0;
        for item in &items { let v = NodeView::parse(item).unwrap(); n += v.metadata.name.len(); }
        let meta = t.elapsed();
        let t = Instant::now();
        let total: usize = items.iter().map(|i| i.len()).sum();
        let mut out = Vec::with_capacity(total + 1000);
        for i in &items { out.extend_from_slice(i.as_bytes()); out.push(b','); }
        let copy = t.elapsed();
        let t = Instant::now();
        let _ = std::str::from_utf8(body.as_bytes()).unwrap();
        let utf = t.elapsed();
        for (m, v) in mins.iter_mut().zip([floor, scan_t, meta, copy, utf]) { *m = (*m).min(v); }
        let _ = n;
    }
    println!("min: floor {:?} scan {:?} meta {:?} copy {:?} utf8 {:?}", mins[0], mins[1], mins[2], mins[3], mins[4]);
}
