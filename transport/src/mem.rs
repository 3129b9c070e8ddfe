//! Registered memory, seen through a trait the embedder implements.
//!
//! The core never holds a pointer: it names memory by (key, address, length) and asks the
//! embedder to copy bytes in or out. The embedder enforces keys, access rights, protection
//! domains and bounds; [`Regions`] is a safe, complete implementation backed by owned buffers
//! (used by the simulator and tests; the verbs shim provides one over real registered memory).

use crate::keys::KeyGen;
use rustc_hash::FxHashMap as HashMap;

/// Access rights of a memory region (verbs `IBV_ACCESS_*` semantics).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const REMOTE_ATOMIC: u32 = 8;
}

/// Why a memory access was refused. A refused access touched no memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// No region with that key.
    UnknownKey,
    /// The region lacks the access right the operation needs.
    AccessDenied,
    /// The range is not inside the region (or overflows).
    OutOfBounds,
    /// The region's protection domain is not the stream's.
    WrongDomain,
    /// Atomic on an address that is not 8-byte aligned.
    Misaligned,
}

/// An atomic operation on 8 bytes of remote memory (host byte order, like verbs on x86).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    FetchAdd { add: u64 },
    CmpSwap { compare: u64, swap: u64 },
}

impl AtomicOp {
    /// The value that replaces `orig` (verbs semantics; wrapping add, swap only on equality).
    pub fn apply(self, orig: u64) -> u64 {
        match self {
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
            AtomicOp::CmpSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
        }
    }
}

/// Registered memory as the core sees it. `pd` is the protection domain of the stream (or
/// queue pair) on whose behalf the access is made (the embedder's number; the core passes it
/// through): local keys are checked against it as remote keys are, so a region re-registered
/// into another domain is out of reach of the old domain's QPs (verbs semantics).
pub trait Memory {
    /// Copy `buf.len()` bytes of local memory at `addr` under `lkey` into `buf`.
    fn read_local(&mut self, pd: u32, lkey: u32, addr: u64, buf: &mut [u8])
        -> Result<(), MemError>;
    /// Copy `data` into local memory at `addr` under `lkey` (needs LOCAL_WRITE).
    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// Check that `len` bytes at `addr` under `rkey` grant `access` to domain `pd`.
    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<(), MemError>;
    /// Copy remote-readable memory into `buf` (a READ response).
    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError>;
    /// Place `data` at `addr` under `rkey` (a WRITE).
    fn write_remote(&mut self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// Execute an atomic; returns the original value.
    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError>;
}

/// A scatter/gather element of local registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub lkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// Total length of a scatter/gather list.
pub fn sgl_len(sgl: &[Sge]) -> u64 {
    sgl.iter().map(|s| s.len as u64).sum()
}

/// Copy `buf.len()` bytes at message offset `off` out of a local scatter/gather list, each
/// piece checked under domain `pd`. Fails if the list is shorter than `off + buf.len()`.
pub fn sgl_read(
    mem: &mut dyn Memory,
    pd: u32,
    sgl: &[Sge],
    off: u64,
    buf: &mut [u8],
) -> Result<(), MemError> {
    sgl_walk(sgl, off, buf.len(), |s, addr, r| {
        mem.read_local(pd, s.lkey, addr, &mut buf[r])
    })
}

/// Copy `data` to message offset `off` of a local scatter/gather list (each piece needs
/// LOCAL_WRITE in domain `pd`). A failure part-way leaves the pieces before it written: the
/// callers complete that receive or READ in error, whose buffer verbs leaves undefined.
pub fn sgl_write(
    mem: &mut dyn Memory,
    pd: u32,
    sgl: &[Sge],
    off: u64,
    data: &[u8],
) -> Result<(), MemError> {
    sgl_walk(sgl, off, data.len(), |s, addr, r| {
        mem.write_local(pd, s.lkey, addr, &data[r])
    })
}

/// Visit the pieces of `sgl` covering message bytes `[off, off + len)`: `f(sge, address,
/// range of the caller's buffer)`.
fn sgl_walk(
    sgl: &[Sge],
    mut off: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, std::ops::Range<usize>) -> Result<(), MemError>,
) -> Result<(), MemError> {
    let mut done = 0usize;
    for s in sgl {
        if done == len {
            break;
        }
        let l = s.len as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = ((l - off) as usize).min(len - done);
        let addr = s.addr.checked_add(off).ok_or(MemError::OutOfBounds)?;
        f(s, addr, done..done + n)?;
        done += n;
        off = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(MemError::OutOfBounds)
    }
}

