//! Work requests the engine holds, per QP: what each completion must become.
//!
//! Each QP has its own table (`QpShared::wrs`), so application threads posting on different
//! QPs never share a lock, and the engine thread completing one QP's work does not stop
//! another QP's posts. The transport's `wr_id` names the table: its top 32 bits are the QP's
//! slot in a registry of live QPs and that slot's generation, the low 32 bits a sequence of
//! the QP. The registry is written when a QP is created or destroyed and read by the engine
//! thread for each completion (a read lock no application thread takes on the data path).
//! A completion for a QP destroyed meanwhile, or whose slot now belongs to a newer QP (other
//! generation), finds nothing and completes into nothing, as verbs wants for work in flight on
//! a destroyed QP.
//!
//! The table also counts the application's outstanding sends and receives, so a post beyond
//! the QP's `max_send_wr` / `max_recv_wr` is `ENOMEM` (ibv_post_send(3)) instead of growing a
//! queue without bound. A slot frees when the engine completes the work request, which is
//! never later than a NIC would free it (when the application polls the completion).

use crate::state::{lock, Ext, QpShared, WrMeta};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, Weak};

/// One QP's work requests in flight.
#[derive(Default)]
pub struct QpWrs {
    map: FxHashMap<u64, WrMeta>,
    /// The application's own sends and receives among them (`Ext::Plain`).
    sends: u32,
    recvs: u32,
}

/// Where a QP's ids come from: its registry slot and generation (the id's top 32 bits) and
/// its next sequence number.
#[derive(Default)]
pub struct WrIds {
    base: AtomicU32,
    seq: AtomicU32,
}

const SLOT_BITS: u32 = 20;
const GEN_MASK: u32 = (1 << (32 - SLOT_BITS)) - 1;

#[derive(Default)]
struct Registry {
    /// (generation, QP) per slot.
    slots: Vec<(u32, Weak<QpShared>)>,
    free: Vec<u32>,
}

fn registry() -> &'static RwLock<Registry> {
    static R: RwLock<Registry> = RwLock::new(Registry {
        slots: Vec::new(),
        free: Vec::new(),
    });
    &R
}

/// Give a new QP its slot (once, right after it is made).
pub fn register(qp: &Arc<QpShared>) {
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    let slot = match r.free.pop() {
        Some(s) => s,
        None => {
            // Slot 0 stays unused, so no id of a registered QP is below 2^32.
            if r.slots.is_empty() {
                r.slots.push((0, Weak::new()));
            }
            r.slots.push((0, Weak::new()));
            (r.slots.len() - 1) as u32
        }
    };
    if slot >= 1 << SLOT_BITS {
        // A million QPs at once: ids of the newest would alias; refuse to track them rather
        // than misroute completions (their work completes into nothing).
        return;
    }
    let e = &mut r.slots[slot as usize];
    e.0 = (e.0 + 1) & GEN_MASK;
    e.1 = Arc::downgrade(qp);
    qp.ids
        .base
        .store(slot << (32 - SLOT_BITS) | e.0, Ordering::Relaxed);
}

/// Free a destroyed QP's slot; its work in flight is forgotten (completes into nothing).
pub fn unregister(qp: &QpShared) -> Vec<(u64, WrMeta)> {
    let base = qp.ids.base.swap(0, Ordering::Relaxed);
    if base != 0 {
        let slot = base >> (32 - SLOT_BITS);
        let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = r.slots.get_mut(slot as usize) {
            e.1 = Weak::new();
            r.free.push(slot);
        }
    }
    drain(qp)
}

/// Shim-owned copies (inline sends) of destroyed QPs' work in flight, by transport `wr_id`:
/// the QP's stream stays in the engine and may still resend from them, so each stays
/// registered until its work request's completion comes (then [`take_orphan`] frees it).
/// `ORPHANS_N` spares the completion path the lock while there are none (the usual case).
static ORPHANS: std::sync::Mutex<Vec<(u64, u32)>> = std::sync::Mutex::new(Vec::new());
static ORPHANS_N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Keep the owned copies among a destroyed QP's forgotten work (`unregister`'s result).
pub fn orphan_copies(metas: &[(u64, WrMeta)]) {
    let mut o = lock(&ORPHANS);
    o.extend(
        metas
            .iter()
            .filter(|(_, m)| m.owned_key != 0)
            .map(|(id, m)| (*id, m.owned_key)),
    );
    ORPHANS_N.store(o.len(), Ordering::Release);
}

/// The owned copy of a destroyed QP's work request `id`, now complete: its key, to free.
pub fn take_orphan(id: u64) -> Option<u32> {
    if ORPHANS_N.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut o = lock(&ORPHANS);
    let i = o.iter().position(|(x, _)| *x == id)?;
    let (_, key) = o.swap_remove(i);
    ORPHANS_N.store(o.len(), Ordering::Release);
    Some(key)
}

/// Keep `meta` for its completion (in the table of `meta.qp`); the transport's `wr_id`.
pub fn insert(meta: WrMeta) -> u64 {
    let qp = meta.qp.clone();
    let id = (qp.ids.base.load(Ordering::Relaxed) as u64) << 32
        | qp.ids.seq.fetch_add(1, Ordering::Relaxed) as u64;
    let mut t = lock(&qp.wrs);
    if matches!(meta.ext, Ext::Plain) {
        if meta.recv {
            t.recvs += 1;
        } else {
            t.sends += 1;
        }
    }
    t.map.insert(id, meta);
    id
}

/// Whether `qp` may take one more application send (`recv` false) or receive within `cap`.
pub fn room(qp: &QpShared, recv: bool, cap: u32) -> bool {
    let t = lock(&qp.wrs);
    (if recv { t.recvs } else { t.sends }) < cap
}

fn qp_of(id: u64) -> Option<Arc<QpShared>> {
    let top = (id >> 32) as u32;
    let (slot, gen) = (top >> (32 - SLOT_BITS), top & GEN_MASK);
    let r = registry().read().unwrap_or_else(|p| p.into_inner());
    let e = r.slots.get(slot as usize)?;
    if e.0 != gen {
        return None;
    }
    e.1.upgrade()
}

fn uncount(t: &mut QpWrs, m: &WrMeta) {
    if matches!(m.ext, Ext::Plain) {
        if m.recv {
            t.recvs = t.recvs.saturating_sub(1);
        } else {
            t.sends = t.sends.saturating_sub(1);
        }
    }
}

/// The work request `id` names, taken out of its table (engine thread, on its completion).
pub fn take(id: u64) -> Option<WrMeta> {
    let qp = qp_of(id)?;
    let mut t = lock(&qp.wrs);
    let m = t.map.remove(&id)?;
    uncount(&mut t, &m);
    Some(m)
}

/// Whether `id` is still in flight.
pub fn contains(id: u64) -> bool {
    qp_of(id).is_some_and(|qp| lock(&qp.wrs).map.contains_key(&id))
}

/// Forget one work request the caller just inserted (its post failed).
pub fn remove(id: u64) {
    take(id);
}

/// Every work request `qp` holds, oldest first, taken out of its table.
pub fn drain(qp: &QpShared) -> Vec<(u64, WrMeta)> {
    let mut t = lock(&qp.wrs);
    t.sends = 0;
    t.recvs = 0;
    let mut v: Vec<(u64, WrMeta)> = t.map.drain().collect();
    drop(t);
    // The sequence (low 32 bits) orders them; it wraps only after 4 G posts on one QP.
    v.sort_by_key(|(k, _)| *k as u32);
    v
}
