//! The event queue: events leave in (time, insertion order), so events at the same virtual time run
//! in the order they were scheduled and every run with the same seed is identical.
//!
//! Most events are scheduled a fixed delay after the current time (a network hop, an instant
//! step), and the current time never goes back, so the events of one such delay arrive already
//! sorted: they wait in a FIFO *lane* of their own, pushed and popped in O(1). Every other event
//! waits in a 4-ary heap. A pop takes the earliest of the lanes' fronts and the heap's top, so the
//! order is exactly the heap-only order.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Duration;
use tailguard_policy::nanos;

/// Pending events of type `E`, earliest first. The heap orders small (time, seq, slot) keys and
/// its events wait in a slot vector, so sifting moves 24 bytes, not whole events.
pub(crate) struct EventQueue<E> {
    heap: KeyHeap,
    slots: Vec<Slot<E>>,
    free: Vec<u32>,
    lanes: Vec<Lane<E>>,
    /// The seq of the heap's top [`EventQueue::upcoming`] last returned (0: none).
    heap_shown: Cell<u64>,
    /// The time of the last event popped: the current time of whoever pushes.
    now: u64,
    seq: u64,
}

/// A heap event's place, aligned to a cache line: the simulator's events are one line each, and
/// a pop reads the top's slot, which a prefetch of one line then covers whole.
#[repr(align(64))]
struct Slot<E>(Option<E>);

/// The events scheduled `delay` ns after the time they were pushed at, as (time, seq, event).
struct Lane<E> {
    delay: u64,
    events: VecDeque<(u64, u64, E)>,
    /// The seq of the front [`EventQueue::upcoming`] last returned (0: none; seqs start at 1).
    shown: Cell<u64>,
}

impl<E> EventQueue<E> {
    /// A queue with a FIFO lane for each distinct one of `lane_delays`: the delays after the
    /// current time at which most events will be scheduled (each pop compares every lane's front).
    pub(crate) fn new(lane_delays: &[Duration]) -> Self {
        let mut lanes: Vec<Lane<E>> = Vec::new();
        for delay in lane_delays.iter().map(|&d| nanos(d)) {
            if lanes.iter().all(|lane| lane.delay != delay) {
                lanes.push(Lane { delay, events: VecDeque::new(), shown: Cell::new(0) });
            }
        }
        EventQueue {
            heap: KeyHeap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lanes,
            heap_shown: Cell::new(0),
            now: 0,
            seq: 0,
        }
    }

    /// Schedules `event` at `at`, which must not be before the last event popped.
    pub(crate) fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        let at = nanos(at);
        // `now` never goes back, so a lane of one delay stays sorted (a push into the past wraps to
        // a delay no lane has, and goes to the heap).
        let delay = at.wrapping_sub(self.now);
        if let Some(lane) = self.lanes.iter_mut().find(|lane| lane.delay == delay) {
            lane.events.push_back((at, self.seq, event));
            return;
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize].0 = Some(event);
                slot
            }
            None => {
                self.slots.push(Slot(Some(event)));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap.push((at, self.seq, slot));
    }

    /// The next events not returned by an earlier call, in no particular order, for prefetching
    /// what they will touch: each lane's front and the heap's top, once each. A front stays the
    /// front for several events, and asking again for lines already asked for only fills the
    /// CPU's queue of pending misses.
    pub(crate) fn upcoming(&self) -> impl Iterator<Item = &E> {
        let lanes = self.lanes.iter().filter_map(|lane| {
            let &(_, seq, ref event) = lane.events.front()?;
            (lane.shown.replace(seq) != seq).then_some(event)
        });
        let heap = self.heap.peek().and_then(|(_, seq, slot)| {
            if self.heap_shown.replace(seq) == seq {
                return None;
            }
            // The next top's slot, for when it is shown in turn.
            if let Some(next) = self.heap.next_top() {
                crate::prefetch::prefetch(&self.slots[next as usize]);
            }
            self.slots[slot as usize].0.as_ref()
        });
        lanes.chain(heap)
    }

    pub(crate) fn pop(&mut self) -> Option<(Duration, E)> {
        // The earliest (time, seq) among the heap's top (lane None) and the lanes' fronts.
        let mut best = self.heap.peek().map(|(at, seq, _)| ((at, seq), None));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(&(at, seq, _)) = lane.events.front() {
                if best.is_none_or(|(key, _)| (at, seq) < key) {
                    best = Some(((at, seq), Some(i)));
                }
            }
        }
        let ((at, _), lane) = best?;
        self.now = at;
        let event = match lane {
            Some(i) => self.lanes[i].events.pop_front().expect("a lane with a front").2,
            None => {
                let (_, _, slot) = self.heap.pop().expect("peeked");
                self.free.push(slot);
                self.slots[slot as usize].0.take().expect("a queued slot holds its event")
            }
        };
        Some((Duration::from_nanos(at), event))
    }
}

