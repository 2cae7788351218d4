//! The event queue: a min-heap on (time, insertion order), so events at the same virtual time run
//! in the order they were scheduled and every run with the same seed is identical.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Pending events of type `E`, earliest first.
pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(Duration, u64, Slot<E>)>>,
    seq: u64,
}

/// Wraps an event so the heap orders only by (time, seq).
struct Slot<E>(E);

impl<E> PartialEq for Slot<E> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<E> Eq for Slot<E> {}
impl<E> PartialOrd for Slot<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Slot<E> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), seq: 0 }
    }

    pub(crate) fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, Slot(event))));
    }

    pub(crate) fn pop(&mut self) -> Option<(Duration, E)> {
        self.heap.pop().map(|Reverse((at, _, Slot(e)))| (at, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::new();
        let ms = Duration::from_millis;
        q.push(ms(5), "c");
        q.push(ms(1), "a");
        q.push(ms(5), "d");
        q.push(ms(1), "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
    }
}
