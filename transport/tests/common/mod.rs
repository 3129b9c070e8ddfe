//! A pair of native endpoints on a scripted wire for the transport's integration tests: A is
//! a real endpoint connected to B; a test can speak for either side with crafted packets
//! (`send_b`, `data`) or let the two talk (`exchange`).
#![allow(dead_code)] // each test file uses its own part

use ferroce_transport::mem::Regions;
use ferroce_transport::wire::{Body, DataOp, DataRepr, MsgHeader, NackReason, Packet, SeqHeader};
use ferroce_transport::*;
use std::net::Ipv4Addr;

pub const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const P: u32 = 64;
pub const DST: u64 = 0x9000;

/// A (a real endpoint) connected to B, one stream (id 1 on both sides); the test then
/// speaks for one side with crafted packets.
pub struct Pair {
    pub a: Endpoint,
    pub b: Endpoint,
    pub ma: Regions,
    pub mb: Regions,
    pub a_conn: ConnId,
    /// The connection ids each side's packets carry (the peer's id).
    pub to_b: u32,
    pub to_a: u32,
    pub now: u64,
    pub psn: u32,
    pub buf: Vec<u8>,
}

impl Pair {
    /// One path, `P`-byte chunks.
    pub fn new() -> Pair {
        Pair::with(|_| {})
    }

    /// As `new`, with `f` applied to both endpoints' configuration.
    pub fn with(f: impl Fn(&mut EndpointConfig)) -> Pair {
        let cfg = |seed| {
            let mut c = EndpointConfig {
                seed,
                ..EndpointConfig::default()
            };
            c.conn.mtu = P as u16;
            c.conn.paths = 1;
            f(&mut c);
            c
        };
        let mut p = Pair {
            a: Endpoint::new(cfg(1)),
            b: Endpoint::new(cfg(2)),
            ma: Regions::new(),
            mb: Regions::new(),
            a_conn: ConnId(0),
            to_b: 0,
            to_a: 0,
            now: 1_000,
            psn: 0,
            buf: vec![0; 4096],
        };
        p.a_conn = p.a.connect(B);
        for _ in 0..6 {
            p.exchange();
        }
        let b_conn = p.b.connections().next().unwrap().id;
        p.to_b = b_conn.0;
        p.to_a = p.a_conn.0;
        p.a.create_stream(p.a_conn, 1, 1, 1).unwrap();
        p.b.create_stream(b_conn, 1, 1, 1).unwrap();
        p
    }

    /// Fire due timers and deliver everything both sides send, once.
    pub fn exchange(&mut self) {
        for e in [&mut self.a, &mut self.b] {
            if e.poll_timeout().is_some_and(|t| t <= self.now) {
                e.handle_timeout(self.now);
            }
        }
        while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf, &mut self.ma) {
            let d = self.buf[..t.len].to_vec();
            self.b
                .handle_datagram(self.now, A, t.src_port, false, &d, &mut self.mb);
        }
        while let Some(t) = self.b.poll_transmit(self.now, &mut self.buf, &mut self.mb) {
            let d = self.buf[..t.len].to_vec();
            self.a
                .handle_datagram(self.now, B, t.src_port, false, &d, &mut self.ma);
        }
        self.now += 1_000;
    }

    /// A crafted data packet from A's side to B; returns the NACK reasons B answers with
    /// (B's other output is dropped).
    pub fn send_b(
        &mut self,
        fl: u8,
        msg: MsgHeader,
        op: DataOp,
        payload: &[u8],
    ) -> Vec<NackReason> {
        let pkt = self.data(self.to_b, fl, msg, op, payload);
        self.b
            .handle_datagram(self.now, A, 40_000, false, &pkt, &mut self.mb);
        let mut nacks = Vec::new();
        while let Some(t) = self.b.poll_transmit(self.now, &mut self.buf, &mut self.mb) {
            if let Ok(Packet {
                body: Body::Nack(n),
                ..
            }) = Packet::parse(&self.buf[..t.len])
            {
                nacks.push(n.reason);
            }
        }
        self.now += 1_000;
        nacks
    }

    pub fn data(
        &mut self,
        dst: u32,
        fl: u8,
        msg: MsgHeader,
        op: DataOp,
        payload: &[u8],
    ) -> Vec<u8> {
        let psn = self.psn;
        self.psn += 1;
        let pkt = Packet {
            flags: fl,
            path: 0,
            dst_conn: dst,
            body: Body::Data(DataRepr {
                seq: SeqHeader {
                    psn,
                    floor: 0,
                    tsval: 1,
                },
                msg,
                op,
                payload,
            }),
        };
        let mut buf = vec![0; 4096];
        let n = pkt.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    pub fn dst(&self) -> &[u8] {
        &self.mb.region(self.rkey()).unwrap().data
    }

    /// The key of B's region at `DST` (registered by the test).
    pub fn rkey(&self) -> u32 {
        self.mb
            .iter()
            .find(|(_, r)| r.addr == DST)
            .map(|(k, _)| k)
            .expect("a region at DST")
    }
}

