//! A slab of entries addressed by generation-checked keys, so an event that outlives its entry
//! (a response to a cancelled attempt, a stale wake) finds nothing instead of a reused slot.

/// The address of a slab entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

/// A slot: aligned to a cache line, so that an entry of n lines' size spans n lines, not n + 1
/// (an event's call or job is mostly a miss, one per line).
#[repr(align(64))]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab { entries: Vec::new(), free: Vec::new() }
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.insert_with(|| value)
    }

    /// Inserts the value `make` returns, which the compiler may then build in its slot.
    pub(crate) fn insert_with(&mut self, make: impl FnOnce() -> T) -> Key {
        match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                entry.generation = entry.generation.wrapping_add(1);
                entry.value = Some(make());
                Key { index, generation: entry.generation }
            }
            None => {
                self.entries.push(Entry { generation: 0, value: Some(make()) });
                Key { index: (self.entries.len() - 1) as u32, generation: 0 }
            }
        }
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.entries.get_mut(key.index as usize) {
            Some(Entry { generation, value: Some(value) }) if *generation == key.generation => Some(value),
            _ => None,
        }
    }

    /// Hints the cache to load the entry at `key` (crate::prefetch), live or not.
    pub(crate) fn prefetch(&self, key: Key) {
        if let Some(entry) = self.entries.get(key.index as usize) {
            crate::prefetch::prefetch(entry);
        }
    }

    /// The live entries, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    /// The live entries with their keys, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.entries.iter().enumerate().filter_map(|(index, e)| {
            e.value.as_ref().map(|v| (Key { index: index as u32, generation: e.generation }, v))
        })
    }

    /// Drops the entry at `key` in its slot; whether there was one.
    pub(crate) fn delete(&mut self, key: Key) -> bool {
        match self.entries.get_mut(key.index as usize) {
            Some(Entry { generation, value: value @ Some(_) }) if *generation == key.generation => {
                *value = None;
                self.free.push(key.index);
                true
            }
            _ => false,
        }
    }

    /// The bytes an entry of `T` takes in a slab.
    #[cfg(test)]
    pub(crate) const fn entry_size() -> usize {
        std::mem::size_of::<Entry<T>>()
    }

    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.generation != key.generation {
            return None;
        }
        let value = entry.value.take();
        if value.is_some() {
            self.free.push(key.index);
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_find_nothing_after_reuse() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(slab.get_mut(a), None, "a's slot now holds b");
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get_mut(b), Some(&mut "b"));
        assert!(slab.delete(b));
        assert!(!slab.delete(b), "deleted once");
        assert_eq!(slab.get_mut(b), None);
        let c = slab.insert("c");
        assert!(!slab.delete(b), "b's slot now holds c");
        assert_eq!(slab.remove(c), Some("c"));
    }
}
