//! The event queue: a min-heap on (time, insertion order), so events at the same virtual time run
//! in the order they were scheduled and every run with the same seed is identical.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Pending events of type `E`, earliest first. The heap orders small (time, seq, slot) keys and
/// the events themselves wait in a slot vector, so sifting moves 24 bytes, not whole events.
pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    seq: u64,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), seq: 0 }
    }

    pub(crate) fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                (self.slots.len() - 1) as u32
            }
        };
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.heap.push(Reverse((nanos, self.seq, slot)));
    }

    pub(crate) fn pop(&mut self) -> Option<(Duration, E)> {
        let Reverse((nanos, _, slot)) = self.heap.pop()?;
        self.free.push(slot);
        let event = self.slots[slot as usize].take().expect("a queued slot holds its event");
        Some((Duration::from_nanos(nanos), event))
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
