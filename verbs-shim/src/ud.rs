//! UD QPs of the native device, carried on a datagram stream per host pair. (The RoCEv2
//! device's UD QPs are IBTA UD on the wire: `ud_roce.rs`; what both share — validation,
//! the copy at post time — is here.)
//!
//! The transport offers reliable streams between two hosts, not datagrams, and a stream is
//! set up by both ends knowing each other's id, which a UD receiver does not (any QP may send
//! to it). So every pair of hosts that talks UD shares one *UD stream*, id [`UD_STREAM`] on
//! both ends (a stream of the hosts' one connection, created on accepted connections
//! through the engine's listen list). A UD send becomes a SEND on it whose payload is a 16-byte shim header
//! (magic, destination QPN, source QPN, Q_Key) and the application's bytes (at most
//! [`UD_MTU`], copied at post time, so the buffer is free at once as with a NIC); the
//! immediate rides as the SEND's. The receiving shim keeps [`BOUNCES`] shim-owned buffers
//! posted on the stream; each arriving message is demultiplexed by destination QPN and Q_Key
//! into that QP's next posted receive, behind the 40-byte GRH verbs puts first in UD receive
//! buffers (RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header), with `IBV_WC_GRH`,
//! `src_qp` and `byte_len` = 40 + payload. A datagram for a QP without a posted receive, or
//! with the wrong Q_Key, is dropped, as UD does.
//!
//! A datagram to this host's own GID (between two UD QPs of this process) is delivered
//! by the sender's shim at once, as a NIC loops it back.
//!
//! UD delivery is therefore reliable and ordered per host pair (stronger than verbs
//! promises). It is not IBTA UD and does not interoperate with RoCE peers (spec/rocev2.md
//! §6.9 says so beside the RoCEv2 design).

use crate::state::{self, dbg_log, global, lock, Ext, Mode, Pending, QpInner, QpShared, WrMeta};
use crate::sys::*;
use ferroce_transport::{
    Completion, ConnId, RecvWr, SendOp, SendWr, SgList, Sge, Status, Transport,
};
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The UD stream's id on both ends (never a QPN the shim hands out).
pub const UD_STREAM: u32 = 0x00ff_fffe;
/// Largest UD payload (the port's largest MTU).
pub const UD_MTU: usize = 4096;
const HDR: usize = 16;
const MAGIC: u32 = 0x4655_4431; // "FUD1"
const BOUNCE: usize = UD_MTU + HDR;
/// Receive buffers kept posted on each UD stream.
pub const BOUNCES: usize = 64;
const GRH: usize = 40;
/// `ibv_wc.sl` of a UD receive: a RoCE NIC (mlx5) reports there what the 40 GRH bytes hold,
/// bits 2:0 the L3 header type (2 = IPv4 in the last 20 bytes), bit 3 a UDP header (RoCEv2).
/// UCX's UD transport reads it to find the destination address it checks.
pub const ROCE_PKT_IPV4: u8 = 0x8 | 0x2;
const BASE: u64 = 0x1000;

/// A UD QP's receive queue (ids into the work-request map) and Q_Key.
#[derive(Default)]
pub struct UdQp {
    pub qkey: AtomicU32,
    /// (id in the work-request map, scatter list) in posting order.
    pub rq: Mutex<VecDeque<(u64, SgList)>>,
    /// RoCEv2: receives the engine holds for this QP (`ud_roce.rs`).
    pub engine_recvs: AtomicUsize,
    /// RoCEv2: a receive of this QP has completed since it was created or reset.
    pub received: AtomicBool,
}

#[derive(Default)]
pub struct UdGlobal {
    qps: Mutex<HashMap<u32, Arc<QpShared>>>,
    /// The UD stream to each peer host, per device mode (each mode has its own engine).
    chans: Mutex<HashMap<(Ipv4Addr, Mode), Arc<QpShared>>>,
    any: AtomicBool,
    listening: AtomicBool,
}

