//! UD QPs of the RoCEv2 device: IBTA UD on the wire (spec/rocev2.md §6.9), so they talk to
//! rxe's and any RoCE NIC's UD QPs. Each is a UD QP of the RoCE engine, created with the
//! verbs QP; a send names its destination per work request (the address handle's GID,
//! `remote_qpn`, `remote_qkey`), and the engine writes the 40-byte GRH area (IPv4 header in
//! its last 20 bytes) and the payload into the application's receive buffer.
//!
//! The application's bytes are copied at post time (the buffer is free at once, as with a
//! NIC's inline or DMA'd data) into a shim-owned region of the QP's domain. Receives go to
//! the engine as posted, with the application's scatter list.

use crate::state::{self, dbg_log, global, Ext, QpShared, WrMeta};
use crate::sys::*;
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::roce::{RoceEndpoint, UdDest};
use ferroce_transport::{Completion, PostError, RecvWr, SendOp, SendWr, SgList, Sge, Status};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Where shim-owned send copies appear (their own region each).
const BASE: u64 = 0x1000;

/// Run `f` on the RoCE engine (in command order with the QP's other work). False when the
/// engine does not run.
fn exec(qp: &QpShared, f: impl FnOnce(&mut RoceEndpoint) + Send + 'static) -> bool {
    let Some(e) = state::running(qp.mode) else {
        return false;
    };
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        if let Some(ep) = t.engine_mut().roce() {
            f(ep);
        }
    }))))
}

/// The engine's UD QP for `qp` (at `ibv_create_qp`).
pub fn create(qp: &Arc<QpShared>) {
    let (qpn, pd) = (qp.qpn, qp.pd);
    let qkey = qp.ud.as_ref().map_or(0, |u| u.qkey.load(Ordering::Relaxed));
    exec(qp, move |ep| {
        if let Err(e) = ep.create_ud_qp(qpn, pd, qkey, 0) {
            dbg_log!("UD QP {qpn:#x}: engine refused it: {e}");
        }
    });
}

/// A new Q_Key (`ibv_modify_qp` with `IBV_QP_QKEY`).
pub fn set_qkey(qp: &Arc<QpShared>, qkey: u32) {
    let qpn = qp.qpn;
    exec(qp, move |ep| {
        let _ = ep.set_ud_qkey(qpn, qkey);
    });
}

/// The QP went to RESET or ERR: the engine's queues are emptied (their completions land
/// nowhere: the shim flushed or discarded them already) and a fresh QP takes datagrams.
pub fn reset(qp: &Arc<QpShared>) {
    if let Some(u) = &qp.ud {
        u.engine_recvs.store(0, Ordering::Release);
        u.received.store(false, Ordering::Release);
    }
    let (qpn, pd) = (qp.qpn, qp.pd);
    exec(qp, move |ep| {
        let qkey = ep.ud_qkey(qpn).unwrap_or(0);
        let _ = ep.destroy_ud_qp(qpn);
        let _ = ep.create_ud_qp(qpn, pd, qkey, 0);
    });
}

/// `ibv_destroy_qp`.
pub fn destroy(qp: &Arc<QpShared>) {
    let qpn = qp.qpn;
    exec(qp, move |ep| {
        let _ = ep.destroy_ud_qp(qpn);
    });
}

/// Signals its channel when dropped (at the end of `complete`, whichever way it returns).
struct Done(Option<crossbeam_channel::Sender<()>>);

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = t.try_send(());
        }
    }
}

/// A work request the engine refused: its error completion.
fn refused(id: u64, err: PostError) {
    let Some(m) = crate::inflight::take(id) else {
        return;
    };
    dbg_log!("UD QP {:#x}: work request refused: {err}", m.qp.qpn);
    if m.recv {
        recv_done(&m.qp);
    }
    if m.owned_key != 0 {
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .deregister(m.owned_key);
    }
    let status = match err {
        PostError::InvalidLength => IBV_WC_LOC_LEN_ERR,
        _ => IBV_WC_LOC_QP_OP_ERR,
    };
    let wc = state::make_wc(
        &m,
        status,
        if m.recv { IBV_WC_RECV } else { IBV_WC_SEND },
        0,
        None,
    );
    if m.recv {
        m.qp.recv_cq.push(wc);
    } else {
        m.qp.send_cq.push(wc);
    }
}

fn one_sge(lkey: u32, addr: u64, len: u32) -> SgList {
    let mut s = SgList::new();
    s.push(Sge { lkey, addr, len });
    s
}

/// What a UD send carries.
pub enum Payload {
    /// The application's bytes, copied at post time.
    Copied(Vec<u8>),
    /// A message above the port's MTU: the engine sends nothing and never reads it.
    TooLong(SgList),
}

