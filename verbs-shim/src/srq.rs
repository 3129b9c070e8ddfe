//! Shared receive queues.
//!
//! The transport has a receive queue per stream, not a shared one. A QP attached to an SRQ
//! keeps `SLOTS_PER_QP` *virtual* receives posted on its stream: each names one scatter
//! element under the reserved key [`SRQ_VKEY`] at address `slot << 32` (2 GiB long). When
//! the first byte of a message lands in a slot, the slot takes the SRQ's next entry (the
//! application's `ibv_recv_wr`, in posting order) and every write is redirected, checked,
//! into that entry's scatter list ([`place`]); the completion reports the entry's `wr_id`
//! on the receiving QP's CQ, and a new virtual receive replaces the used one. So entries are
//! consumed by whichever QP receives first, as with a NIC's SRQ, without copies, and an
//! entry the QP never used is not flushed when the QP fails (verbs leaves it in the SRQ).
//! A message longer than its entry completes with `IBV_WC_LOC_LEN_ERR`; one arriving while
//! the SRQ is empty fails as a local protection error (a NIC would RNR-NAK it).

use crate::mr::MrTable;
use crate::state::{self, dbg_log, global, lock, Ext, QpShared, WrMeta};
use crate::sys;
use ferroce_transport::mem::MemError;
use ferroce_transport::{Completion, RecvWr, SgList, Sge, Status, Transport};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The key of virtual receives (application keys are below 2^31).
pub const SRQ_VKEY: u32 = 0xffff_fff0;
/// Virtual receives each SRQ-attached QP keeps posted.
pub const SLOTS_PER_QP: u32 = 64;
const SLOT_LEN: u32 = 0x7fff_ffff;

/// An application receive waiting in an SRQ.
pub struct SrqWr {
    pub app_wr_id: u64,
    pub sgl: SgList,
}

pub struct SrqState {
    pub q: Mutex<VecDeque<SrqWr>>,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: AtomicU32,
    /// The application destroyed the SRQ (it is tearing down): what still arrives for its
    /// QPs is discarded and acknowledged, as a NIC whose QPs are gone would not answer with
    /// an error the sender sees at once.
    pub dead: std::sync::atomic::AtomicBool,
}

struct Slot {
    srq: Arc<SrqState>,
    bound: Option<SrqWr>,
    overflow: bool,
}

#[derive(Default)]
pub struct SrqGlobal {
    slots: Mutex<HashMap<u32, Slot>>,
    next_slot: AtomicU32,
}

fn new_slot(srq: &Arc<SrqState>) -> u32 {
    let g = &global().srq;
    let id = loop {
        let id = g.next_slot.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if id != 0 {
            break id;
        }
    };
    lock(&g.slots).insert(
        id,
        Slot {
            srq: srq.clone(),
            bound: None,
            overflow: false,
        },
    );
    id
}

/// A virtual receive for `qp` (registered in the work-request map).
pub fn virtual_recv(qp: &Arc<QpShared>) -> Option<RecvWr> {
    let srq = qp.srq.as_ref()?;
    let slot = new_slot(srq);
    let id = crate::inflight::insert(WrMeta {
        app_wr_id: 0,
        qp: qp.clone(),
        recv: true,
        signaled: true,
        owned_key: 0,
        ext: Ext::SrqSlot(slot),
    });
    let mut sgl = SgList::new();
    sgl.push(Sge {
        lkey: SRQ_VKEY,
        addr: (slot as u64) << 32,
        len: SLOT_LEN,
    });
    Some(RecvWr { wr_id: id, sgl })
}