/// Queue a receive (id in the work-request map) on a UD QP whose queue holds at most `cap`
/// (the `max_recv_wr` the QP reports): ENOMEM when it is full (ibv_post_recv(3)).
pub fn post_recv(ud: &UdQp, id: u64, sgl: SgList, cap: usize) -> Result<(), i32> {
    let mut rq = lock(&ud.rq);
    // Receives flushed since (gone from the work-request map) no longer take room.
    if rq.len() >= cap {
        rq.retain(|(i, _)| crate::inflight::contains(*i));
    }
    if rq.len() >= cap {
        return Err(libc::ENOMEM);
    }
    rq.push_back((id, sgl));
    Ok(())
}

pub fn register_qp(qp: &Arc<QpShared>) {
    if qp.mode == Mode::Roce {
        return crate::ud_roce::create(qp);
    }
    let g = &global().ud;
    lock(&g.qps).insert(qp.qpn, qp.clone());
    g.any.store(true, Ordering::SeqCst);
    if qp.mode == Mode::Native && !g.listening.swap(true, Ordering::SeqCst) {
        if let Some(e) = state::running(Mode::Native) {
            // Accepted connections get the UD stream before their first datagram.
            e.h.listen(vec![(UD_STREAM, UD_STREAM, 0)]);
        }
    }
}

pub fn unregister_qp(qp: &Arc<QpShared>) {
    if qp.mode == Mode::Roce {
        return crate::ud_roce::destroy(qp);
    }
    lock(&global().ud.qps).remove(&qp.qpn);
}

/// A CQ nobody polls (the shim's own streams, and what an XRC target has no CQ for).
pub(crate) fn dead_cq() -> Arc<state::CqState> {
    Arc::new(state::CqState {
        q: Mutex::new(Default::default()),
        cap: AtomicUsize::new(usize::MAX),
        overrun: AtomicBool::new(false),
        events: None,
        n: AtomicUsize::new(0),
        armed: AtomicBool::new(false),
        channel: None,
        cq_ptr: AtomicUsize::new(0),
        dead: AtomicBool::new(true),
        waiter: Default::default(),
    })
}

/// A new receive buffer for the UD stream `chan` (registered in the work-request map).
fn bounce(chan: &Arc<QpShared>, key: Option<u32>) -> RecvWr {
    let key = key.unwrap_or_else(|| {
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .register_owned_rw(0, BASE, vec![0; BOUNCE])
    });
    let id = crate::inflight::insert(WrMeta {
        app_wr_id: 0,
        qp: chan.clone(),
        recv: true,
        signaled: true,
        owned_key: 0,
        ext: Ext::UdBounce(key),
    });
    let mut sgl = SgList::new();
    sgl.push(Sge {
        lkey: key,
        addr: BASE,
        len: BOUNCE as u32,
    });
    RecvWr { wr_id: id, sgl }
}

/// The UD stream to `peer` (created with its receive buffers pending; `fresh` tells whether
/// it was just made).
fn chan(peer: Ipv4Addr, mode: Mode) -> (Arc<QpShared>, bool) {
    let mut chans = lock(&global().ud.chans);
    if let Some(c) = chans.get(&(peer, mode)) {
        return (c.clone(), false);
    }
    let c = Arc::new(QpShared {
        qpn: UD_STREAM,
        pd: 0,
        sq_sig_all: true,
        send_cq: dead_cq(),
        recv_cq: dead_cq(),
        mode,
        max_inline: 0,
        inner: Mutex::new(QpInner {
            state: IBV_QPS_RTS,
            peer: Some(peer),
            remote_qpn: UD_STREAM,
            rq_psn: 0,
            sq_psn: 0,
            path_mtu: 0,
            conn: None,
            pending: Vec::new(),
            requested: true,
        }),
        qp_ptr: AtomicUsize::new(0),
        srq: None,
        ud: None,
        uc: false,
        xrc: None,
        wrs: Default::default(),
        ids: Default::default(),
    });
    crate::inflight::register(&c);
    {
        let mut inner = lock(&c.inner);
        for _ in 0..BOUNCES {
            inner.pending.push(Pending::Recv(bounce(&c, None)));
        }
    }
    chans.insert((peer, mode), c.clone());
    (c, true)
}