/// A min-heap of event keys with four children a node: half the levels of a binary heap. A key
/// is 16 bytes, (time, seq and slot packed in one word), and the heap is laid out so that a
/// node's four children fill one 64-byte cache line; sifting down, it asks for the next level's
/// lines (crate::prefetch) while comparing this one's. With thousands of events pending (one per
/// busy worker at 10,000 replicas) most of a pop's reads miss the cache otherwise. Keys are unique
/// (seq), so any heap pops them in the same order.
#[derive(Default)]
struct KeyHeap {
    /// Node i is at position i + [`KeyHeap::OFFSET`] of the lines' keys.
    lines: Vec<Line>,
    len: usize,
}

/// Four keys, aligned as a cache line.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([HeapKey; KeyHeap::ARITY]);

/// A heap key: the event's time, then its seq and its slot packed as `seq << SLOT_BITS | slot`,
/// which orders as (time, seq) since seqs are unique.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct HeapKey {
    at: u64,
    order: u64,
}

/// Bits of a packed key for the slot: 2^28 pending heap events would take over 20 GB of events,
/// and the 2^36 seqs left are 34 pushes per event the event loop runs before its runaway guard
/// (2·10^9 events) stops it.
const SLOT_BITS: u32 = 28;

impl HeapKey {
    fn new((at, seq, slot): (u64, u64, u32)) -> Self {
        assert!(seq < 1 << (64 - SLOT_BITS) && slot < 1 << SLOT_BITS, "event queue overflow");
        HeapKey { at, order: seq << SLOT_BITS | u64::from(slot) }
    }

    fn unpack(self) -> (u64, u64, u32) {
        (self.at, self.order >> SLOT_BITS, (self.order & ((1 << SLOT_BITS) - 1)) as u32)
    }
}

impl KeyHeap {
    const ARITY: usize = 4;
    /// The root sits at the last place of the first line, so node i's children (4i + 1 to 4i + 4)
    /// sit at positions 4(i + 1) to 4(i + 1) + 3: the whole of line i + 1.
    const OFFSET: usize = Self::ARITY - 1;

    fn get(&self, i: usize) -> HeapKey {
        let p = i + Self::OFFSET;
        self.lines[p / Self::ARITY].0[p % Self::ARITY]
    }

    fn set(&mut self, i: usize, key: HeapKey) {
        let p = i + Self::OFFSET;
        self.lines[p / Self::ARITY].0[p % Self::ARITY] = key;
    }

    fn peek(&self) -> Option<(u64, u64, u32)> {
        (self.len > 0).then(|| self.get(0).unpack())
    }

    /// The slot of the key that will most likely be on top after the next pop: the top's least
    /// child (in the root's line, which every pop reads, so this costs no cache miss).
    fn next_top(&self) -> Option<u32> {
        let children = self.lines.get(1)?.0.get(..Self::ARITY.min(self.len.saturating_sub(1)))?;
        children.iter().min().map(|key| key.unpack().2)
    }

    fn push(&mut self, key: (u64, u64, u32)) {
        let key = HeapKey::new(key);
        let mut i = self.len;
        self.len += 1;
        if (i + Self::OFFSET) / Self::ARITY >= self.lines.len() {
            self.lines.push(Line::default());
        }
        while i > 0 {
            let parent = (i - 1) / Self::ARITY;
            let up = self.get(parent);
            if up <= key {
                break;
            }
            self.set(i, up);
            i = parent;
        }
        self.set(i, key);
    }

