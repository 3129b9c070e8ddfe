//! The memory-region table: [`Memory`] over the application's real registered memory.
//!
//! This is the one module of the shim that reads and writes application memory through raw
//! pointers. Every access is checked first against a registered range (key, bounds with
//! overflow checks, access rights, protection domain), and only then copied with
//! `ptr::copy_nonoverlapping`; no Rust reference to application memory is ever created (the
//! application and the engine thread may touch it concurrently, as a NIC's DMA would).
//!
//! Besides application regions the table holds shim-owned buffers (the copies of inline
//! sends), which are ordinary `Vec<u8>`s.

use ferroce_transport::keys::KeyGen;
use ferroce_transport::mem::{access, AtomicOp, MemError, Memory};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One registered range.
#[derive(Debug)]
enum Backing {
    /// Application memory [addr, addr + len), registered with `ibv_reg_mr`.
    App,
    /// A shim-owned buffer appearing at `addr` (an inline send's copy).
    Owned(Vec<u8>),
}

#[derive(Debug)]
struct Region {
    pd: u32,
    /// The address work requests name (verbs' iova; the buffer's address unless registered
    /// with `ibv_reg_mr_iova2`).
    addr: u64,
    /// Where those bytes are in this process.
    ptr: u64,
    len: u64,
    access: u32,
    backing: Backing,
}

impl Region {
    /// Offset of [addr, addr + len) inside the region, checked (no overflow, inside).
    fn offset(&self, addr: u64, len: u64) -> Result<u64, MemError> {
        let start = addr.checked_sub(self.addr).ok_or(MemError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > self.len {
            return Err(MemError::OutOfBounds);
        }
        Ok(start)
    }
}

/// The table of regions; lkey == rkey.
#[derive(Debug)]
pub struct MrTable {
    regions: HashMap<u32, Region>,
    keys: KeyGen,
    /// Per-QP protection domains (see [`MrTable::new_domain`]).
    domains: HashMap<u32, Domain>,
    next_domain: u32,
    /// The PDs of each XRC domain's SRQs (`xrc::domain_id` → PD → SRQs of that PD): what
    /// an XRC target's remote accesses are checked against ([`MrTable::new_xrc_domain`]).
    xrc_pds: HashMap<usize, HashMap<u32, u32>>,
}

/// What a QP allows remote peers: its PD and its `qp_access_flags`. The transport knows a
/// stream's "pd" only as the number the shim gave it, and hands it to every remote access
/// check; the shim gives each QP a number of its own, so those checks see the QP's rights.
#[derive(Debug, Clone, Copy)]
struct Domain {
    pd: u32,
    access: u32,
    /// An XRC target's: the XRC domain whose SRQs' PDs its remote accesses may use.
    xrc: Option<usize>,
}

/// Domain numbers have the top bit set; PD handles (small counters) never do.
const DOMAIN_BIT: u32 = 0x8000_0000;
const REMOTE_RIGHTS: u32 = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// The table shared by the application's threads and the engine's.
pub type SharedMrs = Arc<RwLock<MrTable>>;

impl MrTable {
    /// A table whose keys come from `keys`: seeded from the OS in the shim, so keys are
    /// unpredictable and those of two processes (or two runs) unrelated
    /// (spec/security.md §1.1).
    pub fn new(keys: KeyGen) -> Self {
        MrTable {
            regions: HashMap::default(),
            keys,
            domains: HashMap::default(),
            next_domain: 0,
            xrc_pds: HashMap::default(),
        }
    }

    fn new_key(&mut self) -> u32 {
        loop {
            let k = self.keys.next_key();
            if !self.regions.contains_key(&k) {
                return k;
            }
        }
    }

