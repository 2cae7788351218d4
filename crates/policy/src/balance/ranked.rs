//! Candidate lists that cost O(log n) or less per pick, whatever the number of endpoints n.
//!
//! A pick needs "the i-th eligible endpoint, in id order" and "how many are eligible"; building
//! the list costs O(n) per pick, which dominates a simulation of thousands of replicas. These give
//! the same answers (so the same draws pick the same endpoints) without building the list:
//! - [`Skipping`]: `0..n` minus a request's few tried endpoints, in O(k) for k tried;
//! - [`RankedSet`]: a set of endpoints with rank and select in O(log n) (a Fenwick tree).

use crate::EndpointId;

/// The endpoints of `0..n` not in a sorted, duplicate-free list of skipped ones: a candidate list
/// in id order, read without being built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Skipping<'a> {
    n: usize,
    skipped: &'a [EndpointId],
}

impl<'a> Skipping<'a> {
    /// `0..n` without `skipped` (sorted, no duplicates, each below `n`).
    pub(crate) fn new(n: usize, skipped: &'a [EndpointId]) -> Self {
        debug_assert!(skipped.windows(2).all(|w| w[0] < w[1]) && skipped.iter().all(|&e| e < n));
        Skipping { n, skipped }
    }

    pub(crate) fn len(&self) -> usize {
        self.n - self.skipped.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th endpoint left, in id order.
    pub(crate) fn get(&self, i: usize) -> EndpointId {
        skip_past(i, self.skipped.iter().copied())
    }
}

/// The `i`-th position of a sequence once the positions `skipped` (increasing) are left out.
fn skip_past(i: usize, skipped: impl Iterator<Item = usize>) -> usize {
    let mut position = i;
    for s in skipped {
        if s <= position {
            position += 1;
        } else {
            break;
        }
    }
    position
}

/// `from + i`-th position of a sequence once `skipped` (increasing positions, none below `from`)
/// are left out, less `from`: the `i`-th kept position counted from `from`.
pub(crate) fn skip_past_sorted(i: usize, skipped: &[usize], from: usize) -> usize {
    skip_past(from + i, skipped.iter().copied()) - from
}

/// `exclude`'s endpoints below `n`, sorted and without duplicates, into `out`.
pub(crate) fn sorted_exclusions(exclude: &[EndpointId], n: usize, out: &mut Vec<EndpointId>) {
    out.clear();
    out.extend(exclude.iter().copied().filter(|&e| e < n));
    out.sort_unstable();
    out.dedup();
}

/// A set of endpoints `0..n` that counts its members before any endpoint (rank) and finds its
/// k-th member (select) in O(log n): a Fenwick tree of membership.
#[derive(Clone, Debug)]
pub(crate) struct RankedSet {
    /// `tree[i]` (1-based) counts the members in `(i - lowbit(i), i]`.
    tree: Vec<u32>,
    member: Vec<bool>,
    len: usize,
}

impl RankedSet {
    /// The set of all of `0..n` when `full`, else the empty set.
    pub(crate) fn new(n: usize, full: bool) -> Self {
        let mut tree = vec![0u32; n + 1];
        if full {
            // Linear construction: each node adds itself to its parent.
            for i in 1..=n {
                tree[i] += 1;
                let parent = i + lowbit(i);
                if parent <= n {
                    tree[parent] += tree[i];
                }
            }
        }
        RankedSet { tree, member: vec![full; n], len: if full { n } else { 0 } }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Room for endpoints up to `n`, the new ones not members.
    pub(crate) fn grow(&mut self, n: usize) {
        if n <= self.member.len() {
            return;
        }
        let mut grown = RankedSet::new(n, false);
        (0..self.member.len()).filter(|&e| self.member[e]).for_each(|e| grown.insert(e));
        *self = grown;
    }

    pub(crate) fn contains(&self, e: EndpointId) -> bool {
        self.member[e]
    }

    pub(crate) fn insert(&mut self, e: EndpointId) {
        if !self.member[e] {
            self.member[e] = true;
            self.len += 1;
            self.add(e, true);
        }
    }

    pub(crate) fn remove(&mut self, e: EndpointId) {
        if self.member[e] {
            self.member[e] = false;
            self.len -= 1;
            self.add(e, false);
        }
    }

    fn add(&mut self, e: EndpointId, up: bool) {
        let mut i = e + 1;
        while i < self.tree.len() {
            if up {
                self.tree[i] += 1;
            } else {
                self.tree[i] -= 1;
            }
            i += lowbit(i);
        }
    }

    /// How many members are below `e`.
    pub(crate) fn rank(&self, e: EndpointId) -> usize {
        let (mut i, mut count) = (e, 0usize);
        while i > 0 {
            count += self.tree[i] as usize;
            i -= lowbit(i);
        }
        count
    }

    /// The member with `k` members below it (`k < len`).
    pub(crate) fn select(&self, k: usize) -> EndpointId {
        debug_assert!(k < self.len);
        let n = self.tree.len() - 1;
        let (mut position, mut left) = (0usize, k);
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        while step > 0 {
            let next = position + step;
            if next <= n && (self.tree[next] as usize) <= left {
                position = next;
                left -= self.tree[next] as usize;
            }
            step >>= 1;
        }
        position
    }

    /// The members not in `skipped` (sorted members of this set), as a list in id order.
    pub(crate) fn without<'a>(&'a self, skipped: &'a [EndpointId]) -> RankedWithout<'a> {
        RankedWithout { set: self, skipped }
    }
}

/// A [`RankedSet`]'s members but a few, read as a list in id order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RankedWithout<'a> {
    set: &'a RankedSet,
    /// Members left out, sorted.
    skipped: &'a [EndpointId],
}

impl RankedWithout<'_> {
    pub(crate) fn len(&self) -> usize {
        self.set.len() - self.skipped.len()
    }

