//! Every packet of a message must be exactly its chunk of that message (spec/transport.md §7
//! step 2): a crafted peer sends chunks that are too long, too short, or that name another
//! key, base address or receive than the message's other chunks. Each is refused with NACK
//! InvalidRequest, places nothing, and the message never completes on the strength of it.
//! On the requester side, a READ response chunk of the wrong size fails the READ with
//! BadResponse instead of completing it with a hole.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{
    flags, Body, DataOp, DataRepr, MsgHeader, NackReason, Packet, SeqHeader,
};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const P: u32 = 64;
const DST: u64 = 0x9000;

/// A (a real endpoint) connected to B, one stream (id 1 on both sides); the test then
/// speaks for one side with crafted packets.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    ma: Regions,
    mb: Regions,
    a_conn: ConnId,
    /// The connection ids each side's packets carry (the peer's id).
    to_b: u32,
    to_a: u32,
    now: u64,
    psn: u32,
    buf: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        let cfg = |seed| {
            let mut c = EndpointConfig {
                seed,
                ..EndpointConfig::default()
            };
            c.conn.mtu = P as u16;
            c.conn.paths = 1;
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
    fn exchange(&mut self) {
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
    fn send_b(&mut self, fl: u8, msg: MsgHeader, op: DataOp, payload: &[u8]) -> Vec<NackReason> {
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

    fn data(&mut self, dst: u32, fl: u8, msg: MsgHeader, op: DataOp, payload: &[u8]) -> Vec<u8> {
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

    fn dst(&self) -> &[u8] {
        &self.mb.region(self.rkey()).unwrap().data
    }

    fn rkey(&self) -> u32 {
        0x100
    }
}

fn msg(msn: u32, offset: u32, length: u32) -> MsgHeader {
    MsgHeader {
        stream: 1,
        msn,
        offset,
        length,
    }
}

/// B's target region (key 0x100, the first `Regions` key), 256 bytes of 0xee, and one
/// receive posted for WRITE_IMM / SEND.
fn setup() -> Pair {
    let mut p = Pair::new();
    let k = p.mb.register(
        1,
        DST,
        256,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
    );
    assert_eq!(k, p.rkey());
    p.mb.region_mut(k).unwrap().data.fill(0xee);
    let rk = p.mb.register(1, 0x20_000, 512, access::LOCAL_WRITE);
    let conn = ConnId(p.to_b);
    p.b.post_recv(
        conn,
        1,
        RecvWr {
            wr_id: 5,
            sgl: [Sge {
                lkey: rk,
                addr: 0x20_000,
                len: 512,
            }]
            .into_iter()
            .collect(),
        },
    )
    .unwrap();
    p
}

fn write_imm(rkey: u32, raddr: u64) -> DataOp {
    DataOp::WriteImm {
        rkey,
        raddr,
        rsn: 0,
        imm: 9,
    }
}

#[test]
fn a_chunk_longer_than_its_share_is_refused_and_places_nothing() {
    let mut p = setup();
    let rkey = p.rkey();
    // Chunk 0 of a 128-byte message carrying all 128 bytes (its share is 64).
    let n = p.send_b(
        flags::LAST,
        msg(0, 0, 2 * P),
        write_imm(rkey, DST),
        &[1; 2 * P as usize],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    assert!(p.dst().iter().all(|&b| b == 0xee), "nothing placed");
    assert!(
        p.b.poll_completion().is_none(),
        "the message did not complete"
    );
}

#[test]
fn a_short_non_final_chunk_is_refused_and_the_message_does_not_complete() {
    let mut p = setup();
    let rkey = p.rkey();
    // Chunk 0 with 10 bytes, then a proper chunk 1: without the rule chunk 0 would count as
    // placed and the WRITE_IMM would complete with 54 bytes never written.
    let n = p.send_b(0, msg(0, 0, 2 * P), write_imm(rkey, DST), &[1; 10]);
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    let n = p.send_b(
        flags::LAST,
        msg(0, P, 2 * P),
        write_imm(rkey, DST + P as u64),
        &[2; P as usize],
    );
    assert!(n.is_empty());
    assert!(p.dst()[..P as usize].iter().all(|&b| b == 0xee));
    assert!(
        p.b.poll_completion().is_none(),
        "completed without its data"
    );
}

#[test]
fn chunks_naming_another_key_base_or_receive_are_refused() {
    // A second region the attacker would like to reach through the first's message.
    for case in ["rkey", "base", "rsn", "opcode"] {
        let mut p = setup();
        let rkey = p.rkey();
        let other = p.mb.register(1, 0x50_000, 256, access::REMOTE_WRITE);
        let n = p.send_b(0, msg(0, 0, 2 * P), write_imm(rkey, DST), &[1; P as usize]);
        assert!(n.is_empty(), "{case}: chunk 0 accepted");
        let op = match case {
            "rkey" => write_imm(other, 0x50_000 + P as u64),
            "base" => write_imm(rkey, DST + 3 * P as u64),
            "rsn" => DataOp::WriteImm {
                rkey,
                raddr: DST + P as u64,
                rsn: 1,
                imm: 9,
            },
            _ => DataOp::Write {
                rkey,
                raddr: DST + P as u64,
            },
        };
        let n = p.send_b(flags::LAST, msg(0, P, 2 * P), op, &[2; P as usize]);
        assert_eq!(n, vec![NackReason::InvalidRequest], "{case}");
        assert!(
            p.mb.region(other).unwrap().data.iter().all(|&b| b == 0),
            "{case}: the other region was written"
        );
        assert!(
            p.dst()[P as usize..].iter().all(|&b| b == 0xee),
            "{case}: chunk 1 placed"
        );
        assert!(p.b.poll_completion().is_none(), "{case}: completed");
    }
}

#[test]
fn a_zero_length_write_with_key_zero_succeeds() {
    let mut p = setup();
    p.a.post_send(
        p.a_conn,
        1,
        SendWr {
            wr_id: 3,
            op: SendOp::Write {
                rkey: 0,
                raddr: 0,
                imm: None,
            },
            sgl: SgList::new(),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    for _ in 0..50 {
        p.exchange();
    }
    let c = p.a.poll_completion().expect("completion");
    assert_eq!((c.wr_id, c.status), (3, Status::Success));
}

#[test]
fn a_read_response_chunk_of_the_wrong_size_fails_the_read() {
    for short in [true, false] {
        let mut p = setup();
        let lkey = p.ma.register(1, 0x1000, 256, access::LOCAL_WRITE);
        p.a.post_send(
            p.a_conn,
            1,
            SendWr {
                wr_id: 4,
                op: SendOp::Read {
                    rkey: 0x777,
                    raddr: 0x5000,
                },
                sgl: [Sge {
                    lkey,
                    addr: 0x1000,
                    len: 2 * P,
                }]
                .into_iter()
                .collect(),
                signaled: true,
                solicited: false,
                fence: false,
            },
        )
        .unwrap();
        // A sends its READ_REQ (dropped here: B is played by the test).
        while p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma).is_some() {}
        // The crafted responder answers chunk 0 with 10 bytes (or 2 chunks' worth) and
        // chunk 1 properly.
        let len0 = if short { 10 } else { 2 * P as usize };
        let to_a = p.to_a;
        for (off, len, fl) in [(0, len0, 0), (P, P as usize, flags::LAST)] {
            let d = p.data(
                to_a,
                fl,
                msg(0, off, 2 * P),
                DataOp::ReadResp,
                &vec![7; len],
            );
            p.a.handle_datagram(p.now, B, 40_000, false, &d, &mut p.ma);
        }
        let c = p.a.poll_completion().expect("completion");
        assert_eq!(
            (c.wr_id, c.status),
            (4, Status::BadResponse),
            "short chunk: {short}"
        );
    }
}
