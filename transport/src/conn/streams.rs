//! A connection's streams by local id. Most connections have one stream: it is kept inline
//! (no hash table, whose smallest allocation was 84 bytes per connection); a second stream
//! moves them into a boxed hash table, built by inserting them in the order they came, so it
//! is the table (and iteration order) the connection always had.

use super::Stream;
use rustc_hash::FxHashMap as HashMap;

#[derive(Debug, Default)]
pub(super) enum StreamMap {
    #[default]
    Empty,
    One(u32, Box<Stream>),
    // Boxed: while there is one stream the map costs two words, not a table header.
    #[allow(clippy::box_collection)]
    Many(Box<HashMap<u32, Box<Stream>>>),
}

impl StreamMap {
    pub(super) fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    #[inline]
    pub(super) fn get(&self, id: &u32) -> Option<&Stream> {
        match self {
            StreamMap::Empty => None,
            StreamMap::One(k, s) => (k == id).then_some(&**s),
            StreamMap::Many(m) => m.get(id).map(|s| &**s),
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: &u32) -> Option<&mut Stream> {
        match self {
            StreamMap::Empty => None,
            StreamMap::One(k, s) => (*k == *id).then_some(&mut **s),
            StreamMap::Many(m) => m.get_mut(id).map(|s| &mut **s),
        }
    }

    /// Add stream `id` (callers check first that it is new).
    pub(super) fn insert(&mut self, id: u32, s: Box<Stream>) {
        match std::mem::take(self) {
            StreamMap::Empty => *self = StreamMap::One(id, s),
            StreamMap::One(k, first) => {
                let mut m = HashMap::default();
                m.insert(k, first);
                m.insert(id, s);
                *self = StreamMap::Many(Box::new(m));
            }
            StreamMap::Many(mut m) => {
                m.insert(id, s);
                *self = StreamMap::Many(m);
            }
        }
    }

    /// Remove stream `id`. A table stays a table (emptied or not), so the order of later
    /// streams is the one the connection's table always gave them; one stream removed leaves
    /// nothing, as a table of one whose entry is erased holds nothing that orders later ones.
    pub(super) fn remove(&mut self, id: &u32) -> Option<Box<Stream>> {
        match self {
            StreamMap::Empty => None,
            StreamMap::One(k, _) if k != id => None,
            StreamMap::One(..) => match std::mem::take(self) {
                StreamMap::One(_, s) => Some(s),
                _ => unreachable!("matched One above"),
            },
            StreamMap::Many(m) => m.remove(id),
        }
    }

    /// Stream ids, in the hash table's order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &u32> + '_ {
        let (one, many) = match self {
            StreamMap::Empty => (None, None),
            StreamMap::One(k, _) => (Some(k), None),
            StreamMap::Many(m) => (None, Some(m.keys())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Stream> + '_ {
        let (one, many) = match self {
            StreamMap::Empty => (None, None),
            StreamMap::One(_, s) => (Some(&**s), None),
            StreamMap::Many(m) => (None, Some(m.values())),
        };
        one.into_iter()
            .chain(many.into_iter().flatten().map(|s| &**s))
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Stream> + '_ {
        let (one, many) = match self {
            StreamMap::Empty => (None, None),
            StreamMap::One(_, s) => (Some(&mut **s), None),
            StreamMap::Many(m) => (None, Some(m.values_mut())),
        };
        one.into_iter()
            .chain(many.into_iter().flatten().map(|s| &mut **s))
    }
}
