//! How many replicas each selected cluster runs.
//!
//! The rule, in full:
//!
//! 1. Every selected cluster has a weight: `spec.routing.weights[name]`
//!    when listed (negative counts as 0), else 1. Without weights every
//!    cluster weighs 1.
//! 2. The total is `placement.replicasPerCluster × Σ weight` over **all**
//!    selected clusters, healthy or not. With every cluster healthy, each
//!    gets exactly `replicasPerCluster × weight` (weights 2:1 with
//!    `replicasPerCluster: 1` give 2 and 1 replicas).
//! 3. The total is spread over the **ready** clusters in proportion to
//!    their weights: each gets the floor of its exact quota, and the
//!    replicas left over go one each to the largest remainders (largest
//!    remainder method), ties broken by larger weight, then by cluster
//!    name. So a cluster that turns unhealthy hands its share to the
//!    healthy ones (failover) and the total stays the same.
//! 4. When every ready cluster weighs 0 (only zero-weight clusters are
//!    left), the total is spread as if each weighed 1, so the model keeps
//!    running somewhere.
//! 5. Clusters that are not ready, and ready clusters whose share comes
//!    out as 0, run nothing (no Model is kept there).
//! 6. A ready cluster that reports its free GPUs has room for a known
//!    number of replicas ([`Candidate::room`]). A share above the room is
//!    cut to it, and the replicas cut go one at a time to the ready
//!    clusters that still have room (or report none), heaviest first,
//!    then the one with fewest replicas, then by name. Replicas that fit
//!    nowhere stay where rule 3 put them (their pods wait there, as they
//!    would in a single cluster), so the total never changes.

use std::collections::BTreeMap;

use flexinfer_crds::v1alpha2::FederatedModelRouting;

/// One selected cluster as the distribution sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Cluster name.
    pub name: String,
    /// Weight ([`weight_of`]).
    pub weight: u32,
    /// Whether it may receive replicas now.
    pub ready: bool,
    /// Replicas it has room for (its replicas of this model now, plus what
    /// its free GPUs hold); `None` when unknown or unbounded.
    pub room: Option<u32>,
}

/// Weight of `cluster`: its entry in `routing.weights` (negative → 0),
/// else 1.
pub fn weight_of(routing: Option<&FederatedModelRouting>, cluster: &str) -> u32 {
    routing
        .and_then(|r| r.weights.get(cluster))
        .map_or(1, |w| u32::try_from(*w).unwrap_or(0))
}

/// Replicas over all selected clusters (rule 2).
pub fn total_replicas(replicas_per_cluster: u32, candidates: &[Candidate]) -> u64 {
    u64::from(replicas_per_cluster) * candidates.iter().map(|c| u64::from(c.weight)).sum::<u64>()
}

