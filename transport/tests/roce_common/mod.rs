//! Two RoCEv2 RC endpoints on a tiny deterministic wire (fixed delay, scripted drops), for
//! the RoCEv2 engine's integration tests.
#![allow(dead_code)] // each test file uses its own part

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::roce::wire::{self, Opcode, Packet, PacketView};
use ferroce_transport::roce::{RoceConfig, RoceEndpoint};
use ferroce_transport::*;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

pub const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const DELAY: u64 = 1_000;
pub const QP: u32 = 0x11;

pub struct Side {
    pub ep: RoceEndpoint,
    pub mem: Regions,
    pub ip: Ipv4Addr,
    pub conn: ConnId,
    pub done: Vec<Completion>,
}

pub struct InFlight {
    pub at: u64,
    pub to_b: bool,
    pub src: Ipv4Addr,
    pub sport: u16,
    pub bytes: Vec<u8>,
}

/// Decides the fate of each packet: (sender is A, opcode, PSN, index among all packets).
pub type Dropper = Box<dyn FnMut(bool, Opcode, u32, u64) -> bool>;

pub struct Wire {
    pub a: Side,
    pub b: Side,
    pub now: u64,
    pub q: VecDeque<InFlight>,
    pub drop: Dropper,
    pub sent: u64,
    pub dropped: u64,
    /// (from A?, opcode, psn) of every packet sent.
    pub log: Vec<(bool, Opcode, u32)>,
    /// Every packet sent (from A?, its bytes), when `keep_frames` is set.
    pub frames: Vec<(bool, Vec<u8>)>,
    pub keep_frames: bool,
    /// (PSN, VA, DMA length) of every READ request sent (by either side).
    pub reads: Vec<(u32, u64, u32)>,
}

pub fn side(ip: Ipv4Addr, peer: Ipv4Addr, cfg: &dyn Fn(&mut RoceConfig)) -> Side {
    let mut c = RoceConfig::new(ip);
    c.timeout = 8; // ~1 ms
    cfg(&mut c);
    let mut ep = RoceEndpoint::new(c);
    let conn = ep.connect(peer);
    assert_eq!(
        ep.poll_event(),
        Some(Event::Connected { conn, peer }),
        "RoCEv2 connects at once"
    );
    ep.create_stream(conn, QP, QP, 1).unwrap();
    Side {
        ep,
        mem: Regions::new(),
        ip,
        conn,
        done: Vec::new(),
    }
}

impl Wire {
    pub fn new(cfg: &dyn Fn(&mut RoceConfig)) -> Wire {
        Wire {
            a: side(A, B, cfg),
            b: side(B, A, cfg),
            now: 0,
            q: VecDeque::new(),
            drop: Box::new(|_, _, _, _| false),
            sent: 0,
            dropped: 0,
            log: Vec::new(),
            frames: Vec::new(),
            keep_frames: false,
            reads: Vec::new(),
        }
    }

    pub fn pump_tx(&mut self) {
        let mut buf = vec![0u8; 9000];
        loop {
            let mut any = false;
            for from_a in [true, false] {
                let s = if from_a { &mut self.a } else { &mut self.b };
                if let Some(t) = s.ep.poll_transmit(self.now, &mut buf, &mut s.mem) {
                    any = true;
                    let bytes = buf[..t.len].to_vec();
                    assert_eq!(t.dst_port, 4791);
                    // Every packet is valid RoCEv2 with the ICRC of the canonical headers.
                    let v = PacketView::new_checked(&bytes[..]).expect("valid packet");
                    let flow = wire::Flow {
                        src: s.ip,
                        dst: t.dst,
                        src_port: t.src_port,
                        dst_port: 4791,
                    };
                    assert!(v.icrc_ok_canonical(&flow));
                    let p = Packet::parse(&bytes).unwrap();
                    assert_eq!(p.bth.dest_qpn, QP);
                    self.log.push((from_a, p.bth.opcode, p.bth.psn));
                    if self.keep_frames {
                        self.frames.push((from_a, bytes.clone()));
                    }
                    if let (Opcode::ReadRequest, Some(r)) = (p.bth.opcode, p.ext.reth) {
                        self.reads.push((p.bth.psn, r.va, r.dma_len));
                    }
                    let n = self.sent;
                    self.sent += 1;
                    if (self.drop)(from_a, p.bth.opcode, p.bth.psn, n) {
                        self.dropped += 1;
                        continue;
                    }
                    self.q.push_back(InFlight {
                        at: self.now + DELAY,
                        to_b: from_a,
                        src: s.ip,
                        sport: t.src_port,
                        bytes,
                    });
                }
            }
            if !any {
                break;
            }
        }
    }

    pub fn collect(&mut self) {
        for s in [&mut self.a, &mut self.b] {
            while let Some(c) = s.ep.poll_completion() {
                s.done.push(c);
            }
        }
    }

    /// Run until both sides are idle or `limit` ns pass.
    pub fn run(&mut self, limit: u64) {
        let end = self.now + limit;
        loop {
            self.pump_tx();
            self.collect();
            let next_pkt = self.q.front().map(|f| f.at);
            let next_timer = [self.a.ep.poll_timeout(), self.b.ep.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = match (next_pkt, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => return,
                },
            };
            if next > end {
                self.now = end;
                return;
            }
            self.now = self.now.max(next);
            if next_pkt == Some(next) {
                let f = self.q.pop_front().unwrap();
                let s = if f.to_b { &mut self.b } else { &mut self.a };
                s.ep.handle_datagram(self.now, f.src, f.sport, false, &f.bytes, &mut s.mem);
            } else {
                self.a.ep.handle_timeout(self.now);
                self.b.ep.handle_timeout(self.now);
            }
        }
    }
}

pub fn sge(lkey: u32, addr: u64, len: u32) -> SgList {
    [Sge { lkey, addr, len }].into_iter().collect()
}

pub fn wr(id: u64, op: SendOp, sgl: SgList) -> SendWr {
    SendWr {
        wr_id: id,
        op,
        sgl,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// A: source buffer at 0x1000 (lkey returned); B: a writable/readable/atomic region at
/// 0x8000 and a receive buffer at 0x40000.
pub struct Keys {
    pub a_lkey: u32,
    pub b_rkey: u32,
    pub b_recv: u32,
}

pub fn setup(w: &mut Wire, len: usize) -> Keys {
    let a_lkey = w.a.mem.register(1, 0x1000, len, access::LOCAL_WRITE);
    w.a.mem.region_mut(a_lkey).unwrap().data = pattern(len, 0x5a);
    let b_rkey = w.b.mem.register(
        1,
        0x8000,
        len,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
    w.b.mem.region_mut(b_rkey).unwrap().data = pattern(len, 0x33);
    let b_recv = w.b.mem.register(1, 0x40000, len, access::LOCAL_WRITE);
    Keys {
        a_lkey,
        b_rkey,
        b_recv,
    }
}