pub fn msg(msn: u32, offset: u32, length: u32) -> MsgHeader {
    MsgHeader {
        stream: 1,
        msn,
        offset,
        length,
    }
}

pub fn sge(lkey: u32, addr: u64, len: u32) -> SgList {
    [Sge { lkey, addr, len }].into_iter().collect()
}

pub fn wr(wr_id: u64, op: SendOp, sgl: SgList) -> SendWr {
    SendWr {
        wr_id,
        op,
        sgl,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// Steps of 1 µs until A has `n` completions (A's packets pass through `drop_a`, which may
/// keep them from B); returns them.
pub fn run_until(
    p: &mut Pair,
    n: usize,
    mut drop_a: impl FnMut(&Packet<'_>) -> bool,
) -> Vec<Completion> {
    let mut done = Vec::new();
    for _ in 0..20_000 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            if !Packet::parse(&d).is_ok_and(|pkt| drop_a(&pkt)) {
                p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
            }
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
        }
        while let Some(c) = p.a.poll_completion() {
            done.push(c);
        }
        if done.len() >= n {
            return done;
        }
        p.now += 1_000;
    }
    panic!("only {} of {n} completions", done.len());
}

/// Emit a packet from A's side to B's connection (or to `dst`).
pub fn crafted(dst: u32, path: u8, fl: u8, body: Body<'_>) -> Vec<u8> {
    let pkt = Packet {
        flags: fl,
        path,
        dst_conn: dst,
        body,
    };
    let mut buf = vec![0; 4096];
    let n = pkt.emit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// A data packet with an explicit PSN and timestamp.
pub fn data_at(
    dst: u32,
    psn: u32,
    tsval: u32,
    fl: u8,
    msg: MsgHeader,
    op: DataOp,
    payload: &[u8],
) -> Vec<u8> {
    crafted(
        dst,
        0,
        fl,
        Body::Data(DataRepr {
            seq: SeqHeader {
                psn,
                floor: 0,
                tsval,
            },
            msg,
            op,
            payload,
        }),
    )
}

/// Hand `d` to B from A's address; return what B sends at once, parsed into owned bodies.
pub fn to_b_all(p: &mut Pair, d: &[u8]) -> Vec<Vec<u8>> {
    p.b.handle_datagram(p.now, A, 40_000, false, d, &mut p.mb);
    let mut out = Vec::new();
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        out.push(p.buf[..t.len].to_vec());
    }
    out
}

pub fn post_recv(p: &mut Pair, wr_id: u64, lkey: u32, addr: u64) {
    p.b.post_recv(
        ConnId(p.to_b),
        1,
        RecvWr {
            wr_id,
            sgl: sge(lkey, addr, 256),
        },
    )
    .unwrap();
}

pub fn nack_reasons(out: &[Vec<u8>]) -> Vec<NackReason> {
    out.iter()
        .filter_map(|d| match Packet::parse(d) {
            Ok(Packet {
                body: Body::Nack(n),
                ..
            }) => Some(n.reason),
            _ => None,
        })
        .collect()
}

/// (cum_psn, ts_echo) of every ACK in `out`.
pub fn acks(out: &[Vec<u8>]) -> Vec<(u32, u32)> {
    out.iter()
        .filter_map(|d| match Packet::parse(d) {
            Ok(Packet {
                body: Body::Ack(a), ..
            }) => Some((a.cum_psn, a.ts_echo)),
            Ok(Packet {
                body: Body::AckMulti(m),
                ..
            }) => m.blocks().next().map(|b| (b.cum_psn, b.ts_echo)),
            _ => None,
        })
        .collect()
}

/// What A sends now (timers fired): its data packets are held back (their PSNs and the
/// datagrams returned), everything else (hint requests, probes) goes to B and B's answers
/// come back, so A gets to send its data.
pub fn a_sends(p: &mut Pair) -> (Vec<u32>, Vec<Vec<u8>>) {
    let mut psns = Vec::new();
    let mut out = Vec::new();
    for _ in 0..40 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            match Packet::parse(&d) {
                Ok(Packet {
                    body: Body::Data(x),
                    ..
                }) => {
                    psns.push(x.seq.psn);
                    out.push(d);
                }
                _ => p.b.handle_datagram(p.now, A, 40_000, false, &d, &mut p.mb),
            }
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            p.a.handle_datagram(p.now, B, 40_000, false, &d, &mut p.ma);
        }
        p.now += 500;
    }
    (psns, out)
}

/// A's data packets (PSN, datagram), held back (`a_sends`).
pub fn held_data(p: &mut Pair) -> Vec<(u32, Vec<u8>)> {
    let (psns, pkts) = a_sends(p);
    psns.into_iter().zip(pkts).collect()
}