    /// Register application memory [addr, addr + len); returns the key.
    ///
    /// The caller (`ibv_reg_mr`) promises, as verbs does, that the range stays mapped until
    /// [`MrTable::deregister`]: the application owns that contract, exactly as with a NIC.
    pub fn register_app(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Option<u32> {
        self.register_app_iova(pd, addr, addr, len, access)
    }

    /// Register application memory at `ptr` that work requests name as `iova`.
    pub fn register_app_iova(
        &mut self,
        pd: u32,
        ptr: u64,
        iova: u64,
        len: u64,
        access: u32,
    ) -> Option<u32> {
        ptr.checked_add(len)?;
        iova.checked_add(len)?;
        let key = self.new_key();
        self.regions.insert(
            key,
            Region {
                pd,
                addr: iova,
                ptr,
                len,
                access,
                backing: Backing::App,
            },
        );
        Some(key)
    }

    /// Register a shim-owned copy of `data` appearing at `addr` (local read only).
    pub fn register_owned(&mut self, pd: u32, addr: u64, data: Vec<u8>) -> u32 {
        let key = self.new_key();
        self.regions.insert(
            key,
            Region {
                pd,
                addr,
                ptr: 0,
                len: data.len() as u64,
                access: 0,
                backing: Backing::Owned(data),
            },
        );
        key
    }

    /// A shim-owned buffer the engine may write (a UD receive buffer): local write allowed.
    pub fn register_owned_rw(&mut self, pd: u32, addr: u64, data: Vec<u8>) -> u32 {
        let key = self.register_owned(pd, addr, data);
        if let Some(r) = self.regions.get_mut(&key) {
            r.access = access::LOCAL_WRITE;
        }
        key
    }

    /// Local write of `data` at `addr` under `lkey` (checked as the engine's writes are).
    pub fn write_local_checked(
        &mut self,
        lkey: u32,
        addr: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let (_, off) = self.check(None, lkey, addr, data.len() as u64, access::LOCAL_WRITE)?;
        let r = self.regions.get_mut(&lkey).ok_or(MemError::UnknownKey)?;
        MrTable::copy_in(r, off, data);
        Ok(())
    }

    /// Local read of `buf.len()` bytes at `addr` under `lkey`.
    pub fn read_local_checked(&self, lkey: u32, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let (r, off) = self.check(None, lkey, addr, buf.len() as u64, 0)?;
        MrTable::copy_out(r, off, buf);
        Ok(())
    }

    /// Write `data` at message offset `off` of a scatter/gather list (each piece checked).
    pub fn write_sgl(
        &mut self,
        sgl: &[ferroce_transport::Sge],
        mut off: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let mut done = 0usize;
        for s in sgl {
            if done == data.len() {
                break;
            }
            if off >= s.len as u64 {
                off -= s.len as u64;
                continue;
            }
            let n = ((s.len as u64 - off) as usize).min(data.len() - done);
            self.write_local_checked(s.lkey, s.addr + off, &data[done..done + n])?;
            done += n;
            off = 0;
        }
        if done == data.len() {
            Ok(())
        } else {
            Err(MemError::OutOfBounds)
        }
    }

    /// `ibv_rereg_mr` of application region `key`, keeping its key: any of a new protection
    /// domain, a new range (`ptr`, `len`; work requests then name `ptr`, as after
    /// `ibv_reg_mr`) and new access rights. All or nothing: `false` (and no change) when `key`
    /// is not an application region or the new range overflows.
    pub fn reregister(
        &mut self,
        key: u32,
        pd: Option<u32>,
        range: Option<(u64, u64)>,
        access: Option<u32>,
    ) -> bool {
        let Some(r) = self.regions.get_mut(&key) else {
            return false;
        };
        if !matches!(r.backing, Backing::App) {
            return false;
        }
        if let Some((ptr, len)) = range {
            if ptr.checked_add(len).is_none() {
                return false;
            }
            r.ptr = ptr;
            r.addr = ptr;
            r.len = len;
        }
        if let Some(pd) = pd {
            r.pd = pd;
        }
        if let Some(a) = access {
            r.access = a;
        }
        true
    }

    /// A domain for a new QP of PD `pd` allowing `access` (`qp_access_flags`); the number to
    /// give the transport as the stream's PD.
    pub fn new_domain(&mut self, pd: u32, access: u32) -> u32 {
        self.insert_domain(Domain {
            pd,
            access,
            xrc: None,
        })
    }

    /// A domain for a new XRC target QP of XRC domain `xrc` (`xrc::domain_id`). The target
    /// has no PD of its own: a remote access is allowed to an MR of the PD of any live SRQ
    /// of the XRC domain ([`MrTable::add_xrc_pd`]; spec/transport.md §3.7, XRC-3), with the
    /// QP's `qp_access_flags` as for any QP.
    pub fn new_xrc_domain(&mut self, xrc: usize, access: u32) -> u32 {
        self.insert_domain(Domain {
            pd: 0,
            access,
            xrc: Some(xrc),
        })
    }

    fn insert_domain(&mut self, d: Domain) -> u32 {
        loop {
            self.next_domain = self.next_domain.wrapping_add(1) & !DOMAIN_BIT;
            let id = DOMAIN_BIT | self.next_domain;
            if let std::collections::hash_map::Entry::Vacant(e) = self.domains.entry(id) {
                e.insert(d);
                return id;
            }
        }
    }

    /// An SRQ of PD `pd` joined XRC domain `xrc`.
    pub fn add_xrc_pd(&mut self, xrc: usize, pd: u32) {
        *self.xrc_pds.entry(xrc).or_default().entry(pd).or_insert(0) += 1;
    }

    /// An SRQ of PD `pd` left XRC domain `xrc`.
    pub fn remove_xrc_pd(&mut self, xrc: usize, pd: u32) {
        if let Some(m) = self.xrc_pds.get_mut(&xrc) {
            if let Some(n) = m.get_mut(&pd) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&pd);
                }
            }
            if m.is_empty() {
                self.xrc_pds.remove(&xrc);
            }
        }
    }

    /// `ibv_modify_qp` with IBV_QP_ACCESS_FLAGS.
    pub fn set_domain_access(&mut self, id: u32, access: u32) {
        if let Some(d) = self.domains.get_mut(&id) {
            d.access = access;
        }
    }

    /// The protection domain of a QP's domain (`None` for an unknown one).
    pub fn domain_pd(&self, id: u32) -> Option<u32> {
        self.domains.get(&id).map(|d| d.pd)
    }

    /// The QP's `qp_access_flags` (0 for an unknown domain).
    pub fn domain_access(&self, id: u32) -> u32 {
        self.domains.get(&id).map(|d| d.access).unwrap_or(0)
    }

    /// The QP is gone: remote requests for its stream find no domain (WrongDomain).
    pub fn drop_domain(&mut self, id: u32) {
        self.domains.remove(&id);
    }

    pub fn deregister(&mut self, key: u32) -> bool {
        self.regions.remove(&key).is_some()
    }

    pub fn len(&self) -> usize {
        self.regions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    fn check(
        &self,
        pd: Option<u32>,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&Region, u64), MemError> {
        let r = self.regions.get(&key).ok_or(MemError::UnknownKey)?;
        let off = r.offset(addr, len)?;
        if let Some(pd) = pd {
            let want = if pd & DOMAIN_BIT != 0 {
                // A QP's domain: its PD, and a remote right the QP does not grant is refused
                // whatever the MR allows (ibv_modify_qp(3), qp_access_flags).
                let d = self.domains.get(&pd).ok_or(MemError::WrongDomain)?;
                if need & REMOTE_RIGHTS & !d.access != 0 {
                    return Err(MemError::AccessDenied);
                }
                if let Some(x) = d.xrc {
                    // An XRC target: the MR's PD must be that of an SRQ of its XRC domain.
                    if !self.xrc_pds.get(&x).is_some_and(|m| m.contains_key(&r.pd)) {
                        return Err(MemError::WrongDomain);
                    }
                    r.pd
                } else {
                    d.pd
                }
            } else {
                pd
            };
            if r.pd != want {
                return Err(MemError::WrongDomain);
            }
        }
        if r.access & need != need {
            return Err(MemError::AccessDenied);
        }
        Ok((r, off))
    }

    fn copy_out(r: &Region, off: u64, buf: &mut [u8]) {
        match &r.backing {
            Backing::Owned(v) => {
                buf.copy_from_slice(&v[off as usize..off as usize + buf.len()]);
            }
            Backing::App => {
                // SAFETY: `check` proved [r.addr + off, + buf.len()) lies inside a range the
                // application registered and keeps mapped while registered (the verbs
                // contract); the destination is our own slice; the ranges cannot overlap
                // (buf is shim memory). No reference to application memory is formed.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (r.ptr + off) as usize as *const u8,
                        buf.as_mut_ptr(),
                        buf.len(),
                    )
                }
            }
        }
    }

    fn copy_in(r: &mut Region, off: u64, data: &[u8]) {
        match &mut r.backing {
            Backing::Owned(v) => {
                v[off as usize..off as usize + data.len()].copy_from_slice(data);
            }
            Backing::App => {
                // SAFETY: as in `copy_out`: the destination range was bounds-checked against
                // a registered, mapped application range; the source is our own slice.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        (r.ptr + off) as usize as *mut u8,
                        data.len(),
                    )
                }
            }
        }
    }
}