/// Redirect a write into virtual slot memory to the SRQ entry the slot is bound to (called
/// by the engine's memory with the MR table locked).
pub fn place(t: &mut MrTable, addr: u64, data: &[u8]) -> Result<(), MemError> {
    let slot = (addr >> 32) as u32;
    let off = addr & 0xffff_ffff;
    let mut slots = lock(&global().srq.slots);
    let Some(s) = slots.get_mut(&slot) else {
        return Ok(()); // a late copy of a finished message
    };
    if s.srq.dead.load(Ordering::Relaxed) {
        return Ok(());
    }
    if s.bound.is_none() {
        s.bound = lock(&s.srq.q).pop_front();
        if s.bound.is_none() {
            dbg_log!("SRQ empty when a message arrived");
            return Err(MemError::AccessDenied);
        }
    }
    if s.overflow {
        return Ok(());
    }
    let b = s.bound.as_ref().expect("bound above");
    let total: u64 = b.sgl.iter().map(|x| x.len as u64).sum();
    if off + data.len() as u64 > total {
        s.overflow = true;
        return Ok(());
    }
    match t.write_sgl(&b.sgl, off, data) {
        // The application deregistered the entry's memory while tearing down.
        Err(MemError::UnknownKey) => Ok(()),
        r => r,
    }
}

/// The application `wr_id` a finished slot consumed (binding one now for messages that
/// wrote nothing), or None when the slot took no entry.
pub fn take_slot(slot: u32) -> Option<u64> {
    lock(&global().srq.slots)
        .remove(&slot)
        .and_then(|s| s.bound)
        .map(|b| b.app_wr_id)
}

/// A virtual receive finished (engine thread): report it as the SRQ entry it used and post
/// a replacement.
pub fn complete(meta: &WrMeta, slot: u32, c: Completion, t: &mut dyn Transport) {
    let s = lock(&global().srq.slots).remove(&slot);
    let qp = &meta.qp;
    if c.status == Status::Flushed {
        // The stream failed: an entry the message took is reported, the rest stay.
        if let Some(b) = s.and_then(|s| s.bound) {
            let m = WrMeta {
                app_wr_id: b.app_wr_id,
                qp: qp.clone(),
                recv: true,
                signaled: true,
                owned_key: 0,
                ext: Ext::Plain,
            };
            qp.recv_cq.push(state::make_wc(
                &m,
                sys::IBV_WC_WR_FLUSH_ERR,
                sys::IBV_WC_RECV,
                0,
                None,
            ));
        }
        return;
    }
    let (bound, overflow) = match s {
        Some(Slot {
            bound: Some(b),
            overflow,
            ..
        }) => (Some(b), overflow),
        Some(Slot { srq, .. }) => (lock(&srq.q).pop_front(), false),
        None => (None, false),
    };
    let Some(b) = bound else {
        dbg_log!("QP {:#x}: a message found the SRQ empty", qp.qpn);
        return;
    };
    let m = WrMeta {
        app_wr_id: b.app_wr_id,
        qp: qp.clone(),
        recv: true,
        signaled: true,
        owned_key: 0,
        ext: Ext::Plain,
    };
    let status = match (c.status, overflow) {
        (Status::Success, true) => sys::IBV_WC_LOC_LEN_ERR,
        (Status::Success, false) => sys::IBV_WC_SUCCESS,
        (Status::LocalProtection, _) => sys::IBV_WC_LOC_PROT_ERR,
        (Status::LocalLength, _) => sys::IBV_WC_LOC_LEN_ERR,
        _ => sys::IBV_WC_GENERAL_ERR,
    };
    let opcode = match c.op {
        ferroce_transport::CompletionOp::RecvWriteImm => sys::IBV_WC_RECV_RDMA_WITH_IMM,
        _ => sys::IBV_WC_RECV,
    };
    qp.recv_cq
        .push(state::make_wc(&m, status, opcode, c.byte_len, c.imm));
    // Replace the used virtual receive.
    let conn = lock(&qp.inner).conn;
    if let (Some(conn), Some(wr)) = (conn, virtual_recv(qp)) {
        let id = wr.wr_id;
        if let Err(e) = t.post_recv(conn, qp.qpn, wr) {
            state::refused(id, e);
        }
    }
}