/// Set up the UD stream to `peer` (application thread: an AH was created on a `mode` device).
pub fn warm(peer: Ipv4Addr, mode: Mode) {
    if mode == Mode::Roce || !global().ud.any.load(Ordering::SeqCst) {
        return;
    }
    let Some(e) = state::running(mode) else {
        return;
    };
    if peer == e.ip {
        return; // datagrams to this host never leave it (post_send)
    }
    let (c, fresh) = chan(peer, e.mode);
    if fresh {
        dbg_log!("UD stream to {peer} requested");
        state::request_stream(e, c, peer);
    }
}

/// A connection was accepted (engine thread): give it the UD stream's receive buffers.
pub fn on_accepted(t: &mut dyn Transport, conn: ConnId, peer: Ipv4Addr, mode: Mode) {
    let g = &global().ud;
    if !g.any.load(Ordering::SeqCst) {
        return;
    }
    let (c, fresh) = chan(peer, mode);
    if fresh {
        // The engine created the stream itself (listen list): only the buffers are missing.
        state::create_stream(t, &c, conn);
    }
}

fn err_wc(qp: &QpShared, wr_id: u64, status: u32) -> ibv_wc {
    ibv_wc {
        wr_id,
        status,
        opcode: IBV_WC_SEND,
        qp_num: qp.qpn,
        ..Default::default()
    }
}

