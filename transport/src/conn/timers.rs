//! The send side's timer table: one row per built path (its own next deadline and what its
//! time-loss deadline needs), recomputed only for the paths that changed, so a deadline query
//! is a pass over compact rows. It is a cache of what the paths say: boxed, made when first
//! needed, and dropped by `compact` when the connection has gone idle (rebuilt whole, from
//! the paths, on the next refresh: the same rows).

use super::*;

/// The table and its bookkeeping.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    pub(super) rows: Vec<PathTimes>,
    /// Rows to recompute (`mark_path`), as flags and as a list.
    dirty: Vec<bool>,
    list: Vec<u8>,
    /// The basis the rows were computed from: all are recomputed when it moves.
    pub(super) key: TimerBasis,
}

impl Connection {
    /// Path `i` changed in a way its deadlines depend on.
    pub(super) fn mark_path(&mut self, i: usize) {
        let Some(t) = self.timers.as_deref_mut() else {
            return;
        };
        if let Some(d) = t.dirty.get_mut(i) {
            if !*d {
                *d = true;
                t.list.push(i as u8);
            }
        }
    }

    /// Bring the timer table up to date (the endpoint calls this before `poll_timeout`).
    pub(crate) fn refresh_timers(&mut self) {
        let key = self.timer_basis();
        let n = self.paths.len();
        let mut t = self.timers.take().unwrap_or_default();
        if key != t.key || self.pt_all || t.rows.len() != n {
            t.key = key;
            self.pt_all = false;
            t.rows.resize(n, PathTimes::NONE);
            t.dirty.resize(n, false);
            for i in 0..n {
                t.rows[i] = self.path_times(i, &key);
            }
        } else {
            for k in 0..t.list.len() {
                let i = t.list[k] as usize;
                t.rows[i] = self.path_times(i, &key);
            }
        }
        for &i in &t.list {
            t.dirty[i as usize] = false;
        }
        t.list.clear();
        self.timers = Some(t);
    }

    /// The table is up to date: its rows say what the paths say.
    pub(super) fn timers_clean(&self) -> bool {
        match self.timers.as_deref() {
            Some(t) => {
                !self.pt_all
                    && t.list.is_empty()
                    && t.rows.len() == self.paths.len()
                    && self.timer_basis() == t.key
            }
            None => false,
        }
    }

    /// The table's rows (empty when there is none).
    pub(super) fn timer_rows(&self) -> &[PathTimes] {
        self.timers.as_deref().map_or(&[], |t| &t.rows)
    }

    /// Drop the table (the connection has gone idle): the next refresh rebuilds every row.
    pub(super) fn drop_timers(&mut self) {
        self.timers = None;
        self.pt_all = true;
    }
}
