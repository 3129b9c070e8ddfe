//! Connection control packets: the 1-RTT open (OPEN / OPEN_ACK), close (CLOSE / CLOSE_ACK), and the probes and hint requests queued as control packets (spec/transport.md §2, §4.4, §5.8).

use super::*;

impl Connection {
    /// Apply the parameters both sides agreed on and build the paths.
    pub(crate) fn establish(&mut self, peer: &OpenRepr) {
        self.win_cache.set(None);
        let n = self.cfg.paths.min(peer.paths).max(1);
        self.mtu = (self.cfg.mtu.min(peer.mtu) as u32).max(64);
        if peer.line_rate_mbps > 0 {
            self.line_rate_mbps = self.line_rate_mbps.min(peer.line_rate_mbps);
        }
        let bytes_per_ns = self.line_rate_mbps as f64 / 8000.0;
        let init_window =
            (bytes_per_ns * self.cfg.initial_rtt_ns as f64).max(self.mtu as f64 * 2.0);
        // Paths are built when first used (`lazy.rs`); under a plane restriction all at
        // once, as `apply_plane_mask` re-homes every path.
        self.n_paths = n;
        self.fresh_cwnd = (init_window / n as f64).max(self.mtu as f64);
        self.max_cwnd = init_window;
        self.paths.clear();
        self.inflight = 0;
        self.rx_paths.clear();
        self.rx_due.clear();
        self.ack_queued.clear();
        if self.plane_mask() != self.all_planes() {
            self.grow_all();
        }
        self.apply_plane_mask();
        self.pt_all = true;
        self.min_rtt_all = u64::MAX;
        self.peer_conn = peer.src_conn;
        self.state = ConnState::Open;
    }

    pub(crate) fn open_repr(&self) -> OpenRepr {
        OpenRepr {
            src_conn: self.id.0,
            paths: self.cfg.paths,
            crowd: self.crowd_here,
            mtu: self.cfg.mtu,
            line_rate_mbps: self.line_rate_mbps,
        }
    }

    /// The peer's SOLE flag as its OPEN carried it (the accepting side).
    pub(crate) fn set_peer_sole(&mut self, sole: bool) {
        self.peer_sole = sole;
    }

    /// The peer's crowd as its OPEN carried it (the accepting side; a repeated OPEN too).
    pub(crate) fn set_peer_crowd(&mut self, crowd: u8) {
        self.peer_crowd = crowd;
    }

    /// The endpoint's crowd level moved (COLD-6): an open connection whose peer last heard
    /// another value gets a repeated OPEN_ACK, once a packet from the peer has shown it live
    /// (until then it waits: `handle_packet` sends it); one still opening carries the value in
    /// its confirmation. Returns whether anything was queued.
    pub(crate) fn set_crowd(&mut self, crowd: u8) -> bool {
        self.crowd_here = crowd;
        let open = matches!(self.state, ConnState::Open | ConnState::Closing);
        open && self.peer_heard && self.crowd_sent != crowd && self.queue_open_ack_once()
    }

    /// A repeated OPEN_ACK to the peer (a confirmation, OPEN-3, or a crowd refresh, COLD-6),
    /// unless one is queued already: it carries the values current when it is sent. Returns
    /// whether it queued one.
    pub(crate) fn queue_open_ack_once(&mut self) -> bool {
        let queued = self.ctrl_queue.iter().any(|c| matches!(c, Ctrl::OpenAck));
        if !queued {
            self.ctrl_queue.push_back(Ctrl::OpenAck);
        }
        !queued
    }

    /// This end opened a second connection: withdraw SOLE with a repeated OPEN_ACK.
    pub(crate) fn withdraw_sole(&mut self) {
        self.sole_here = false;
        // Still opening: the withdrawal goes once the peer's OPEN_ACK is in (`sole_sent`).
        if self.sole_sent && self.state != ConnState::Opening {
            self.sole_sent = false;
            self.ctrl_queue.push_back(Ctrl::OpenAck);
        }
    }

    pub(crate) fn queue_open_ack(&mut self) {
        self.ctrl_queue.push_back(Ctrl::OpenAck);
    }

    pub(super) fn fail_connection(&mut self) {
        self.fail_all(Status::RetryExceeded);
        self.state = ConnState::Failed;
        for p in &mut self.paths {
            p.abandon_all();
            p.probe_at = None;
        }
        self.inflight = 0;
        self.pt_all = true;
        self.events.push_back(Event::Failed { conn: self.id });
    }

    /// READ or atomic responses this end executed that the peer has not acknowledged yet. A
    /// graceful close waits for them too (spec/transport.md CLOSE-2): an atomic already applied
    /// whose answer a CLOSE cut off would leave the peer's WR flushed with its effect in memory.
    pub(super) fn owes_responses(&self) -> bool {
        self.streams.values().any(|s| !s.responses.is_empty())
    }

