//! The endpoint's connections: an index-based table, so finding a connection by its id is
//! one hash of a u32 and one vector index whatever the number of connections (a
//! `BTreeMap` walked several nodes of keys per lookup, several lookups per packet, which at
//! 64,000 connections is most of the work per packet).

use crate::conn::Connection;
use rustc_hash::FxHashMap as HashMap;

/// Connections by id. Ids stay the random 32-bit values of spec/transport.md §2.1 (a slot
/// index in the id would make ids guessable); the index maps them to slots.
#[derive(Debug, Default)]
pub(super) struct ConnTable {
    /// Boxed: a free slot costs 8 bytes and growing the vector moves pointers, not
    /// connections.
    slots: Vec<Option<Box<Connection>>>,
    free: Vec<u32>,
    index: HashMap<u32, u32>,
    /// The id `get_mut` found last and its slot: the endpoint's calls for one packet ask for
    /// the same connection several times (receive, touch, re-arm, the timer heap's check),
    /// and a compare is cheaper than a hash probe. Cleared when that id is removed.
    last: Option<(u32, u32)>,
}

impl ConnTable {
    pub(super) fn contains_key(&self, id: &u32) -> bool {
        self.index.contains_key(id)
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    #[inline]
    fn slot(&self, id: u32) -> Option<u32> {
        match self.last {
            Some((k, s)) if k == id => Some(s),
            _ => self.index.get(&id).copied(),
        }
    }

    #[inline]
    pub(super) fn get(&self, id: &u32) -> Option<&Connection> {
        let s = self.slot(*id)?;
        self.slots.get(s as usize)?.as_deref()
    }

    pub(super) fn get_mut(&mut self, id: &u32) -> Option<&mut Connection> {
        let s = self.slot(*id)?;
        self.last = Some((*id, s));
        self.slots.get_mut(s as usize)?.as_deref_mut()
    }

    /// Add connection `c` under `id` (replacing one with that id, which callers never have:
    /// ids are drawn to be unused).
    pub(super) fn insert(&mut self, id: u32, c: Connection) {
        if let Some(&s) = self.index.get(&id) {
            self.slots[s as usize] = Some(Box::new(c));
            return;
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(Box::new(c));
                s
            }
            None => {
                self.slots.push(Some(Box::new(c)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, s);
    }

    pub(super) fn remove(&mut self, id: &u32) -> Option<Connection> {
        if self.last.is_some_and(|(k, _)| k == *id) {
            self.last = None;
        }
        let s = self.index.remove(id)?;
        let c = self.slots.get_mut(s as usize)?.take()?;
        self.free.push(s);
        Some(*c)
    }

    /// Every connection, in no particular order (sums, sweeps).
    pub(super) fn values(&self) -> impl Iterator<Item = &Connection> {
        self.slots.iter().filter_map(|s| s.as_deref())
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Connection> {
        self.slots.iter_mut().filter_map(|s| s.as_deref_mut())
    }

    /// Every connection in id order: what embedders see through
    /// `Endpoint::connections`, the same order whatever slots the connections took.
    pub(super) fn values_by_id(&self) -> impl Iterator<Item = &Connection> {
        let mut ids: Vec<(u32, u32)> = self.index.iter().map(|(&id, &s)| (id, s)).collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(move |(_, s)| self.slots.get(s as usize)?.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConnId;
    use crate::config::ConnConfig;
    use std::net::Ipv4Addr;

    fn conn(id: u32) -> Connection {
        Connection::new(
            ConnId(id),
            Ipv4Addr::new(198, 18, 0, 2),
            0,
            std::sync::Arc::new(ConnConfig::default()),
            100_000,
            id as u64,
        )
    }

    #[test]
    fn slots_are_reused_and_lookups_follow_ids() {
        let mut t = ConnTable::default();
        for id in [70, 5, 300] {
            t.insert(id, conn(id));
        }
        assert_eq!(t.values().count(), 3);
        assert!(t.get_mut(&5).is_some()); // the cached id
        assert!(t.remove(&5).is_some());
        assert!(t.remove(&5).is_none());
        assert!(t.get(&5).is_none() && !t.contains_key(&5));
        t.insert(9, conn(9)); // takes the freed slot
        assert_eq!(t.slots.len(), 3);
        for id in [70, 300, 9] {
            assert_eq!(t.get(&id).map(|c| c.id.0), Some(id));
            assert_eq!(t.get_mut(&id).map(|c| c.id.0), Some(id));
        }
        let by_id: Vec<u32> = t.values_by_id().map(|c| c.id.0).collect();
        assert_eq!(by_id, vec![9, 70, 300]);
        assert_eq!(t.values().count(), 3);
    }
}