/// Copy `len` bytes of unregistered application memory at `addr` (inline sends: verbs lets
/// the application name any readable memory and reuse it as soon as post_send returns).
///
/// # Safety
/// `addr .. addr + len` must be readable memory of this process (the verbs contract for
/// `IBV_SEND_INLINE` scatter/gather entries).
pub unsafe fn copy_inline(addr: u64, len: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + len, 0);
    // SAFETY: the caller guarantees the source is readable; the destination is the `len`
    // bytes just added to `out`.
    unsafe {
        std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr().add(start), len)
    }
}

/// Whether every page of `addr .. addr + len` is mapped in this process. The kernel pins an
/// MR's pages at registration and refuses a range that is not mapped (EFAULT); the shim copies
/// to and from the application's memory directly, so it must refuse such a range too, or a
/// peer's WRITE would fault the process.
pub fn mapped(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let start = addr & !(page - 1);
    let Some(end) = end.checked_add(page - 1).map(|e| e & !(page - 1)) else {
        return false;
    };
    // One residency byte per page; check in slices so a huge range needs little memory.
    const SLICE: u64 = 1 << 16;
    let mut vec = vec![0u8; SLICE as usize];
    let mut at = start;
    while at < end {
        let pages = ((end - at) / page).min(SLICE);
        // SAFETY: mincore only reads the page tables of `at .. at + pages * page` (page
        // aligned) and writes `pages` bytes into `vec`, which holds SLICE >= pages bytes. It
        // fails with ENOMEM if any page of the range is not mapped.
        let r = unsafe {
            libc::mincore(
                at as usize as *mut libc::c_void,
                (pages * page) as usize,
                vec.as_mut_ptr(),
            )
        };
        if r != 0 {
            return false;
        }
        at += pages * page;
    }
    true
}

