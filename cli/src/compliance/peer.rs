//! The suite's side of one connection: crafted native packets over kernel UDP sockets, the
//! target's answers collected per connection (by `dst_conn`), and the minimum of a conforming
//! peer the target needs to do its part (ACKs for its responses, answers to its PROBEs and hint
//! requests).

use super::{Env, Fail};
use ferroce_transport::wire::{
    flags, AckRepr, Body, CloseRepr, DataOp, DataRepr, MsgHeader, NackRepr, Opcode, OpenRepr,
    Packet, ProbeRepr, Sack256, SeqHeader,
};
use std::collections::HashMap;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The UDP source port the suite's packets leave from unless a case picks another.
pub const SPORT: u16 = 50_000;
/// The `mtu` the suite announces: so the agreed `P` fits a 1500-byte link (WIRE-8).
pub const MTU: u16 = 1024;

/// The sockets of a run: one receiving every answer (bound to the port targets send to), and
/// one per UDP source port the suite sends from.
pub struct Net {
    rx: UdpSocket,
    tx: std::cell::RefCell<HashMap<u16, UdpSocket>>,
    bind_ip: std::net::Ipv4Addr,
    pub target: SocketAddrV4,
}

impl Net {
    pub fn new(bind: SocketAddrV4, target: SocketAddrV4) -> Result<Net, String> {
        let rx = UdpSocket::bind(bind).map_err(|e| format!("cannot bind {bind}: {e}"))?;
        // Non-blocking, polled with short sleeps: a socket timeout is rounded up to the
        // kernel's tick (4 ms at HZ=250), too coarse to answer a target's timers in time.
        rx.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(Net {
            rx,
            tx: Default::default(),
            bind_ip: *bind.ip(),
            target,
        })
    }

    /// Send `bytes` to the target from UDP source port `sport`.
    pub fn send(&self, bytes: &[u8], sport: u16) -> Result<(), Fail> {
        let mut tx = self.tx.borrow_mut();
        if let std::collections::hash_map::Entry::Vacant(e) = tx.entry(sport) {
            let s = UdpSocket::bind(SocketAddrV4::new(self.bind_ip, sport))
                .map_err(|e| Fail::setup(format!("cannot bind source port {sport}: {e}")))?;
            e.insert(s);
        }
        tx[&sport]
            .send_to(bytes, self.target)
            .map_err(|e| Fail::setup(format!("send to {}: {e}", self.target)))?;
        Ok(())
    }

    /// One datagram from the target, if one is there: (bytes, source port).
    fn recv(&self, buf: &mut [u8]) -> Option<(usize, u16)> {
        loop {
            match self.rx.recv_from(buf) {
                Ok((n, std::net::SocketAddr::V4(a))) if *a.ip() == *self.target.ip() => {
                    return Some((n, a.port()))
                }
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }
}

/// One datagram from the target.
#[derive(Clone, Debug)]
pub struct Rx {
    pub sport: u16,
    pub raw: Vec<u8>,
    /// A reliable packet whose PSN the suite had already received when it arrived (a copy:
    /// the network's or a resend's), not something the target produced anew.
    pub dup: bool,
}

/// An acknowledgement of one path, from an ACK or one block of an ACK_MULTI (ACK-5: a sender
/// accepts both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckInfo {
    pub path: u8,
    pub cum_psn: u32,
    pub sack: Sack256,
    pub hint: u32,
    pub ts_echo: u32,
}

impl AckInfo {
    /// The SACK bits set, as offsets `j` (PSN `cum_psn + 1 + j`).
    pub fn bits(&self) -> Vec<u32> {
        (0..256).filter(|i| self.sack.get(*i)).collect()
    }
}

impl Rx {
    pub fn pkt(&self) -> Option<Packet<'_>> {
        Packet::parse(&self.raw).ok()
    }

    pub fn opcode(&self) -> Option<Opcode> {
        self.pkt().map(|p| p.opcode())
    }