    /// Start a graceful close: CLOSE once nothing is outstanding.
    pub(crate) fn close(&mut self) {
        if self.state == ConnState::Open {
            self.state = ConnState::Closing;
        }
    }

    pub(super) fn emit_ctrl(&mut self, now: u64, buf: &mut [u8]) -> Option<(usize, u16)> {
        let c = self.ctrl_queue.pop_front()?;
        let port0 = path_entropy(self.seed, 0, 0);
        let (body, path, port, dst) = match c {
            Ctrl::Open | Ctrl::Close => {
                self.ctrl_tries = self.ctrl_tries.saturating_add(1);
                if self.ctrl_tries as u32 > self.cfg.open_tries {
                    self.fail_connection();
                    return None;
                }
                self.ctrl_at = At::from(Some(
                    now + (self.cfg.open_rto_ns << (self.ctrl_tries - 1).min(8)),
                ));
                if matches!(c, Ctrl::Open) {
                    (Body::Open(self.open_repr()), 0, port0, 0)
                } else {
                    (
                        Body::Close(CloseRepr {
                            src_conn: self.id.0,
                            reason: 0,
                        }),
                        0,
                        port0,
                        self.peer_conn,
                    )
                }
            }
            Ctrl::OpenAck => (Body::OpenAck(self.open_repr()), 0, port0, self.peer_conn),
            Ctrl::CloseAck => (
                Body::CloseAck(CloseRepr {
                    src_conn: self.id.0,
                    reason: 0,
                }),
                0,
                port0,
                self.peer_conn,
            ),
            Ctrl::Probe(i) => {
                self.grow_tx(i as usize);
                let p = &mut self.paths[i as usize];
                p.probe_seq = p.probe_seq.wrapping_add(1);
                p.counters_mut().probes_sent += 1;
                (
                    Body::Probe(ProbeRepr {
                        probe_seq: p.probe_seq,
                        ts: now as u32,
                    }),
                    i,
                    p.entropy,
                    self.peer_conn,
                )
            }
            Ctrl::HomeProbe(i) => {
                self.grow_tx(i as usize);
                let p = &mut self.paths[i as usize];
                p.probe_seq = p.probe_seq.wrapping_add(1);
                p.home_probe_seq = Some(p.probe_seq);
                p.counters_mut().probes_sent += 1;
                let (seq, port, home) = (p.probe_seq, p.entropy, p.home_plane);
                let pkt = Packet {
                    flags: 0,
                    path: i,
                    dst_conn: self.peer_conn,
                    body: Body::Probe(ProbeRepr {
                        probe_seq: seq,
                        ts: now as u32,
                    }),
                };
                self.last_tx_port = home;
                return pkt.emit(buf).ok().map(|l| (l, port));
            }
            Ctrl::HintRequest(i) => {
                self.grow_tx(i as usize);
                let p = &mut self.paths[i as usize];
                p.counters_mut().probes_sent += 1;
                (
                    Body::Probe(ProbeRepr {
                        probe_seq: p.probe_seq,
                        ts: (now as u32).max(1),
                    }),
                    i,
                    p.entropy,
                    self.peer_conn,
                )
            }
            Ctrl::ProbeAck(i, pr, reply_port, _) => (
                Body::ProbeAck(ProbeRepr {
                    probe_seq: pr.probe_seq,
                    ts: pr.ts,
                }),
                i,
                reply_port,
                self.peer_conn,
            ),
        };
        self.last_tx_port = match c {
            // An answer goes back on the plane its probe came in on.
            Ctrl::ProbeAck(_, _, _, arrived) if self.tx_ready >> arrived & 1 == 1 => arrived,
            Ctrl::ProbeAck(..) => self.ctrl_port(path),
            // A probe tests its path's route, plane included: on another port (the lowest
            // offered one while the path's own is full, often a dead plane's, which drains
            // into nothing) its answer, or its loss, would say nothing about that route.
            Ctrl::Probe(_) => self
                .paths
                .get(path as usize)
                .map_or_else(|| self.own_port(path), |p| p.plane),
            _ => self.own_port(path),
        };
        let flags = match c {
            Ctrl::HintRequest(_) => flags::BACKLOG,
            Ctrl::Open | Ctrl::OpenAck if self.sole_here => flags::SOLE,
            _ => 0,
        };
        self.sole_sent |= flags == flags::SOLE && matches!(c, Ctrl::Open | Ctrl::OpenAck);
        if matches!(c, Ctrl::Open | Ctrl::OpenAck) {
            self.crowd_sent = self.crowd_here;
        }
        let pkt = Packet {
            flags,
            path,
            dst_conn: dst,
            body,
        };
        pkt.emit(buf).ok().map(|l| (l, port))
    }
}
