//! Per-endpoint request counts that keep the least loaded endpoints at hand, for join-the-
//! shortest-queue in O(k) per pick (k endpoints excluded) instead of a scan of every endpoint.
//!
//! The endpoints are kept in a permutation sorted by count, each count's endpoints in one
//! contiguous bucket. Counts change by one at a time, so an endpoint moves to the neighbouring
//! bucket by one swap with that bucket's edge (the bucket-sorted permutation used for
//! constant-time degree updates in graph algorithms).

use super::ranked::skip_past_sorted;
use crate::{EndpointId, Rng};
use rand::Rng as _;
use smallvec::SmallVec;

/// The number of requests at each endpoint of `0..n`, with the least loaded ones at hand.
#[derive(Clone, Debug)]
pub struct LoadIndex {
    load: Vec<u32>,
    /// The endpoints sorted by load.
    order: Vec<EndpointId>,
    /// Where each endpoint is in `order`.
    position: Vec<usize>,
    /// Where the bucket of each load starts in `order` (`order.len()` for loads above the highest).
    start: Vec<usize>,
}

impl LoadIndex {
    /// Endpoints `0..n`, none loaded.
    pub fn new(n: usize) -> Self {
        LoadIndex { load: vec![0; n], order: (0..n).collect(), position: (0..n).collect(), start: vec![0, n] }
    }

    /// Endpoints with the given loads.
    pub fn from_loads(loads: &[u32]) -> Self {
        let mut index = LoadIndex::new(loads.len());
        for (e, &l) in loads.iter().enumerate() {
            (0..l).for_each(|_| index.inc(e));
        }
        index
    }

    /// Counts endpoints up to `n`, the new ones with no load.
    pub fn grow(&mut self, n: usize) {
        if n > self.len() {
            let mut loads = std::mem::take(&mut self.load);
            loads.resize(n, 0);
            *self = LoadIndex::from_loads(&loads);
        }
    }

    /// How many endpoints it counts.
    pub fn len(&self) -> usize {
        self.load.len()
    }

    /// Whether it counts no endpoint.
    pub fn is_empty(&self) -> bool {
        self.load.is_empty()
    }

    /// The load of `e`.
    pub fn get(&self, e: EndpointId) -> u32 {
        self.load[e]
    }

    /// One more request at `e`: it moves to the end of its bucket, which then ends one earlier.
    pub fn inc(&mut self, e: EndpointId) {
        let l = self.load[e] as usize;
        if l + 2 == self.start.len() {
            self.start.push(self.order.len());
        }
        let last = self.start[l + 1] - 1;
        self.swap(self.position[e], last);
        self.start[l + 1] -= 1;
        self.load[e] += 1;
    }

    /// One request fewer at `e` (none below zero): it moves to the start of its bucket, which then
    /// starts one later.
    pub fn dec(&mut self, e: EndpointId) {
        let l = self.load[e] as usize;
        if l == 0 {
            return;
        }
        let first = self.start[l];
        self.swap(self.position[e], first);
        self.start[l] += 1;
        self.load[e] -= 1;
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.order.swap(i, j);
        self.position[self.order[i]] = i;
        self.position[self.order[j]] = j;
    }

    /// One of the least loaded endpoints not in `excluded` (sorted, no duplicates, each below
    /// `len`), uniformly at random among equals (one draw, none when only one is least loaded);
    /// `None` when every endpoint is excluded or there is none.
    pub(crate) fn least(&self, excluded: &[EndpointId], rng: Rng<'_>) -> Option<EndpointId> {
        let n = self.order.len();
        let mut from = 0;
        while from < n {
            let l = self.load[self.order[from]] as usize;
            let to = self.start[l + 1];
            // The excluded endpoints in this bucket, by position.
            let mut skipped: SmallVec<[usize; 8]> =
                excluded.iter().filter(|&&e| self.load[e] as usize == l).map(|&e| self.position[e]).collect();
            let count = to - from - skipped.len();
            if count > 0 {
                skipped.sort_unstable();
                let i = if count == 1 { 0 } else { rng.gen_range(0..count) };
                return Some(self.order[from + skip_past_sorted(i, &skipped, from)]);
            }
            from = to;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    /// The buckets hold exactly the endpoints of each load, and positions match.
    fn check(index: &LoadIndex) {
        for (i, &e) in index.order.iter().enumerate() {
            assert_eq!(index.position[e], i);
            let l = index.load[e] as usize;
            assert!(index.start[l] <= i && i < index.start[l + 1], "{index:?}");
        }
    }

    #[test]
    fn buckets_follow_random_changes() {
        let mut rng = Pcg64Mcg::seed_from_u64(5);
        let mut index = LoadIndex::new(9);
        let mut plain = [0u32; 9];
        for _ in 0..2000 {
            let e = rng.gen_range(0..9);
            if rng.gen_bool(0.55) {
                index.inc(e);
                plain[e] += 1;
            } else {
                index.dec(e);
                plain[e] = plain[e].saturating_sub(1);
            }
            check(&index);
            assert_eq!(index.load, plain);
            let min = *plain.iter().min().unwrap();
            let e = index.least(&[], &mut rng).unwrap();
            assert_eq!(plain[e], min);
        }
    }

    #[test]
    fn least_skips_excluded_endpoints_and_draws_among_equals() {
        let index = LoadIndex::from_loads(&[2, 0, 1, 0, 0]);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut counts = [0u32; 5];
        for _ in 0..3000 {
            counts[index.least(&[3], &mut rng).unwrap()] += 1;
        }
        // 1 and 4 tie at 0 with 3 excluded: about half each.
        assert_eq!(counts[0] + counts[2] + counts[3], 0);
        assert!((1400..1600).contains(&counts[1]), "{counts:?}");
        // All of load 0 excluded: 2 (load 1) is next, whatever the draws.
        assert_eq!(index.least(&[1, 3, 4], &mut rng), Some(2));
        assert_eq!(index.least(&[0, 1, 2, 3, 4], &mut rng), None);
        assert_eq!(LoadIndex::new(0).least(&[], &mut rng), None);
    }
}
