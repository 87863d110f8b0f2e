//! How each strategy chooses among the usable endpoints of a set:
//! round-robin, list order, weights, least load, and the hash ring.

use super::*;

impl EndpointSet {
    pub(super) fn round_robin(&self, usable: &impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.len();
        let start = self.tick() % n;
        (0..n)
            .map(|offset| (start + offset) % n)
            .find(|&i| usable(i))
    }

    pub(super) fn first_usable(&self, usable: &impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.len()).find(|&i| usable(i))
    }

    /// Position `tick mod total weight` on the line of weighted endpoints
    /// not excluded: each gets a share of consecutive picks equal to its
    /// weight. Without any weighted endpoint left, the first backup.
    pub(super) fn weighted(&self, usable: &impl Fn(usize) -> bool) -> Option<usize> {
        let usable_ref = |i: &usize| usable(*i);
        let total: u64 = (0..self.len())
            .filter(usable_ref)
            .map(|i| u64::from(self.upstreams[i].weight))
            .sum();
        if total == 0 {
            return self.first_usable(usable);
        }
        let mut point = self.tick() as u64 % total;
        for i in (0..self.len()).filter(usable_ref) {
            let weight = u64::from(self.upstreams[i].weight);
            if point < weight {
                return Some(i);
            }
            point -= weight;
        }
        self.first_usable(usable)
    }

    pub(super) fn least_loaded(&self, usable: &impl Fn(usize) -> bool) -> Option<usize> {
        let tick = self.tick();
        let mut min = usize::MAX;
        let mut ties = 0usize;
        let mut first = None;
        for (i, counter) in self.counters.iter().enumerate() {
            if !usable(i) {
                continue;
            }
            let load = counter.get();
            if load < min {
                min = load;
                ties = 1;
                first = Some(i);
            } else if load == min {
                ties += 1;
            }
        }
        let first = first?;
        if ties <= 1 {
            return Some(first);
        }
        // Take the (tick mod ties)-th tied endpoint, so that consecutive picks
        // cycle through all of them. Loads may have moved since the first
        // pass; then the first minimum found is as good an answer.
        let mut wanted = tick % ties;
        for (i, counter) in self.counters.iter().enumerate().skip(first) {
            if !usable(i) || counter.get() != min {
                continue;
            }
            if wanted == 0 {
                return Some(i);
            }
            wanted -= 1;
        }
        Some(first)
    }

    pub(in crate::routing) fn hashed(
        &self,
        key: &[u8],
        opts: &RoutingOptions,
        usable: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let n = self.len();
        let bound = opts
            .bounded_load
            .and_then(|_| opts.load_bound(self.total_in_flight(), n));
        let within_bound = |i: usize| bound.is_none_or(|b| self.in_flight(i) <= b);

        // The ring holds at most `VIRTUAL_NODES_PER_ENDPOINT * n` points, so
        // this many steps visit every point, hence every endpoint.
        let steps = n.saturating_mul(VIRTUAL_NODES_PER_ENDPOINT as usize);
        let mut points = self
            .ring
            .node_iter(key)
            .take(steps)
            .filter_map(|addr| self.index_of(addr));

        // Fast path: the key's own pod, with no bookkeeping.
        let first = points.next()?;
        if usable(first) && within_bound(first) {
            return Some(first);
        }
        let mut fallback = usable(first).then_some(first);
        let mut seen = Seen::new(n);
        seen.insert(first);
        let mut distinct = 1;
        for i in points {
            if !seen.insert(i) {
                continue;
            }
            if usable(i) {
                if within_bound(i) {
                    return Some(i);
                }
                fallback.get_or_insert(i);
            }
            distinct += 1;
            if distinct == n {
                break;
            }
        }
        fallback
    }
}