    fn pop(&mut self) -> Option<(u64, u64, u32)> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let n = self.len;
        let last = self.get(n);
        let top = self.get(0);
        if n == 0 {
            return Some(top.unpack());
        }
        // The last key sinks from the root to where its smallest child is no smaller.
        let mut i = 0;
        loop {
            let first = Self::ARITY * i + 1;
            if first >= n {
                break;
            }
            // The children of node i's children: lines 4i + 2 to 4i + 5.
            let next = Self::ARITY * i + 2;
            for line in self.lines.get(next..(next + Self::ARITY).min(self.lines.len())).into_iter().flatten() {
                crate::prefetch::prefetch(line);
            }
            // Line i + 1 holds the children; those past the end are stale, so only n - first count.
            let children = &self.lines[i + 1].0[..Self::ARITY.min(n - first)];
            let (offset, &least) = children.iter().enumerate().min_by_key(|&(_, key)| *key).expect("a child");
            if last <= least {
                break;
            }
            self.set(i, least);
            i = first + offset;
        }
        self.set(i, last);
        Some(top.unpack())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Pops everything, with times in ms.
    fn drain(q: &mut EventQueue<&'static str>) -> Vec<(u64, &'static str)> {
        std::iter::from_fn(|| q.pop()).map(|(at, e)| (at.as_millis() as u64, e)).collect()
    }

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::new(&[]);
        q.push(5 * MS, "c");
        q.push(MS, "a");
        q.push(5 * MS, "d");
        q.push(MS, "b");
        assert_eq!(drain(&mut q), [(1, "a"), (1, "b"), (5, "c"), (5, "d")]);
    }

    #[test]
    fn upcoming_shows_each_front_and_top_once() {
        let mut q = EventQueue::new(&[Duration::ZERO]);
        q.push(Duration::ZERO, "lane a");
        q.push(Duration::ZERO, "lane b");
        q.push(5 * MS, "heap a");
        q.push(7 * MS, "heap b");
        let mut shown: Vec<_> = q.upcoming().copied().collect();
        shown.sort();
        assert_eq!(shown, ["heap a", "lane a"]);
        assert_eq!(q.upcoming().count(), 0, "shown already");
        assert_eq!(q.pop(), Some((Duration::ZERO, "lane a")));
        assert_eq!(q.upcoming().copied().collect::<Vec<_>>(), ["lane b"]);
        q.pop();
        q.pop();
        assert_eq!(q.upcoming().copied().collect::<Vec<_>>(), ["heap b"]);
    }

    #[test]
    fn the_key_heap_pops_what_a_binary_heap_pops() {
        use rand::{Rng, SeedableRng};
        use std::cmp::Reverse;
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(5);
        let (mut ours, mut binary) = (KeyHeap::default(), std::collections::BinaryHeap::new());
        for seq in 0..50_000u64 {
            // Few distinct times, so many keys tie on time and seq decides.
            if rng.gen_range(0..3) > 0 {
                let key = (rng.gen_range(0..500), seq, seq as u32);
                ours.push(key);
                binary.push(Reverse(key));
            } else {
                assert_eq!(ours.pop(), binary.pop().map(|Reverse(k)| k));
            }
            assert_eq!(ours.peek(), binary.peek().map(|&Reverse(k)| k));
        }
        while let Some(Reverse(key)) = binary.pop() {
            assert_eq!(ours.pop(), Some(key));
        }
        assert_eq!(ours.pop(), None);
    }

    #[test]
    fn lanes_keep_the_heap_only_order() {
        // Lanes for 0 and 2 ms; the 3 ms events and the absolute ones go to the heap.
        let mut q = EventQueue::new(&[Duration::ZERO, 2 * MS, 3 * MS]);
        q.push(2 * MS, "lane-2 a");
        q.push(3 * MS, "heap a");
        q.push(Duration::ZERO, "lane-0 a");
        q.push(2 * MS, "lane-2 b");
        assert_eq!(q.pop(), Some((Duration::ZERO, "lane-0 a")));
        // Now 0 ms: at once goes to lane 0, 2 ms after to lane 2, 1 ms after to the heap.
        q.push(2 * MS, "lane-2 c");
        q.push(Duration::ZERO, "lane-0 b");
        q.push(MS, "heap b");
        assert_eq!(q.pop(), Some((Duration::ZERO, "lane-0 b")));
        assert_eq!(q.pop(), Some((MS, "heap b")));
        // Now 1 ms: 2 ms after (3 ms) ties with "heap a", which was pushed first.
        q.push(3 * MS, "lane-2 d");
        assert_eq!(drain(&mut q), [(2, "lane-2 a"), (2, "lane-2 b"), (2, "lane-2 c"), (3, "heap a"), (3, "lane-2 d")]);
    }

    #[test]
    fn lanes_pop_in_the_same_order_as_the_heap_alone() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(3);
        let delays = [Duration::ZERO, Duration::from_micros(250), 250 * MS];
        let (mut laned, mut plain) = (EventQueue::new(&delays), EventQueue::new(&[]));
        let (mut now, mut popped, mut id) = (Duration::ZERO, 0, 0u32);
        for _ in 0..20_000 {
            // Mostly the lanes' delays, some random ones, a few pushes per pop.
            for _ in 0..rng.gen_range(0..3) {
                let after = match rng.gen_range(0..4) {
                    3 => Duration::from_micros(rng.gen_range(0..300_000)),
                    i => delays[i],
                };
                id += 1;
                laned.push(now + after, id);
                plain.push(now + after, id);
            }
            let (a, b) = (laned.pop(), plain.pop());
            assert_eq!(a, b);
            if let Some((at, _)) = a {
                now = at;
                popped += 1;
            }
        }
        assert!(popped > 10_000, "the test exercised the queues ({popped} pops)");
        assert_eq!(
            std::iter::from_fn(|| laned.pop()).collect::<Vec<_>>(),
            std::iter::from_fn(|| plain.pop()).collect::<Vec<_>>()
        );
    }
}
