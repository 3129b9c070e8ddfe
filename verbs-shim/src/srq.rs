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
//!
//! An XRC target QP's slots start bound to no SRQ: the message's first 4 bytes (the XRC
//! header, spec/transport.md §3.7) name the SRQ of the QP's domain, chunks that arrive
//! before them are kept until then, and the completion goes to that SRQ's CQ.

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
    /// An XRC SRQ: the CQ its completions go to and its domain (`xrc::domain_id`).
    pub xrc: Option<(Arc<crate::state::CqState>, usize)>,
}

struct Slot {
    /// The SRQ it takes its entry from; for an XRC target, None until the message's XRC
    /// header names it.
    srq: Option<Arc<SrqState>>,
    /// An XRC target's slot: the domain (`xrc::domain_id`) the named SRQ must belong to.
    xrc: Option<usize>,
    /// An XRC target's chunks that arrived before the header (offset past it, bytes).
    early: Vec<(u64, Vec<u8>)>,
    bound: Option<SrqWr>,
    overflow: bool,
}

/// Bytes an XRC target keeps for one message before its header arrives; a chunk beyond fails
/// the message (a responder error, spec/transport.md §3.7), so a peer cannot make it hold
/// more.
const EARLY_MAX: usize = 64 << 20;

#[derive(Default)]
pub struct SrqGlobal {
    slots: Mutex<HashMap<u32, Slot>>,
    next_slot: AtomicU32,
}

fn new_slot(srq: Option<Arc<SrqState>>, xrc: Option<usize>) -> u32 {
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
            srq,
            xrc,
            early: Vec::new(),
            bound: None,
            overflow: false,
        },
    );
    id
}

/// A virtual receive for `qp` (registered in the work-request map).
pub fn virtual_recv(qp: &Arc<QpShared>) -> Option<RecvWr> {
    let slot = match (&qp.srq, &qp.xrc) {
        (Some(srq), _) => new_slot(Some(srq.clone()), None),
        (None, Some(crate::xrc::XrcRole::Recv(x))) => {
            new_slot(None, Some(crate::xrc::domain_id(x)))
        }
        _ => return None,
    };
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
    let Some(domain) = s.xrc else {
        return place_bound(t, s, off, data);
    };
    // An XRC target: the message starts with the XRC header (the target SRQ's number).
    let hdr = crate::xrc::HDR as u64;
    if s.srq.is_none() {
        if off != 0 {
            // A later chunk before the first: kept until the header says where it goes.
            let held: usize = s.early.iter().map(|(_, d)| d.len()).sum();
            if off < hdr || held + data.len() > EARLY_MAX {
                return Err(MemError::OutOfBounds);
            }
            s.early.push((off - hdr, data.to_vec()));
            return Ok(());
        }
        let Some(srq) = data
            .get(..crate::xrc::HDR)
            .and_then(|h| crate::xrc::srq_by_num(u32::from_be_bytes(h.try_into().ok()?), domain))
        else {
            dbg_log!("XRC message for no SRQ of the target's domain");
            return Err(MemError::AccessDenied);
        };
        s.srq = Some(srq);
        place_bound(t, s, 0, &data[crate::xrc::HDR..])?;
        for (o, d) in std::mem::take(&mut s.early) {
            place_bound(t, s, o, &d)?;
        }
        return Ok(());
    }
    if off == 0 {
        // The first chunk again (a resend): its bytes past the header, same place.
        return place_bound(t, s, 0, data.get(crate::xrc::HDR..).unwrap_or(&[]));
    }
    place_bound(t, s, off.saturating_sub(hdr), data)
}