/// Post a datagram to `dest`.
pub fn post_send(
    st: &Arc<QpShared>,
    app_wr_id: u64,
    dest: UdDest,
    payload: Payload,
    imm: Option<u32>,
    signaled: bool,
    solicited: bool,
) {
    let (key, sgl) = match payload {
        Payload::Copied(data) => {
            let len = data.len() as u32;
            let mut mrs = global().mrs.write().unwrap_or_else(|p| p.into_inner());
            // In the QP's protection domain: the engine reads it under the QP's domain.
            let pd = mrs.domain_pd(st.pd).unwrap_or(st.pd);
            let key = mrs.register_owned(pd, BASE, data);
            (key, one_sge(key, BASE, len))
        }
        Payload::TooLong(sgl) => (0, sgl),
    };
    // To the device's own address the engine loops the datagram back at once; the send
    // returns once its completion is in the CQ, as the native device's (and a NIC's
    // loopback, within microseconds) is: rdma-core's tests fill a CQ that way and then
    // check its count.
    let own = state::running(st.mode).is_some_and(|e| e.ip == dest.ip);
    let (done_tx, done_rx) = if own {
        let (t, r) = crossbeam_channel::bounded(1);
        (Some(t), Some(r))
    } else {
        (None, None)
    };
    let id = crate::inflight::insert(WrMeta {
        app_wr_id,
        qp: st.clone(),
        recv: false,
        signaled,
        owned_key: key,
        ext: Ext::UdIbta(done_tx),
    });
    let wr = SendWr {
        wr_id: id,
        op: SendOp::Send { imm },
        sgl,
        // Unsignaled successes still free the copy (complete below).
        signaled: true,
        solicited,
        fence: false,
    };
    let qpn = st.qpn;
    if !exec(st, move |ep| {
        if let Err(e) = ep.post_ud_send(qpn, dest, wr) {
            refused(id, e);
        }
    }) {
        refused(id, PostError::UnknownStream);
    }
    if let Some(r) = done_rx {
        if r.recv_timeout(std::time::Duration::from_secs(1)).is_err() {
            dbg_log!("UD QP {qpn:#x}: a send to the own address did not complete within 1 s");
        }
    }
}

/// Receives the engine holds for `qp`, one fewer (a completion or refusal).
fn recv_done(qp: &QpShared) {
    if let Some(u) = &qp.ud {
        let _ = u
            .engine_recvs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
    }
}

/// Post a receive (id `app_wr_id`) with the application's scatter list. True when the
/// caller must wait until it is in place (`uc::barrier`): the QP's first receives, while the
/// engine holds none and none has completed yet — a datagram that arrives first is dropped,
/// and an application typically tells its peer it is ready (over TCP) right after posting
/// them. Later the engine runs the application's posts in order (a reply it sends goes out
/// after the receive it posted before), and with receives already posted an arriving
/// datagram takes an earlier one: no wait, which costs an engine round trip per post.
/// A full receive queue (`cap`, the `max_recv_wr` the QP reports) is ENOMEM
/// (ibv_post_recv(3)).
pub fn post_recv(st: &Arc<QpShared>, app_wr_id: u64, sgl: SgList, cap: usize) -> Result<bool, i32> {
    let Some(u) = st.ud.as_ref() else {
        return Err(libc::EINVAL);
    };
    let held = u
        .engine_recvs
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        })
        .map_err(|_| libc::ENOMEM)?;
    let empty = held == 0 && !u.received.load(Ordering::Acquire);
    let id = crate::inflight::insert(WrMeta {
        app_wr_id,
        qp: st.clone(),
        recv: true,
        signaled: true,
        owned_key: 0,
        ext: Ext::UdIbta(None),
    });
    let qpn = st.qpn;
    if !exec(st, move |ep| {
        if let Err(e) = ep.post_ud_recv(qpn, RecvWr { wr_id: id, sgl }) {
            refused(id, e);
        }
    }) {
        refused(id, PostError::UnknownStream);
    }
    Ok(empty)
}

/// A UD work request finished (engine thread).
pub fn complete(meta: WrMeta, c: Completion) {
    // The poster waits for a loopback send's completion (post_send): tell it once pushed.
    let _done = Done(match &meta.ext {
        Ext::UdIbta(Some(t)) => Some(t.clone()),
        _ => None,
    });
    if meta.recv {
        recv_done(&meta.qp);
        if let Some(u) = &meta.qp.ud {
            u.received.store(true, Ordering::Release);
        }
    }
    if meta.owned_key != 0 {
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .deregister(meta.owned_key);
    }
    if c.status == Status::Success && !meta.signaled {
        return;
    }
    let status = state::wc_status(c.status);
    if !meta.recv {
        let wc = state::make_wc(&meta, status, IBV_WC_SEND, c.byte_len, None);
        meta.qp.send_cq.push(wc);
        return;
    }
    let mut wc = state::make_wc(&meta, status, IBV_WC_RECV, c.byte_len, c.imm);
    if let Some(src) = c.ud_src {
        wc.src_qp = src.qpn;
        wc.wc_flags |= IBV_WC_GRH;
        wc.sl = crate::ud::ROCE_PKT_IPV4;
    }
    meta.qp.recv_cq.push(wc);
}

/// (source address, TTL, TOS) of a RoCEv2 GRH area (the IPv4 header in its last 20 bytes),
/// if it holds one: version 4, header length 5 words, a valid checksum.
pub fn ipv4_of_grh(g: &[u8; 40]) -> Option<(Ipv4Addr, u8, u8)> {
    let ip = &g[20..];
    if ip[0] != 0x45 || ferroce_transport::roce::wire::ipv4_checksum(ip) != 0 {
        return None;
    }
    Some((Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]), ip[8], ip[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_area_with_an_ipv4_header_names_its_source() {
        let h = ferroce_transport::roce::wire::ipv4_udp_headers(
            Ipv4Addr::new(198, 18, 0, 12),
            Ipv4Addr::new(198, 18, 0, 11),
            0xc001,
            4791,
            100,
        );
        let mut g = [0u8; 40];
        g[20..].copy_from_slice(&h[..20]);
        assert_eq!(
            ipv4_of_grh(&g),
            Some((Ipv4Addr::new(198, 18, 0, 12), 64, 2))
        );
        g[30] ^= 1; // checksum no longer valid
        assert_eq!(ipv4_of_grh(&g), None);
        assert_eq!(ipv4_of_grh(&[0u8; 40]), None);
    }
}
