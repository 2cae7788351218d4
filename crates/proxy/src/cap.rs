//! A count of things held at once under a cap (the egress's requests in flight, an endpoint's
//! open connections): a place is taken without a lock, refused once the cap is reached, and
//! given back when dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many places are taken now.
#[derive(Clone, Default)]
pub(crate) struct Count(Arc<AtomicUsize>);

/// One place of a [`Count`], given back on drop.
pub(crate) struct Place(Arc<AtomicUsize>);

impl Count {
    /// A place, unless `max` are taken already.
    pub(crate) fn take(&self, max: usize) -> Option<Place> {
        let taken = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        taken.ok().map(|_| Place(self.0.clone()))
    }

    /// Places taken now.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_beyond_the_cap_are_refused_until_one_is_given_back() {
        let count = Count::default();
        let (a, b) = (count.take(2).unwrap(), count.take(2).unwrap());
        assert!(count.take(2).is_none());
        assert_eq!(count.get(), 2);
        drop(a);
        let _c = count.take(2).unwrap();
        drop(b);
        assert_eq!(count.get(), 1);
    }
}