    /// The `i`-th member left, in id order.
    pub(crate) fn get(&self, i: usize) -> EndpointId {
        // Positions (ranks) of the skipped members increase with their ids.
        self.set.select(skip_past(i, self.skipped.iter().map(|&e| self.set.rank(e))))
    }
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64Mcg;

    #[test]
    fn skipping_reads_like_the_filtered_list() {
        let skipped = [0, 3, 4, 9];
        let list = Skipping::new(10, &skipped);
        let expected: Vec<usize> = (0..10).filter(|e| !skipped.contains(e)).collect();
        assert_eq!((0..list.len()).map(|i| list.get(i)).collect::<Vec<_>>(), expected);
        assert_eq!(Skipping::new(3, &[]).len(), 3);
    }

    #[test]
    fn exclusions_are_sorted_deduplicated_and_in_range() {
        let mut out = vec![7];
        sorted_exclusions(&[3, 0, 3, 9, 1], 5, &mut out);
        assert_eq!(out, [0, 1, 3]);
    }

    #[test]
    fn rank_and_select_agree_with_a_plain_list_under_random_changes() {
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        for n in [0, 1, 2, 7, 64, 100] {
            let mut set = RankedSet::new(n, n % 2 == 0);
            let mut plain = vec![n % 2 == 0; n];
            for _ in 0..500 {
                if n > 0 {
                    let e = rng.gen_range(0..n);
                    if rng.gen_bool(0.5) {
                        set.insert(e);
                        plain[e] = true;
                    } else {
                        set.remove(e);
                        plain[e] = false;
                    }
                }
                let members: Vec<usize> = (0..n).filter(|&e| plain[e]).collect();
                assert_eq!(set.len(), members.len());
                for (k, &e) in members.iter().enumerate() {
                    assert_eq!((set.select(k), set.rank(e), set.contains(e)), (e, k, true), "n = {n}");
                }
                let skipped: Vec<usize> = members.iter().copied().filter(|_| rng.gen_bool(0.2)).collect();
                let rest: Vec<usize> = members.iter().copied().filter(|e| !skipped.contains(e)).collect();
                let without = set.without(&skipped);
                assert_eq!((0..without.len()).map(|i| without.get(i)).collect::<Vec<_>>(), rest);
            }
        }
    }
}