/// [`Memory`] for the engine: the shared table, locked per access.
#[derive(Debug, Clone)]
pub struct ShimMemory(pub SharedMrs);

impl Memory for ShimMemory {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let t = self.0.read().unwrap_or_else(|p| p.into_inner());
        let (r, off) = t.check(Some(pd), lkey, addr, buf.len() as u64, 0)?;
        MrTable::copy_out(r, off, buf);
        Ok(())
    }

    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let mut t = self.0.write().unwrap_or_else(|p| p.into_inner());
        if lkey == crate::srq::SRQ_VKEY {
            return crate::srq::place(&mut t, addr, data);
        }
        let (_, off) = t.check(Some(pd), lkey, addr, data.len() as u64, access::LOCAL_WRITE)?;
        let r = t.regions.get_mut(&lkey).ok_or(MemError::UnknownKey)?;
        MrTable::copy_in(r, off, data);
        Ok(())
    }

    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(), MemError> {
        let t = self.0.read().unwrap_or_else(|p| p.into_inner());
        t.check(Some(pd), rkey, addr, len, need).map(|_| ())
    }

    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let t = self.0.read().unwrap_or_else(|p| p.into_inner());
        let (r, off) = t.check(Some(pd), rkey, addr, buf.len() as u64, access::REMOTE_READ)?;
        MrTable::copy_out(r, off, buf);
        Ok(())
    }

    fn write_remote(&mut self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let mut t = self.0.write().unwrap_or_else(|p| p.into_inner());
        let (_, off) = t.check(
            Some(pd),
            rkey,
            addr,
            data.len() as u64,
            access::REMOTE_WRITE,
        )?;
        let r = t.regions.get_mut(&rkey).ok_or(MemError::UnknownKey)?;
        MrTable::copy_in(r, off, data);
        Ok(())
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let t = self.0.read().unwrap_or_else(|p| p.into_inner());
        let (r, off) = t.check(Some(pd), rkey, addr, 8, access::REMOTE_ATOMIC)?;
        match &r.backing {
            Backing::Owned(_) => Err(MemError::AccessDenied),
            Backing::App => {
                if !(r.ptr + off).is_multiple_of(8) {
                    return Err(MemError::Misaligned);
                }
                let p = (r.ptr + off) as usize as *mut u64;
                // SAFETY: the 8 bytes were bounds-checked against a registered, mapped
                // application range and are 8-byte aligned (checked above), which is what
                // AtomicU64 requires; the application may access them concurrently, which
                // is why the access is atomic.
                let a = unsafe { AtomicU64::from_ptr(p) };
                Ok(match op {
                    AtomicOp::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
                    AtomicOp::CmpSwap { compare, swap } => {
                        match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst)
                        {
                            Ok(v) | Err(v) => v,
                        }
                    }
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qp_domain_carries_its_pd_and_access_flags() {
        let mut buf = vec![0u8; 16];
        let base = buf.as_mut_ptr() as u64;
        let t: SharedMrs = Arc::new(RwLock::new(MrTable::new(KeyGen::deterministic(5))));
        let all = access::LOCAL_WRITE | REMOTE_RIGHTS;
        let k = t.write().unwrap().register_app(1, base, 16, all).unwrap();
        let (d, other) = {
            let mut w = t.write().unwrap();
            (w.new_domain(1, 0), w.new_domain(2, REMOTE_RIGHTS))
        };
        let mut m = ShimMemory(t.clone());
        // A QP grants nothing until its access flags say so, whatever the MR allows.
        assert_eq!(
            m.write_remote(d, k, base, &[1]),
            Err(MemError::AccessDenied)
        );
        t.write()
            .unwrap()
            .set_domain_access(d, access::REMOTE_WRITE);
        m.write_remote(d, k, base, &[1]).unwrap();
        let mut r = [0u8; 1];
        assert_eq!(
            m.read_remote(d, k, base, &mut r),
            Err(MemError::AccessDenied)
        );
        assert_eq!(t.read().unwrap().domain_access(d), access::REMOTE_WRITE);
        // The domain's PD must be the MR's.
        assert_eq!(
            m.write_remote(other, k, base, &[1]),
            Err(MemError::WrongDomain)
        );
        // A destroyed QP's domain finds nothing.
        t.write().unwrap().drop_domain(d);
        assert_eq!(m.write_remote(d, k, base, &[1]), Err(MemError::WrongDomain));
        assert_eq!(buf[0], 1);
    }

    // checks: [XRC-3]
    #[test]
    fn an_xrc_target_reaches_the_pds_of_its_domains_srqs_only() {
        let mut buf = vec![0u8; 16];
        let base = buf.as_mut_ptr() as u64;
        let t: SharedMrs = Arc::new(RwLock::new(MrTable::new(KeyGen::deterministic(7))));
        let all = access::LOCAL_WRITE | REMOTE_RIGHTS;
        let (k1, k2) = {
            let mut w = t.write().unwrap();
            let k1 = w.register_app(1, base, 8, all).unwrap();
            (k1, w.register_app(2, base + 8, 8, all).unwrap())
        };
        let (xrc, other) = (0x1000usize, 0x2000usize);
        let d = t.write().unwrap().new_xrc_domain(xrc, REMOTE_RIGHTS);
        let mut m = ShimMemory(t.clone());
        // No SRQ in the domain yet: no PD to reach.
        assert_eq!(
            m.write_remote(d, k1, base, &[1]),
            Err(MemError::WrongDomain)
        );
        {
            let mut w = t.write().unwrap();
            w.add_xrc_pd(xrc, 1);
            w.add_xrc_pd(xrc, 1);
            w.add_xrc_pd(other, 2);
        }
        m.write_remote(d, k1, base, &[1]).unwrap();
        // PD 2 has an SRQ, but in another XRC domain.
        assert_eq!(
            m.write_remote(d, k2, base + 8, &[1]),
            Err(MemError::WrongDomain)
        );
        // One of the two SRQs of PD 1 goes: still reachable; the second: refused.
        t.write().unwrap().remove_xrc_pd(xrc, 1);
        m.write_remote(d, k1, base + 1, &[2]).unwrap();
        t.write().unwrap().remove_xrc_pd(xrc, 1);
        assert_eq!(
            m.write_remote(d, k1, base, &[3]),
            Err(MemError::WrongDomain)
        );
        // The QP's access flags still apply.
        t.write().unwrap().add_xrc_pd(xrc, 1);
        t.write()
            .unwrap()
            .set_domain_access(d, access::REMOTE_WRITE);
        let mut r = [0u8; 1];
        assert_eq!(
            m.read_remote(d, k1, base, &mut r),
            Err(MemError::AccessDenied)
        );
        assert_eq!(&buf[..2], &[1, 2]);
    }

    #[test]
    fn reregister_changes_domain_range_and_rights_in_place() {
        let mut a = vec![0u8; 32];
        let mut b = vec![0u8; 16];
        let (pa, pb) = (a.as_mut_ptr() as u64, b.as_mut_ptr() as u64);
        let t: SharedMrs = Arc::new(RwLock::new(MrTable::new(KeyGen::deterministic(3))));
        let k = t
            .write()
            .unwrap()
            .register_app(1, pa, 32, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let mut m = ShimMemory(t.clone());
        // New domain: the old one is refused, the new one accepted.
        assert!(t.write().unwrap().reregister(k, Some(2), None, None));
        assert_eq!(m.write_remote(1, k, pa, &[1]), Err(MemError::WrongDomain));
        m.write_remote(2, k, pa, &[1]).unwrap();
        // New range: the old addresses are outside, the new buffer is written.
        assert!(t.write().unwrap().reregister(k, None, Some((pb, 16)), None));
        assert_eq!(m.write_remote(2, k, pa, &[1]), Err(MemError::OutOfBounds));
        m.write_remote(2, k, pb + 15, &[9]).unwrap();
        // New rights: remote write withdrawn.
        assert!(t
            .write()
            .unwrap()
            .reregister(k, None, None, Some(access::LOCAL_WRITE)));
        assert_eq!(m.write_remote(2, k, pb, &[1]), Err(MemError::AccessDenied));
        // Unknown key, overflowing range, shim-owned buffer: refused, nothing changed.
        let mut w = t.write().unwrap();
        assert!(!w.reregister(k ^ 0x55, Some(1), None, None));
        assert!(!w.reregister(k, Some(7), Some((u64::MAX, 2)), None));
        let owned = w.register_owned(1, 0x1000, vec![0; 8]);
        assert!(!w.reregister(owned, Some(2), None, None));
        drop(w);
        assert_eq!(m.write_remote(7, k, pb, &[1]), Err(MemError::WrongDomain));
        assert_eq!((a[0], b[15]), (1, 9));
    }

    #[test]
    fn bounds_keys_rights_and_domains() {
        let mut buf = vec![0u8; 64];
        let base = buf.as_mut_ptr() as u64;
        let t: SharedMrs = Arc::new(RwLock::new(MrTable::new(KeyGen::deterministic(7))));
        let k = t
            .write()
            .unwrap()
            .register_app(1, base, 64, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let mut m = ShimMemory(t.clone());
        m.write_remote(1, k, base + 8, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 3];
        m.read_local(1, k, base + 8, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3]);
        // Local keys are checked against the domain too (a region moved to another PD by
        // ibv_rereg_mr is out of reach of the old PD's QPs).
        assert_eq!(
            m.read_local(2, k, base + 8, &mut out),
            Err(MemError::WrongDomain)
        );
        assert_eq!(
            m.write_local(2, k, base + 8, &[1]),
            Err(MemError::WrongDomain)
        );
        assert_eq!(
            m.write_remote(1, k, base + 62, &[1, 2, 3]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            m.write_remote(1, k, base.wrapping_sub(1), &[1]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            m.write_remote(1, k, u64::MAX, &[1, 2]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(m.write_remote(2, k, base, &[1]), Err(MemError::WrongDomain));
        assert_eq!(
            m.write_remote(1, k ^ 0x55, base, &[1]),
            Err(MemError::UnknownKey)
        );
        let mut r = [0u8; 1];
        assert_eq!(
            m.read_remote(1, k, base, &mut r),
            Err(MemError::AccessDenied)
        );
        assert_eq!(
            m.atomic_remote(1, k, base, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::AccessDenied)
        );
        drop(m);
        assert_eq!(&buf[8..11], &[1, 2, 3]);
    }

    #[test]
    fn atomics_and_owned_copies() {
        let mut words = vec![5u64; 4];
        let base = words.as_mut_ptr() as u64;
        let t: SharedMrs = Arc::new(RwLock::new(MrTable::new(KeyGen::deterministic(9))));
        let k = t
            .write()
            .unwrap()
            .register_app(3, base, 32, access::REMOTE_ATOMIC)
            .unwrap();
        let mut m = ShimMemory(t.clone());
        assert_eq!(
            m.atomic_remote(3, k, base + 8, AtomicOp::FetchAdd { add: 10 }),
            Ok(5)
        );
        assert_eq!(
            m.atomic_remote(
                3,
                k,
                base + 8,
                AtomicOp::CmpSwap {
                    compare: 15,
                    swap: 1
                }
            ),
            Ok(15)
        );
        assert_eq!(
            m.atomic_remote(3, k, base + 4, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::Misaligned)
        );
        let o = t.write().unwrap().register_owned(3, 0x1000, vec![9, 8, 7]);
        let mut out = [0u8; 2];
        m.read_local(3, o, 0x1001, &mut out).unwrap();
        assert_eq!(out, [8, 7]);
        assert!(m.write_local(3, o, 0x1000, &[1]).is_err());
        drop(m);
        assert_eq!(words[1], 1);
    }
}