    pub fn is(&self, op: Opcode) -> bool {
        self.opcode() == Some(op)
    }

    pub fn ack(&self) -> Option<AckInfo> {
        match self.pkt()?.body {
            Body::Ack(a) => Some(AckInfo {
                path: self.pkt()?.path,
                cum_psn: a.cum_psn,
                sack: a.sack,
                hint: a.rate_hint_mbps,
                ts_echo: a.ts_echo,
            }),
            Body::AckMulti(m) => m.blocks().find(|b| b.path == 0).map(|b| AckInfo {
                path: b.path,
                cum_psn: b.cum_psn,
                sack: b.sack,
                hint: m.rate_hint_mbps,
                ts_echo: b.ts_echo,
            }),
            _ => None,
        }
    }

    pub fn nack(&self) -> Option<NackRepr> {
        match self.pkt()?.body {
            Body::Nack(n) => Some(n),
            _ => None,
        }
    }

    /// A reliable packet of the target: (flags, seq, msg, op, payload).
    pub fn data(&self) -> Option<(u8, SeqHeader, MsgHeader, DataOp, Vec<u8>)> {
        let p = self.pkt()?;
        match p.body {
            Body::Data(d) => Some((p.flags, d.seq, d.msg, d.op, d.payload.to_vec())),
            _ => None,
        }
    }

    /// Short description for a report.
    pub fn describe(&self) -> String {
        match self.pkt() {
            None => format!("unparseable {} B datagram", self.raw.len()),
            Some(p) => {
                let mut s = match p.body {
                    Body::Data(d) => format!(
                        "{:?} psn={} stream={} msn={} offset={} length={} payload={}B",
                        p.opcode(),
                        d.seq.psn,
                        d.msg.stream,
                        d.msg.msn,
                        d.msg.offset,
                        d.msg.length,
                        d.payload.len()
                    ),
                    Body::Ack(_) | Body::AckMulti(_) => {
                        let a = self.ack().unwrap_or(AckInfo {
                            path: 0,
                            cum_psn: 0,
                            sack: Sack256::default(),
                            hint: 0,
                            ts_echo: 0,
                        });
                        format!(
                            "{:?} cum_psn={} sack={:?} ts_echo={} hint={}",
                            p.opcode(),
                            a.cum_psn,
                            a.bits(),
                            a.ts_echo,
                            a.hint
                        )
                    }
                    Body::Nack(n) => format!(
                        "NACK psn={} stream={} msn={} reason={:?} rnr_delay={}",
                        n.psn, n.stream, n.msn, n.reason, n.rnr_delay
                    ),
                    b => format!("{b:?}"),
                };
                s.push_str(&format!(
                    " path={} flags={:#04x} sport={}",
                    p.path, p.flags, self.sport
                ));
                s
            }
        }
    }
}

/// Describe a list of datagrams ("nothing" when empty).
pub fn describe_all(v: &[Rx]) -> String {
    if v.is_empty() {
        return "nothing".into();
    }
    v.iter().map(Rx::describe).collect::<Vec<_>>().join("; ")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A connection id for the suite's side: nonzero, different for every connection of a run and,
/// very likely, from those of any earlier run (CONN-1, CONN-2).
pub fn fresh_id() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = t ^ ((std::process::id() as u64) << 32) ^ NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // splitmix64
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) as u32).max(1)
}

/// The suite's end of one connection to the target.
pub struct Peer<'a> {
    pub env: &'a Env,
    /// The suite's id of the connection (the target's `dst_conn`).
    pub me: u32,
    /// The target's id (0 before its OPEN_ACK).
    pub them: u32,
    /// Agreed maximum payload and path count.
    pub p: u32,
    pub paths: u8,
    /// The target's OPEN_ACK line rate.
    pub line_rate: u32,
    /// Next PSN of the suite's path 0, the floor it sends, next MSN of stream 1.
    pub next_psn: u32,
    pub floor: u32,
    pub next_msn: u32,
    tsval: u32,
    /// Answer the target's reliable packets, PROBEs and hint requests as they come.
    pub auto: bool,
    /// The target's path 0 as the suite receives it: next PSN expected and the bitmap.
    rx_cum: u32,
    rx_above: Vec<u32>,
    /// Every datagram of this connection not yet taken by a case.
    pending: Vec<Rx>,
}