/// One registered region backed by an owned buffer.
#[derive(Debug)]
pub struct Region {
    pub pd: u32,
    pub addr: u64,
    pub access: u32,
    pub data: Vec<u8>,
}

/// A safe [`Memory`] over owned buffers: lkey == rkey == the key returned by `register`.
#[derive(Debug)]
pub struct Regions {
    regions: HashMap<u32, Region>,
    keys: KeyGen,
}

impl Default for Regions {
    fn default() -> Self {
        Regions::new()
    }
}

impl Regions {
    /// Regions with reproducible (so predictable) keys: for the simulator and tests. A real
    /// host uses [`Regions::with_keys`] with a secret from the OS.
    pub fn new() -> Self {
        Regions::with_keys(KeyGen::deterministic(0))
    }

    /// Regions whose keys come from `keys` (spec/security.md §1.1).
    pub fn with_keys(keys: KeyGen) -> Self {
        Regions {
            regions: HashMap::default(),
            keys,
        }
    }

    /// Register `len` zeroed bytes that appear at virtual address `addr`; returns the key.
    pub fn register(&mut self, pd: u32, addr: u64, len: usize, access: u32) -> u32 {
        let key = loop {
            let k = self.keys.next_key();
            if !self.regions.contains_key(&k) {
                break k;
            }
        };
        self.regions.insert(
            key,
            Region {
                pd,
                addr,
                access,
                data: vec![0; len],
            },
        );
        key
    }

    pub fn deregister(&mut self, key: u32) -> Option<Region> {
        self.regions.remove(&key)
    }

    pub fn region(&self, key: u32) -> Option<&Region> {
        self.regions.get(&key)
    }

    pub fn region_mut(&mut self, key: u32) -> Option<&mut Region> {
        self.regions.get_mut(&key)
    }

    /// Every registered region with its key, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Region)> {
        self.regions.iter().map(|(&k, r)| (k, r))
    }

    /// Byte range inside region `key` for [addr, addr+len), checked.
    fn range(&self, key: u32, addr: u64, len: u64) -> Result<(&Region, usize, usize), MemError> {
        let r = self.regions.get(&key).ok_or(MemError::UnknownKey)?;
        let start = addr.checked_sub(r.addr).ok_or(MemError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok((r, start as usize, end as usize))
    }

    fn check(
        &self,
        pd: Option<u32>,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(usize, usize), MemError> {
        let (r, s, e) = self.range(key, addr, len)?;
        if let Some(pd) = pd {
            if r.pd != pd {
                return Err(MemError::WrongDomain);
            }
        }
        if r.access & need != need {
            return Err(MemError::AccessDenied);
        }
        Ok((s, e))
    }
}

impl Memory for Regions {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let (s, e) = self.check(Some(pd), lkey, addr, buf.len() as u64, 0)?;
        buf.copy_from_slice(&self.regions[&lkey].data[s..e]);
        Ok(())
    }

    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (s, e) = self.check(Some(pd), lkey, addr, data.len() as u64, access::LOCAL_WRITE)?;
        self.region_mut(lkey).ok_or(MemError::UnknownKey)?.data[s..e].copy_from_slice(data);
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
        self.check(Some(pd), rkey, addr, len, need).map(|_| ())
    }

    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let (s, e) = self.check(Some(pd), rkey, addr, buf.len() as u64, access::REMOTE_READ)?;
        buf.copy_from_slice(&self.regions[&rkey].data[s..e]);
        Ok(())
    }

    fn write_remote(&mut self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (s, e) = self.check(
            Some(pd),
            rkey,
            addr,
            data.len() as u64,
            access::REMOTE_WRITE,
        )?;
        self.region_mut(rkey).ok_or(MemError::UnknownKey)?.data[s..e].copy_from_slice(data);
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
        let (s, e) = self.check(Some(pd), rkey, addr, 8, access::REMOTE_ATOMIC)?;
        let r = self.region_mut(rkey).ok_or(MemError::UnknownKey)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&r.data[s..e]);
        let orig = u64::from_ne_bytes(b);
        let new = op.apply(orig);
        r.data[s..e].copy_from_slice(&new.to_ne_bytes());
        Ok(orig)
    }
}