/// Write into the entry of the slot's SRQ (binding the next one on the first byte).
fn place_bound(t: &mut MrTable, s: &mut Slot, off: u64, data: &[u8]) -> Result<(), MemError> {
    let Some(srq) = &s.srq else {
        return Ok(());
    };
    if srq.dead.load(Ordering::Relaxed) {
        return Ok(());
    }
    if s.bound.is_none() {
        s.bound = lock(&srq.q).pop_front();
        if s.bound.is_none() {
            dbg_log!("SRQ empty when a message arrived");
            return Err(MemError::AccessDenied);
        }
    }
    if s.overflow || data.is_empty() {
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
    // An XRC SRQ's completions go to its own CQ (the target QP has none).
    let cq = s
        .as_ref()
        .and_then(|s| s.srq.as_ref())
        .and_then(|q| q.xrc.as_ref())
        .map(|(cq, _)| cq.clone())
        .unwrap_or_else(|| qp.recv_cq.clone());
    let hdr = if matches!(qp.xrc, Some(crate::xrc::XrcRole::Recv(_))) {
        crate::xrc::HDR as u32
    } else {
        0
    };
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
            cq.push(state::make_wc(
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
        Some(Slot { srq: Some(srq), .. }) => (lock(&srq.q).pop_front(), false),
        Some(Slot { srq: None, .. }) => (None, false),
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
    cq.push(state::make_wc(
        &m,
        status,
        opcode,
        c.byte_len.saturating_sub(hdr),
        c.imm,
    ));
    // Replace the used virtual receive.
    let conn = lock(&qp.inner).conn;
    if let (Some(conn), Some(wr)) = (conn, virtual_recv(qp)) {
        let id = wr.wr_id;
        if let Err(e) = t.post_recv(conn, qp.qpn, wr) {
            state::refused(id, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce_transport::keys::KeyGen;
    use ferroce_transport::mem::access;

    fn xrc_srq(domain: usize) -> Arc<SrqState> {
        Arc::new(SrqState {
            q: Mutex::new(VecDeque::new()),
            max_wr: 4,
            max_sge: 1,
            limit: AtomicU32::new(0),
            dead: Default::default(),
            xrc: Some((crate::ud::dead_cq(), domain)),
        })
    }

    /// An XRC target's slot: the header in the first chunk names the SRQ, a chunk that came
    /// before it is kept and placed after it, and the header's bytes are not written; a
    /// header naming an SRQ of another domain is refused.
    #[test]
    fn an_xrc_slot_binds_to_the_srq_its_header_names_even_when_chunk_0_is_late() {
        let mut buf = vec![0u8; 32];
        let mut t = MrTable::new(KeyGen::deterministic(9));
        let k = t
            .register_app(1, buf.as_mut_ptr() as u64, 32, access::LOCAL_WRITE)
            .unwrap();
        let (mine, theirs) = (0x5151_0000usize, 0x5252_0000usize);
        let (q, other) = (xrc_srq(mine), xrc_srq(theirs));
        crate::xrc::register_srq(0x00ab_cd01, &q);
        crate::xrc::register_srq(0x00ab_cd02, &other);
        let mut sgl = SgList::new();
        sgl.push(Sge {
            lkey: k,
            addr: buf.as_mut_ptr() as u64,
            len: 32,
        });
        lock(&q.q).push_back(SrqWr { app_wr_id: 7, sgl });

        let slot = new_slot(None, Some(mine));
        let at = |off: u64| ((slot as u64) << 32) | off;
        // Chunk 1 (message offset 8 = header + 4 bytes of data) first, then chunk 0.
        place(&mut t, at(8), b"WXYZ").unwrap();
        assert_eq!(lock(&q.q).len(), 1, "no SRQ entry taken before the header");
        place(
            &mut t,
            at(0),
            &[0x00, 0xab, 0xcd, 0x01, b'a', b'b', b'c', b'd'],
        )
        .unwrap();
        assert_eq!(&buf[..8], b"abcdWXYZ");
        assert!(lock(&q.q).is_empty(), "the named SRQ's entry was taken");
        assert_eq!(take_slot(slot), Some(7));

        // The header names an SRQ of another domain, or none: refused, nothing taken.
        let slot = new_slot(None, Some(mine));
        let hdr = [0x00, 0xab, 0xcd, 0x02, 1];
        assert_eq!(
            place(&mut t, (slot as u64) << 32, &hdr),
            Err(MemError::AccessDenied)
        );
        let hdr = [0x00, 0x00, 0x00, 0x09, 1];
        assert_eq!(
            place(&mut t, (slot as u64) << 32, &hdr),
            Err(MemError::AccessDenied)
        );
        crate::xrc::forget_srq(0x00ab_cd01);
        crate::xrc::forget_srq(0x00ab_cd02);
    }
}