impl<'a> Peer<'a> {
    /// A peer that has not opened anything yet.
    pub fn new(env: &'a Env) -> Peer<'a> {
        Peer {
            env,
            me: fresh_id(),
            them: 0,
            p: MTU as u32,
            paths: 1,
            line_rate: 0,
            next_psn: 0,
            floor: 0,
            next_msn: 0,
            tsval: 1,
            auto: true,
            rx_cum: 0,
            rx_above: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Open a connection (OPEN retried until the OPEN_ACK, at most ~2 s).
    pub fn open(env: &'a Env) -> Result<Peer<'a>, Fail> {
        let mut p = Peer::new(env);
        let ack = p.open_exchange(p.me)?;
        p.accept_open_ack(&ack)?;
        Ok(p)
    }

    /// Send OPEN with `src_conn` until an OPEN_ACK for it arrives.
    pub fn open_exchange(&mut self, src_conn: u32) -> Result<Rx, Fail> {
        let open = self.open_packet(src_conn);
        for _ in 0..10 {
            self.send(&open, SPORT)?;
            if let Some(r) = self.wait_for(Duration::from_millis(200), |r| r.is(Opcode::OpenAck)) {
                return Ok(r);
            }
        }
        Err(Fail::new(
            "OPEN-1",
            "an OPEN_ACK to OPEN (10 tries over 2 s)",
            "nothing",
        ))
    }

    pub fn open_packet(&self, src_conn: u32) -> Vec<u8> {
        emit(&Packet {
            flags: 0,
            path: 0,
            dst_conn: 0,
            body: Body::Open(OpenRepr {
                src_conn,
                paths: 1,
                crowd: 1,
                mtu: MTU,
                line_rate_mbps: 0,
            }),
        })
    }

    /// Record the target's id and the agreed parameters from its OPEN_ACK.
    pub fn accept_open_ack(&mut self, r: &Rx) -> Result<(), Fail> {
        let Some(Packet {
            body: Body::OpenAck(o),
            ..
        }) = r.pkt()
        else {
            return Err(Fail::new("OPEN-1", "OPEN_ACK", r.describe()));
        };
        if o.src_conn == 0 {
            return Err(Fail::new("CONN-1", "a nonzero src_conn", "0"));
        }
        self.them = o.src_conn;
        self.p = (o.mtu as u32).min(MTU as u32);
        self.paths = o.paths.min(1);
        self.line_rate = o.line_rate_mbps;
        Ok(())
    }

    pub fn send(&self, bytes: &[u8], sport: u16) -> Result<(), Fail> {
        if self.env.trace {
            let r = Rx {
                sport,
                raw: bytes.to_vec(),
                dup: false,
            };
            eprintln!(
                "{:>10.3} ms -> {}",
                self.env.t0.elapsed().as_secs_f64() * 1e3,
                r.describe()
            );
        }
        self.env.net.send(bytes, sport)
    }

    pub fn tsval(&mut self) -> u32 {
        self.tsval = self.tsval.wrapping_add(1).max(1);
        self.tsval
    }

    /// Take the next PSN of path 0.
    pub fn psn(&mut self) -> u32 {
        let p = self.next_psn;
        self.next_psn = p.wrapping_add(1);
        p
    }

    /// Take the next MSN of stream 1.
    pub fn msn(&mut self) -> u32 {
        let m = self.next_msn;
        self.next_msn = m.wrapping_add(1);
        m
    }

    /// A reliable packet on path 0 of this connection.
    #[allow(clippy::too_many_arguments)]
    pub fn data_packet(
        &self,
        fl: u8,
        psn: u32,
        floor: u32,
        tsval: u32,
        msg: MsgHeader,
        op: DataOp,
        payload: &[u8],
    ) -> Vec<u8> {
        emit(&Packet {
            flags: fl,
            path: 0,
            dst_conn: self.them,
            body: Body::Data(DataRepr {
                seq: SeqHeader { psn, floor, tsval },
                msg,
                op,
                payload,
            }),
        })
    }

    /// Send a one-packet request (LAST set, so it is acknowledged at once) with the next PSN
    /// and `msn`; returns (psn, tsval).
    pub fn request(
        &mut self,
        msn: u32,
        length: u32,
        op: DataOp,
        payload: &[u8],
    ) -> Result<(u32, u32), Fail> {
        let psn = self.psn();
        let ts = self.tsval();
        let msg = MsgHeader {
            stream: 1,
            msn,
            offset: 0,
            length,
        };
        let b = self.data_packet(flags::LAST, psn, self.floor, ts, msg, op, payload);
        self.send(&b, SPORT)?;
        Ok((psn, ts))
    }

    /// A one-packet WRITE of `data` at `raddr` with the next PSN and MSN.
    pub fn write(&mut self, rkey: u32, raddr: u64, data: &[u8]) -> Result<(u32, u32), Fail> {
        let msn = self.msn();
        self.request(msn, data.len() as u32, DataOp::Write { rkey, raddr }, data)
    }

    /// A control packet of this connection.
    pub fn control(&self, fl: u8, path: u8, body: Body<'_>) -> Vec<u8> {
        emit(&Packet {
            flags: fl,
            path,
            dst_conn: self.them,
            body,
        })
    }

    pub fn close_packet(&self, reason: u32) -> Vec<u8> {
        self.control(
            0,
            0,
            Body::Close(CloseRepr {
                src_conn: self.me,
                reason,
            }),
        )
    }

    pub fn probe_packet(&self, fl: u8, path: u8, probe_seq: u32, ts: u32) -> Vec<u8> {
        self.control(fl, path, Body::Probe(ProbeRepr { probe_seq, ts }))
    }

    /// An ACK of the target's path 0 as the suite has received it, or as `cum`/`sack` say.
    pub fn ack_packet(&self, cum_psn: u32, sack: Sack256, ts_echo: u32) -> Vec<u8> {
        self.control(
            0,
            0,
            Body::Ack(AckRepr {
                cum_psn,
                sack,
                ecn_ce: 0,
                rate_hint_mbps: 0,
                ts_echo,
                ack_delay_ns: 0,
            }),
        )
    }

    /// Record a reliable packet of the target on our receive state of its path 0 (the
    /// receiver rules of transport.md §6.1, floor included); returns the ACK to send.
    pub fn record(&mut self, seq: SeqHeader) -> Vec<u8> {
        let d_floor = seq.psn.wrapping_sub(seq.floor) as i32;
        let after = seq.floor.wrapping_sub(self.rx_cum) as i32;
        if (0..=256).contains(&d_floor) && after > 0 {
            self.rx_cum = seq.floor;
        }
        let d = seq.psn.wrapping_sub(self.rx_cum) as i32;
        if (0..=256).contains(&d) && !self.rx_above.contains(&seq.psn) {
            self.rx_above.push(seq.psn);
        }
        // cum_psn moves past every consecutive received PSN; what falls below is forgotten.
        while let Some(i) = self.rx_above.iter().position(|p| *p == self.rx_cum) {
            self.rx_above.swap_remove(i);
            self.rx_cum = self.rx_cum.wrapping_add(1);
        }
        let cum = self.rx_cum;
        self.rx_above.retain(|p| (p.wrapping_sub(cum) as i32) > 0);
        self.state_ack(seq.tsval)
    }

    /// An ACK of the target's path 0 as the suite has received it, echoing `ts`.
    pub fn state_ack(&self, ts: u32) -> Vec<u8> {
        let cum = self.rx_cum;
        let mut sack = Sack256::default();
        for p in &self.rx_above {
            let j = p.wrapping_sub(cum).wrapping_sub(1);
            if j < 256 {
                sack.set(j);
            }
        }
        self.ack_packet(cum, sack, ts)
    }

    /// One past the highest PSN the suite has received from the target on path 0.
    pub fn rx_cum_above_max(&self) -> u32 {
        let cum = self.rx_cum;
        self.rx_above
            .iter()
            .map(|p| p.wrapping_add(1))
            .max_by_key(|p| p.wrapping_sub(cum))
            .unwrap_or(cum)
    }

    /// Take in what arrived for this connection during `d` (answering what `auto` answers);
    /// with `first`, return as soon as something arrived.
    pub fn pump(&mut self, d: Duration, first: bool) -> Result<(), Fail> {
        let end = Instant::now() + d;
        let mut buf = vec![0u8; 65_536];
        loop {
            let got = self.env.net.recv(&mut buf);
            if got.is_none() {
                if Instant::now() >= end {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            if let Some((n, sport)) = got {
                let mut r = Rx {
                    sport,
                    raw: buf[..n].to_vec(),
                    dup: false,
                };
                if let Some((_, seq, ..)) = r.data() {
                    let d = seq.psn.wrapping_sub(self.rx_cum) as i32;
                    r.dup = d < 0 || self.rx_above.contains(&seq.psn);
                }
                // Only datagrams for this connection (by our id; an unparseable one cannot be
                // attributed, and the suite sends nothing that should draw one).
                let mine = r.pkt().map(|p| p.dst_conn == self.me).unwrap_or(false);
                if self.env.trace {
                    eprintln!(
                        "{:>10.3} ms <- {}{}",
                        self.env.t0.elapsed().as_secs_f64() * 1e3,
                        r.describe(),
                        if mine { "" } else { " (not this connection)" }
                    );
                }
                if mine {
                    if self.auto {
                        self.answer(&r)?;
                    }
                    self.pending.push(r);
                } else if r.pkt().is_none() && n >= 8 {
                    let dst = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
                    if dst == self.me {
                        self.pending.push(r);
                    }
                }
            }
            if first || Instant::now() >= end {
                return Ok(());
            }
        }
    }

    /// What a conforming peer answers on its own: ACKs of reliable packets, PROBE_ACKs of
    /// PROBEs, ACKs of hint requests.
    fn answer(&mut self, r: &Rx) -> Result<(), Fail> {
        let Some(p) = r.pkt() else { return Ok(()) };
        let reply = match p.body {
            Body::Data(d) => Some(self.record(d.seq)),
            Body::Probe(pr) if p.flags & flags::BACKLOG != 0 => {
                // The answer to a hint request: the path as it is, `ts` echoed.
                Some(self.state_ack(pr.ts))
            }
            Body::Probe(pr) => Some(self.control(0, p.path, Body::ProbeAck(pr))),
            _ => None,
        };
        if let Some(b) = reply {
            self.send(&b, SPORT)?;
        }
        Ok(())
    }

    /// Wait up to `d` for a datagram matching `f`; it is taken, the others stay pending.
    pub fn wait_for(&mut self, d: Duration, f: impl Fn(&Rx) -> bool) -> Option<Rx> {
        let end = Instant::now() + d;
        loop {
            if let Some(i) = self.pending.iter().position(&f) {
                return Some(self.pending.remove(i));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || self.pump(left, true).is_err() {
                return None;
            }
        }
    }

    /// Put a datagram back, first in line (a helper looked at it for its caller).
    pub fn unget(&mut self, r: Rx) {
        self.pending.insert(0, r);
    }

    /// Wait for the answer a request must get (`Env::answer` at most).
    pub fn expect(&mut self, f: impl Fn(&Rx) -> bool) -> Option<Rx> {
        let d = self.env.answer;
        self.wait_for(d, f)
    }

    /// Everything the target sent during the quiet window, except what a conforming target
    /// may send on its own at any time: PROBEs and hint requests of its paths, copies of
    /// packets already received, and resent (RETX) copies of its own responses, e.g. tail-loss probes sent before the suite's ACK
    /// reached it (its timers are µs; the suite answers in tens of µs at best).
    pub fn quiet(&mut self) -> Vec<Rx> {
        self.quiet_all()
            .into_iter()
            .filter(|r| !r.is(Opcode::Probe))
            .filter(|r| !r.dup && r.data().is_none_or(|d| d.0 & flags::RETX == 0))
            .collect()
    }

    /// Everything the target sent during the quiet window.
    pub fn quiet_all(&mut self) -> Vec<Rx> {
        let d = self.env.quiet;
        let _ = self.pump(d, false);
        std::mem::take(&mut self.pending)
    }

    /// The ACK of `psn` (cumulative: `cum_psn` past it), waited for.
    pub fn expect_ack_past(&mut self, psn: u32) -> Option<Rx> {
        self.expect(|r| {
            r.ack()
                .is_some_and(|a| (a.cum_psn.wrapping_sub(psn) as i32) > 0)
        })
    }

    /// READ `len` bytes at `raddr` under `rkey` with the next MSN; the response's payload in
    /// order of offset, or what went wrong.
    pub fn read(&mut self, rkey: u32, raddr: u64, len: u32) -> Result<Vec<u8>, Fail> {
        let msn = self.msn();
        let (psn, _) = self.request(msn, len, DataOp::ReadReq { rkey, raddr }, &[])?;
        let mut out = vec![0u8; len as usize];
        let mut got = 0u32;
        let chunks = len.div_ceil(self.p).max(1);
        let mut seen = std::collections::BTreeSet::new();
        while (seen.len() as u32) < chunks {
            let Some(r) = self.expect(|r| {
                r.nack().is_some_and(|n| n.msn == msn)
                    || r.data()
                        .is_some_and(|d| matches!(d.3, DataOp::ReadResp) && d.2.msn == msn)
            }) else {
                return Err(Fail::new(
                    "PLACE-1",
                    format!("READ_RESP of msn {msn} ({len} B, {chunks} chunks)"),
                    format!("{got} B in {} chunks, then nothing", seen.len()),
                ));
            };
            if let Some(n) = r.nack() {
                return Err(Fail::new(
                    "PLACE-1",
                    format!("READ_RESP of msn {msn}"),
                    format!("NACK {:?}", n.reason),
                ));
            }
            let (_, _, m, _, payload) = r.data().expect("matched");
            let off = m.offset as usize;
            if m.length != len || off + payload.len() > out.len() {
                return Err(Fail::new(
                    "PLACE-2",
                    format!("READ_RESP chunks of a {len} B read"),
                    r.describe(),
                ));
            }
            out[off..off + payload.len()].copy_from_slice(&payload);
            if seen.insert(m.offset) {
                got += payload.len() as u32;
            }
        }
        // The READ_REQ (LAST) is acknowledged at once too (ACK-1), whenever its response came.
        if self.expect_ack_past(psn).is_none() {
            return Err(Fail::new(
                "ACK-1",
                format!("an ACK of the READ_REQ (psn {psn})"),
                "nothing",
            ));
        }
        Ok(out)
    }
}

pub fn emit(p: &Packet<'_>) -> Vec<u8> {
    let mut b = vec![0u8; p.buffer_len()];
    let n = p
        .emit(&mut b)
        .expect("a packet the suite builds fits its buffer");
    b.truncate(n);
    b
}
