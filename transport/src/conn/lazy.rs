//! Paths built when first used, so an idle connection's memory does not grow with its
//! configured path count. `paths` and `rx_paths` hold a prefix of the `n_paths` paths; a path
//! past it is *fresh*: exactly what `establish` would have built for it, since nothing has
//! touched it but the window scaling every path gets (`fresh_cwnd` records it). Readers treat
//! a fresh path as that state (Good, nothing in flight, load 0, on plane `index % planes`);
//! anything that would change a path builds it first (`grow_tx`, `grow_rx`), so behaviour and
//! wire output are those of building every path at once. A connection that has gone idle
//! gives back its queues' spare capacity (`compact`, through `Endpoint::compact_idle`).

use super::*;

impl Connection {
    /// The plane a fresh path `i` starts on (`establish` spreads paths over the planes).
    pub(super) fn fresh_plane(&self, i: usize) -> u8 {
        (i % self.nic_ports.max(1) as usize) as u8
    }

    /// Path `i` as `establish` would have built it.
    fn fresh_tx(&self, i: usize) -> TxPath {
        let i8 = i as u8;
        let mut p = TxPath::new(
            i8,
            path_entropy(self.seed, i8, 0),
            &self.cfg,
            self.fresh_cwnd,
            self.max_cwnd,
        );
        p.planes = self.nic_ports;
        p.plane = self.fresh_plane(i);
        p.home_plane = p.plane;
        // Fresh paths exist only under the full mask (a restriction builds every path).
        p.allowed = self.plane_mask();
        p
    }

    /// Build send paths up to and including `i` (if it is one of the connection's).
    pub(super) fn grow_tx(&mut self, i: usize) {
        let n = (self.n_paths as usize).min(i + 1);
        if self.paths.len() < n {
            // Exactly what is built: a vector grown by doubling would hold spare paths.
            self.paths.reserve_exact(n - self.paths.len());
        }
        while self.paths.len() < n {
            let p = self.fresh_tx(self.paths.len());
            self.paths.push(p);
        }
    }

    /// Build receive paths up to and including `i` (if it is one of the connection's).
    pub(super) fn grow_rx(&mut self, i: usize) {
        let n = (self.n_paths as usize).min(i + 1);
        if self.rx_paths.len() < n {
            let k = n - self.rx_paths.len();
            self.rx_paths.reserve_exact(k);
            self.rx_due.reserve_exact(k);
            self.ack_queued.reserve_exact(k);
        }
        while self.rx_paths.len() < n {
            self.rx_paths.push(RxPath::default());
            self.rx_due.push(u64::MAX);
            self.ack_queued.push(false);
        }
    }

    /// Build every path (operations over all paths that are rare: plane restriction,
    /// diagnostics).
    pub(super) fn grow_all(&mut self) {
        let n = self.n_paths as usize;
        if n > 0 {
            self.grow_tx(n - 1);
            self.grow_rx(n - 1);
        }
    }

    /// Some path is Good (a fresh one is).
    pub(super) fn any_good(&self) -> bool {
        self.paths.len() < self.n_paths as usize
            || self.paths.iter().any(|p| p.state == PathState::Good)
    }

    /// Send path `i`'s plane (None: no such path).
    pub(super) fn tx_plane(&self, i: usize) -> Option<u8> {
        match self.paths.get(i) {
            Some(p) => Some(p.plane),
            None if i < self.n_paths as usize => Some(self.fresh_plane(i)),
            None => None,
        }
    }

    /// Send path `i`'s UDP source port.
    pub(super) fn tx_entropy(&self, i: usize) -> u16 {
        match self.paths.get(i) {
            Some(p) => p.entropy,
            None => path_entropy(self.seed, i as u8, 0),
        }
    }

    /// Sum of every path's window, in path order (the order the sum always had, so the
    /// float result is the same bit for bit).
    pub(super) fn window_sum(&self) -> f64 {
        let mut sum: f64 = self.paths.iter().map(|p| p.cwnd()).sum();
        for _ in self.paths.len()..self.n_paths as usize {
            sum += self.fresh_cwnd;
        }
        sum
    }

    /// Scale every path's window by `k` (a fresh path's controller does what each built
    /// one's does: `min(cwnd · k, max)`).
    pub(super) fn scale_windows(&mut self, k: f64) {
        for p in &mut self.paths {
            p.scale_window(k);
        }
        self.fresh_cwnd = (self.fresh_cwnd * k).min(self.max_cwnd);
    }

    /// Call `f` with path `i`, built or fresh (a fresh one is built for the call only):
    /// for embedders' queries, which must not grow the connection.
    pub fn with_path<R>(&self, i: usize, f: impl FnOnce(&TxPath) -> R) -> Option<R> {
        match self.paths.get(i) {
            Some(p) => Some(f(p)),
            None if i < self.n_paths as usize => Some(f(&self.fresh_tx(i))),
            None => None,
        }
    }

    /// Nothing to send, nothing in flight or outstanding: the connection has gone idle.
    pub(crate) fn is_idle(&self) -> bool {
        !self.has_unsent()
            && self.outstanding() == 0
            && !self.owes_responses()
            && self.paths.iter().all(|p| !p.has_in_flight())
    }

    /// Give back the spare capacity of every queue (called once the connection has gone
    /// idle: a busy connection keeps its buffers, so sending allocates nothing per packet).
    pub(crate) fn compact(&mut self) {
        for p in &mut self.paths {
            p.compact();
        }
        self.paths.drop_index();
        for s in self.streams.values_mut() {
            s.wrs.shrink_to_fit();
            s.posted.shrink_to_fit();
            s.rx_msgs.compact();
            s.responses.compact();
        }
        self.active.shrink_to_fit();
        self.resp_active.shrink_to_fit();
        self.retx.shrink_to_fit();
        self.rnr_wait.shrink_to_fit();
        self.ack_queue.shrink_to_fit();
        self.nack_queue.shrink_to_fit();
        self.ctrl_queue.shrink_to_fit();
        self.completions.shrink_to_fit();
        self.events.shrink_to_fit();
        self.ack_scratch = None;
        self.counters.fold();
        self.drop_timers();
    }

    /// The connection's counters (both directions).
    pub fn counters(&self) -> ConnCounters {
        self.counters.get()
    }

    /// Send paths built so far (the others are fresh: see [`Connection::with_path`]).
    pub fn built_paths(&self) -> usize {
        self.paths.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an idle connection is made of (issue 18 item 4: at most 1 KiB at each end, with
    /// its heap; `bench_shape`'s `an_idle_connection_costs_at_most_1_kib_of_transport_heap`
    /// measures the whole). A field that grows one of these shows here first.
    #[test]
    fn idle_state_sizes() {
        use std::mem::size_of;
        let sizes = [
            ("Connection", size_of::<Connection>(), 552),
            // 232: PATH-13's route start and mark window (11 B) and PATH-12's probe count (1 B)
            // over 224, less 2 B of a 16-bit RTO count.
            ("TxPath", size_of::<TxPath>(), 232),
            ("RxPath", size_of::<RxPath>(), 96),
            ("Stream", size_of::<Stream>(), 120),
        ];
        for (what, got, max) in sizes {
            assert!(got <= max, "{what} is {got} B inline, more than {max}");
        }
        assert_eq!(size_of::<crate::counters::CounterStore<ConnCounters>>(), 16);
        assert_eq!(size_of::<streams::StreamMap>(), 16);
    }
}