/// `ibv_post_send` on a UD QP.
///
/// # Safety
/// `wr` is the caller's work request chain, `bad` its out-parameter or NULL.
pub unsafe fn post_send(
    st: &Arc<QpShared>,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> i32 {
    let set_bad = |w: *mut ibv_send_wr| {
        if !bad.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *bad = w };
        }
    };
    let Some(e) = state::running(st.mode) else {
        set_bad(wr);
        return libc::EINVAL;
    };
    let ud = st.ud.as_ref().expect("a UD QP");
    while !wr.is_null() {
        // SAFETY: the caller's work request chain.
        let w = unsafe { &*wr };
        let imm = match w.opcode {
            IBV_WR_SEND => None,
            // SAFETY: the union member SEND_WITH_IMM selects.
            IBV_WR_SEND_WITH_IMM => Some(u32::from_be(unsafe { w.__bindgen_anon_1.imm_data })),
            _ => {
                set_bad(wr);
                return libc::EINVAL;
            }
        };
        let Some(sgl) = crate::verbs::sg_list(w.sg_list, w.num_sge) else {
            set_bad(wr);
            return libc::EINVAL;
        };
        // SAFETY: the union member UD sends use.
        let u = unsafe { w.wr.ud };
        // SAFETY: AHs come from ibv_create_ah: ibv_ah is the first field of our Ah.
        let peer = (!u.ah.is_null())
            .then(|| unsafe { &*(u.ah as *const crate::verbs::Ah) })
            .and_then(|ah| crate::verbs::peer_of(&ah.attr));
        let total: usize = sgl.iter().map(|s| s.len as usize).sum();
        // RoCEv2 UD takes any length (longer than the MTU: sent as nothing, ud_roce.rs); the
        // native design's datagrams are at most UD_MTU.
        let max = match st.mode {
            Mode::Roce => u32::MAX as usize,
            Mode::Native => UD_MTU,
        };
        let (Some(peer), true) = (peer, total <= max) else {
            dbg_log!(
                "UD QP {:#x}: send of {total} bytes refused (no destination, or above {max})",
                st.qpn
            );
            set_bad(wr);
            return libc::EINVAL;
        };
        let qkey = if u.remote_qkey & 0x8000_0000 != 0 {
            ud.qkey.load(Ordering::Relaxed)
        } else {
            u.remote_qkey
        };
        let signaled = st.sq_sig_all || w.send_flags & IBV_SEND_SIGNALED != 0;
        let solicited = w.send_flags & IBV_SEND_SOLICITED != 0;
        let dest = ferroce_transport::roce::UdDest {
            ip: peer,
            qpn: u.remote_qpn & 0x00ff_ffff,
            // The controlled-Q_Key rule applies in the engine too; resolved here already.
            qkey,
        };
        if st.mode == Mode::Roce && total > e.mtu as usize {
            // Above the port's MTU: no packet and no error (IBTA C10-93.1.1, as rxe); the
            // engine completes it in order without reading the buffer.
            let p = crate::ud_roce::Payload::TooLong(sgl);
            crate::ud_roce::post_send(st, w.wr_id, dest, p, imm, signaled, solicited);
            wr = w.next;
            continue;
        }
        let mut buf = Vec::with_capacity(HDR + total);
        for v in [MAGIC, u.remote_qpn & 0x00ff_ffff, st.qpn, qkey] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        let mut ok = true;
        if w.send_flags & IBV_SEND_INLINE != 0 {
            for s in &sgl {
                // SAFETY: inline data is readable application memory (verbs contract).
                unsafe { crate::mr::copy_inline(s.addr, s.len as usize, &mut buf) };
            }
        } else {
            let t = global().mrs.read().unwrap_or_else(|p| p.into_inner());
            for s in &sgl {
                let at = buf.len();
                buf.resize(at + s.len as usize, 0);
                if t.read_local_checked(s.lkey, s.addr, &mut buf[at..])
                    .is_err()
                {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            st.send_cq.push(err_wc(st, w.wr_id, IBV_WC_LOC_PROT_ERR));
            wr = w.next;
            continue;
        }
        if st.mode == Mode::Roce {
            buf.drain(..HDR);
            let p = crate::ud_roce::Payload::Copied(buf);
            crate::ud_roce::post_send(st, w.wr_id, dest, p, imm, signaled, solicited);
            wr = w.next;
            continue;
        }
        if peer == e.ip {
            // To this host's own GID: a NIC loops such a datagram back without the wire (the
            // engine's packets to its own address would leave on the wire unanswered).
            let payload = (buf.len() - HDR) as u32;
            deliver_bytes(&buf, imm, peer, st.mode);
            if signaled {
                let mut wc = err_wc(st, w.wr_id, IBV_WC_SUCCESS);
                wc.byte_len = payload;
                st.send_cq.push(wc);
            }
            wr = w.next;
            continue;
        }
        let (c, fresh) = chan(peer, e.mode);
        if fresh {
            state::request_stream(e, c.clone(), peer);
        }
        let len = buf.len() as u32;
        let key = global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .register_owned(0, BASE, buf);
        let id = crate::inflight::insert(WrMeta {
            app_wr_id: w.wr_id,
            qp: c.clone(),
            recv: false,
            signaled,
            owned_key: key,
            ext: Ext::UdSend(st.clone()),
        });
        let mut s = SgList::new();
        s.push(Sge {
            lkey: key,
            addr: BASE,
            len,
        });
        crate::verbs::submit(
            &c,
            Pending::Send(SendWr {
                wr_id: id,
                op: SendOp::Send { imm },
                sgl: s,
                signaled: true,
                solicited: false,
                fence: false,
            }),
        );
        wr = w.next;
    }
    0
}

/// The 40 bytes verbs puts before a UD payload: RoCEv2 over IPv4 leaves the first 20 zero
/// and puts the IPv4 header in the last 20.
fn grh(src: Ipv4Addr, dst: Ipv4Addr, payload: usize) -> [u8; GRH] {
    let mut g = [0u8; GRH];
    let ip = &mut g[20..];
    ip[0] = 0x45;
    let tot = (20 + 8 + 12 + payload + 4) as u16;
    ip[2..4].copy_from_slice(&tot.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let mut sum: u32 = 0;
    for i in (0..20).step_by(2) {
        sum += u16::from_be_bytes([ip[i], ip[i + 1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    g
}

/// A UD stream work request finished (engine thread).
pub fn complete(meta: WrMeta, c: Completion, t: &mut dyn Transport) {
    let g = global();
    match meta.ext {
        Ext::UdSend(ref app) => {
            g.mrs
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .deregister(meta.owned_key);
            if c.status == Status::Success && !meta.signaled {
                return;
            }
            let status = if c.status == Status::Success {
                IBV_WC_SUCCESS
            } else {
                dbg_log!(
                    "UD send of QP {:#x} failed on its stream: {:?}",
                    app.qpn,
                    c.status
                );
                IBV_WC_GENERAL_ERR
            };
            let mut wc = err_wc(app, meta.app_wr_id, status);
            wc.byte_len = c.byte_len.saturating_sub(HDR as u32);
            app.send_cq.push(wc);
        }
        Ext::UdBounce(key) => {
            if c.status != Status::Success {
                g.mrs
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .deregister(key);
                return;
            }
            deliver(key, &meta.qp, c);
            // The buffer goes back on the stream.
            let conn = lock(&meta.qp.inner).conn;
            if let Some(conn) = conn {
                let wr = bounce(&meta.qp, Some(key));
                let id = wr.wr_id;
                if let Err(e) = t.post_recv(conn, UD_STREAM, wr) {
                    state::refused(id, e);
                }
            }
        }
        _ => {}
    }
}

/// Hand a datagram that arrived in bounce buffer `key` to its QP's next receive.
fn deliver(key: u32, chan: &Arc<QpShared>, c: Completion) {
    let g = global();
    let n = (c.byte_len as usize).min(BOUNCE);
    if n < HDR {
        return;
    }
    let mut buf = vec![0u8; n];
    if g.mrs
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .read_local_checked(key, BASE, &mut buf)
        .is_err()
    {
        return;
    }
    let peer = lock(&chan.inner).peer.unwrap_or(Ipv4Addr::UNSPECIFIED);
    deliver_bytes(&buf, c.imm, peer, chan.mode);
}

/// Hand datagram `buf` (shim header, payload) from host `peer`, received by `mode`'s device,
/// to its QP's next receive.
fn deliver_bytes(buf: &[u8], imm: Option<u32>, peer: Ipv4Addr, mode: Mode) {
    let g = global();
    if buf.len() < HDR {
        return;
    }
    let word = |i: usize| u32::from_le_bytes(buf[i * 4..i * 4 + 4].try_into().unwrap());
    let (magic, dst, src, qkey) = (word(0), word(1), word(2), word(3));
    let Some(qp) = lock(&g.ud.qps).get(&dst).cloned() else {
        dbg_log!("UD datagram for unknown QP {dst:#x} dropped");
        return;
    };
    if qp.mode != mode {
        // A QP of the other device: another port, which this datagram never reached.
        dbg_log!("UD datagram for QP {dst:#x} of the other device dropped");
        return;
    }
    let ud = qp.ud.as_ref().expect("a UD QP");
    if magic != MAGIC || qkey != ud.qkey.load(Ordering::Relaxed) {
        dbg_log!("UD datagram for QP {dst:#x} with Q_Key {qkey:#x} dropped");
        return;
    }
    let st = lock(&qp.inner).state;
    if st != IBV_QPS_RTR && st != IBV_QPS_RTS {
        return;
    }
    // The QP's next receive still posted (flushed ones are gone from the map).
    let (meta, sgl) = loop {
        let Some((id, sgl)) = lock(&ud.rq).pop_front() else {
            dbg_log!("UD datagram for QP {dst:#x} without a posted receive dropped");
            return;
        };
        if let Some(m) = crate::inflight::take(id) {
            break (m, sgl);
        }
    };
    let payload = &buf[HDR..];
    let local = state::engine_if_running()
        .map(|e| e.ip)
        .unwrap_or(Ipv4Addr::UNSPECIFIED);
    let room: u64 = sgl.iter().map(|s| s.len as u64).sum();
    let status = if room < (GRH + payload.len()) as u64 {
        IBV_WC_LOC_LEN_ERR
    } else {
        let mut t = g.mrs.write().unwrap_or_else(|p| p.into_inner());
        let r = t
            .write_sgl(&sgl, 0, &grh(peer, local, payload.len()))
            .and_then(|_| t.write_sgl(&sgl, GRH as u64, payload));
        if r.is_ok() {
            IBV_WC_SUCCESS
        } else {
            IBV_WC_LOC_PROT_ERR
        }
    };
    let mut wc = ibv_wc {
        wr_id: meta.app_wr_id,
        status,
        opcode: IBV_WC_RECV,
        byte_len: (GRH + payload.len()) as u32,
        qp_num: qp.qpn,
        src_qp: src,
        wc_flags: IBV_WC_GRH,
        sl: ROCE_PKT_IPV4,
        ..Default::default()
    };
    if let Some(i) = imm {
        wc.__bindgen_anon_1.imm_data = i.to_be();
        wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    qp.recv_cq.push(wc);
}