/// Replicas of every candidate (0 for the ones not ready), following the
/// module's rule.
pub fn distribute(replicas_per_cluster: u32, candidates: &[Candidate]) -> BTreeMap<String, u32> {
    let mut shares: BTreeMap<String, u32> =
        candidates.iter().map(|c| (c.name.clone(), 0)).collect();
    let total = total_replicas(replicas_per_cluster, candidates);
    let ready: Vec<&Candidate> = candidates.iter().filter(|c| c.ready).collect();
    if total == 0 || ready.is_empty() {
        return shares;
    }
    let all_zero = ready.iter().all(|c| c.weight == 0);
    let weight = |c: &Candidate| if all_zero { 1 } else { u64::from(c.weight) };
    let weight_sum: u64 = ready.iter().map(|c| weight(c)).sum();
    // (remainder, weight, name) of each ready cluster, for the leftovers.
    let mut remainders = Vec::with_capacity(ready.len());
    let mut given = 0u64;
    for c in &ready {
        let exact = total * weight(c);
        let floor = exact / weight_sum;
        given += floor;
        shares.insert(c.name.clone(), u32::try_from(floor).unwrap_or(u32::MAX));
        remainders.push((exact % weight_sum, weight(c), c.name.as_str()));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    let left = usize::try_from(total - given).unwrap_or(usize::MAX);
    for (_, _, name) in remainders.into_iter().take(left) {
        if let Some(share) = shares.get_mut(name) {
            *share = share.saturating_add(1);
        }
    }
    fit_to_room(&mut shares, &ready);
    shares
}

/// Rule 6: moves replicas above a cluster's room to ready clusters with
/// room left.
fn fit_to_room(shares: &mut BTreeMap<String, u32>, ready: &[&Candidate]) {
    let share_of =
        |shares: &BTreeMap<String, u32>, name: &str| shares.get(name).copied().unwrap_or(0);
    // Replicas cut, with the cluster each came from.
    let mut cut: Vec<&str> = Vec::new();
    for c in ready {
        if let Some(room) = c.room {
            let share = share_of(shares, &c.name);
            if share > room {
                shares.insert(c.name.clone(), room);
                cut.extend(std::iter::repeat_n(
                    c.name.as_str(),
                    (share - room) as usize,
                ));
            }
        }
    }
    for from in cut {
        let spare = |c: &&&Candidate| c.room.is_none_or(|room| share_of(shares, &c.name) < room);
        let to = ready
            .iter()
            .filter(|c| c.weight > 0 || ready.iter().all(|c| c.weight == 0))
            .filter(spare)
            .min_by(|a, b| {
                b.weight
                    .cmp(&a.weight)
                    .then(share_of(shares, &a.name).cmp(&share_of(shares, &b.name)))
                    .then(a.name.cmp(&b.name))
            })
            .map_or(from, |c| c.name.as_str());
        if let Some(share) = shares.get_mut(to) {
            *share = share.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, weight: u32, ready: bool) -> Candidate {
        Candidate {
            name: name.to_owned(),
            weight,
            ready,
            room: None,
        }
    }

    fn roomy(name: &str, weight: u32, room: u32) -> Candidate {
        Candidate {
            room: Some(room),
            ..c(name, weight, true)
        }
    }

    fn shares(per: u32, cands: &[Candidate]) -> Vec<(String, u32)> {
        distribute(per, cands).into_iter().collect()
    }

    fn pairs(p: &[(&str, u32)]) -> Vec<(String, u32)> {
        p.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
    }

    #[test]
    fn healthy_clusters_get_replicas_per_cluster_times_weight() {
        let two_to_one = [c("a", 2, true), c("b", 1, true)];
        assert_eq!(shares(1, &two_to_one), pairs(&[("a", 2), ("b", 1)]));
        assert_eq!(shares(3, &two_to_one), pairs(&[("a", 6), ("b", 3)]));
        assert_eq!(total_replicas(1, &two_to_one), 3);
        let even = [c("a", 1, true), c("b", 1, true), c("c", 1, true)];
        assert_eq!(shares(2, &even), pairs(&[("a", 2), ("b", 2), ("c", 2)]));
    }

    #[test]
    fn an_unhealthy_clusters_share_moves_to_the_healthy_ones() {
        assert_eq!(
            shares(1, &[c("a", 2, true), c("b", 1, false)]),
            pairs(&[("a", 3), ("b", 0)])
        );
        assert_eq!(
            shares(1, &[c("a", 2, false), c("b", 1, true)]),
            pairs(&[("a", 0), ("b", 3)])
        );
        // 3 left over 2:1 → exact quotas 2 and 1.
        assert_eq!(
            shares(1, &[c("a", 2, true), c("b", 1, true), c("c", 0, false)]),
            pairs(&[("a", 2), ("b", 1), ("c", 0)])
        );
        // Total 3 over two equal clusters: 1.5 each; the tie goes by name.
        assert_eq!(
            shares(1, &[c("x", 1, true), c("y", 1, true), c("z", 1, false)]),
            pairs(&[("x", 2), ("y", 1), ("z", 0)])
        );
        // Total 4 (weights 2,1,1) with the heavy one down: 2 and 2.
        assert_eq!(
            shares(1, &[c("a", 2, false), c("b", 1, true), c("c", 1, true)]),
            pairs(&[("a", 0), ("b", 2), ("c", 2)])
        );
    }

    #[test]
    fn largest_remainder_then_weight_then_name() {
        // Total 5 (weights 3,1,1) with `a` down: quotas 2.5 and 2.5 → tie
        // on remainder and weight → by name.
        assert_eq!(
            shares(1, &[c("a", 3, false), c("b", 1, true), c("c", 1, true)]),
            pairs(&[("a", 0), ("b", 3), ("c", 2)])
        );
        // Total 6 (weights 3,2,1) with `b` down over 3:1 → 4.5 and 1.5:
        // equal remainders, larger weight wins.
        assert_eq!(
            shares(1, &[c("a", 3, true), c("b", 2, false), c("c", 1, true)]),
            pairs(&[("a", 5), ("b", 0), ("c", 1)])
        );
        // Total 7 (weights 4,2,1) with `a` down over 2:1 → 4.67 and 2.33.
        assert_eq!(
            shares(1, &[c("a", 4, false), c("b", 2, true), c("c", 1, true)]),
            pairs(&[("a", 0), ("b", 5), ("c", 2)])
        );
    }

    #[test]
    fn shares_always_add_up_to_the_total() {
        for per in 1..4u32 {
            for mask in 1..16u32 {
                let cands: Vec<Candidate> = (0..4)
                    .map(|i| c(&format!("c{i}"), i + 1, mask & (1 << i) != 0))
                    .collect();
                let sum: u64 = distribute(per, &cands)
                    .values()
                    .map(|&s| u64::from(s))
                    .sum();
                assert_eq!(sum, total_replicas(per, &cands), "per={per} mask={mask}");
            }
        }
    }

    #[test]
    fn zero_weights_and_nothing_ready() {
        // A zero-weight cluster gets nothing while others are up...
        assert_eq!(
            shares(1, &[c("a", 2, true), c("b", 0, true)]),
            pairs(&[("a", 2), ("b", 0)])
        );
        // ...but takes over when it is the only one left.
        assert_eq!(
            shares(1, &[c("a", 2, false), c("b", 0, true)]),
            pairs(&[("a", 0), ("b", 2)])
        );
        assert_eq!(
            shares(1, &[c("a", 2, false), c("b", 1, false)]),
            pairs(&[("a", 0), ("b", 0)])
        );
        assert_eq!(
            shares(1, &[c("a", 0, true), c("b", 0, true)]),
            pairs(&[("a", 0), ("b", 0)])
        );
        assert!(distribute(1, &[]).is_empty());
    }

    #[test]
    fn replicas_above_a_clusters_room_move_to_clusters_with_room() {
        // 2 + 2 wanted; `a` has room for 1: its second goes to `b`.
        assert_eq!(
            shares(2, &[roomy("a", 1, 1), roomy("b", 1, 5)]),
            pairs(&[("a", 1), ("b", 3)])
        );
        // A cluster that reports nothing takes what others cannot hold.
        assert_eq!(
            shares(2, &[roomy("a", 1, 0), c("b", 1, true)]),
            pairs(&[("a", 0), ("b", 4)])
        );
        // Heaviest first, then the one with fewest replicas.
        assert_eq!(
            shares(1, &[roomy("a", 1, 0), roomy("b", 1, 9), roomy("c", 2, 9)]),
            pairs(&[("a", 0), ("b", 1), ("c", 3)])
        );
        // Nowhere to go: the replicas stay (their pods wait), total kept.
        assert_eq!(
            shares(2, &[roomy("a", 1, 1), roomy("b", 1, 2)]),
            pairs(&[("a", 2), ("b", 2)])
        );
        // Zero-weight clusters take no overflow while weighted ones are up.
        assert_eq!(
            shares(2, &[roomy("a", 1, 1), roomy("b", 0, 9), roomy("c", 1, 9)]),
            pairs(&[("a", 1), ("b", 0), ("c", 3)])
        );
        // Room is only cut for ready clusters; rule 3 still applies first.
        assert_eq!(
            shares(1, &[c("a", 1, false), roomy("b", 1, 1), roomy("c", 1, 9)]),
            pairs(&[("a", 0), ("b", 1), ("c", 2)])
        );
    }

    #[test]
    fn room_never_changes_the_total() {
        for per in 1..4u32 {
            for rooms in 0..81u32 {
                let cands: Vec<Candidate> = (0..4)
                    .map(|i| roomy(&format!("c{i}"), i % 3, (rooms / 3u32.pow(i % 4)) % 3))
                    .collect();
                let sum: u64 = distribute(per, &cands)
                    .values()
                    .map(|&s| u64::from(s))
                    .sum();
                assert_eq!(sum, total_replicas(per, &cands), "per={per} rooms={rooms}");
            }
        }
    }

    #[test]
    fn weights_come_from_routing() {
        let routing = FederatedModelRouting {
            weights: [("a".to_owned(), 2), ("neg".to_owned(), -3)].into(),
            ..Default::default()
        };
        assert_eq!(weight_of(Some(&routing), "a"), 2);
        assert_eq!(weight_of(Some(&routing), "neg"), 0);
        assert_eq!(weight_of(Some(&routing), "unlisted"), 1);
        assert_eq!(weight_of(None, "a"), 1);
    }
}
