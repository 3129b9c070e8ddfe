//! A queue that costs one pointer while it has never been used or was compacted empty: an
//! idle connection holds many of them (its send, ACK, control and output queues), and eight
//! `VecDeque` headers were 256 of its bytes. In use it is a boxed `VecDeque` that keeps its
//! buffer (and its box) until `shrink_to_fit`, so a busy connection allocates nothing per
//! packet.

use std::collections::VecDeque;

// The box is the point: one pointer instead of a 32-byte header while unused.
#[allow(clippy::box_collection)]
#[derive(Debug)]
pub(crate) struct SlimDeque<T>(Option<Box<VecDeque<T>>>);

impl<T> Default for SlimDeque<T> {
    fn default() -> Self {
        SlimDeque(None)
    }
}

impl<T> SlimDeque<T> {
    pub(crate) fn new() -> Self {
        SlimDeque(None)
    }

    fn inner(&mut self) -> &mut VecDeque<T> {
        self.0.get_or_insert_with(Default::default)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|d| d.is_empty())
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |d| d.len())
    }

    pub(crate) fn push_back(&mut self, x: T) {
        self.inner().push_back(x)
    }

    pub(crate) fn push_front(&mut self, x: T) {
        self.inner().push_front(x)
    }

    pub(crate) fn pop_front(&mut self) -> Option<T> {
        self.0.as_mut()?.pop_front()
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.0.as_ref()?.front()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.0.as_ref()?.get(i)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.0.as_mut()?.get_mut(i)
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.0.iter().flat_map(|d| d.iter())
    }

    pub(crate) fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut T> + '_ {
        self.0.iter_mut().flat_map(|d| d.iter_mut())
    }

    pub(crate) fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        if let Some(d) = self.0.as_mut() {
            d.retain(f)
        }
    }

    pub(crate) fn clear(&mut self) {
        if let Some(d) = self.0.as_mut() {
            d.clear()
        }
    }

    /// Every element, front first (the whole queue: the only range callers use).
    pub(crate) fn drain(&mut self, _all: std::ops::RangeFull) -> impl Iterator<Item = T> + '_ {
        self.0.iter_mut().flat_map(|d| d.drain(..))
    }

    pub(crate) fn resize_with(&mut self, n: usize, f: impl FnMut() -> T) {
        if n != self.len() {
            self.inner().resize_with(n, f)
        }
    }

    /// The first `n` elements (at most `len`), front first.
    pub(crate) fn drain_front(&mut self, n: usize) -> impl Iterator<Item = T> + '_ {
        self.0
            .iter_mut()
            .flat_map(move |d| d.drain(..n.min(d.len())))
    }

    /// Give back the spare capacity; an empty queue gives back its box too.
    pub(crate) fn shrink_to_fit(&mut self) {
        match self.0.as_mut() {
            Some(d) if d.is_empty() => self.0 = None,
            Some(d) => d.shrink_to_fit(),
            None => {}
        }
    }
}

impl<T> std::ops::Index<usize> for SlimDeque<T> {
    type Output = T;

    /// As `VecDeque`'s: panics out of range (callers index what they found in range).
    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(x) => x,
            None => panic!("SlimDeque index {i} out of range (len {})", self.len()),
        }
    }
}

impl<T> std::ops::IndexMut<usize> for SlimDeque<T> {
    /// As `VecDeque`'s: panics out of range.
    fn index_mut(&mut self, i: usize) -> &mut T {
        let n = self.len();
        match self.get_mut(i) {
            Some(x) => x,
            None => panic!("SlimDeque index {i} out of range (len {n})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SlimDeque;

    #[test]
    fn behaves_as_a_deque_and_gives_back_its_box_when_empty() {
        let mut q: SlimDeque<u32> = SlimDeque::new();
        assert!(q.is_empty() && q.pop_front().is_none() && q.front().is_none());
        q.push_back(2);
        q.push_back(3);
        q.push_front(1);
        assert_eq!(q.len(), 3);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
        q.retain(|&x| x != 2);
        *q.get_mut(1).unwrap() = 4;
        assert_eq!((q.get(0), q.front()), (Some(&1), Some(&1)));
        q.shrink_to_fit();
        assert!(q.0.is_some(), "a queue with elements keeps them");
        assert_eq!(q.drain(..).collect::<Vec<_>>(), [1, 4]);
        assert!(
            q.is_empty() && q.0.is_some(),
            "drained, the box stays for reuse"
        );
        q.shrink_to_fit();
        assert!(q.0.is_none(), "empty and compacted: one pointer");
    }
}
