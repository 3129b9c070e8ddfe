//! Registered memory shared by the application and the engine, locked per access.

use super::*;

/// [`Memory`] over the shared regions, locked at the first access and held until
/// [`LockedMem::release`] (or drop): one lock per burst of packets, not one per packet's copy.
/// The engine releases it between its receive and transmit phases and at the end of every
/// poll, so the application's own accesses wait at most one burst.
pub(super) struct LockedMem<'a> {
    m: &'a Mutex<Regions>,
    g: Option<std::sync::MutexGuard<'a, Regions>>,
}

impl<'a> LockedMem<'a> {
    pub(super) fn new(m: &'a Mutex<Regions>) -> Self {
        LockedMem { m, g: None }
    }

    #[inline]
    fn get(&mut self) -> &mut Regions {
        let m = self.m;
        self.g
            .get_or_insert_with(|| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Let the application in.
    pub(super) fn release(&mut self) {
        self.g = None;
    }
}

impl Memory for LockedMem<'_> {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        self.get().read_local(pd, lkey, addr, buf)
    }
    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.get().write_local(pd, lkey, addr, data)
    }
    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<(), MemError> {
        self.get().check_remote(pd, rkey, addr, len, access)
    }
    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        self.get().read_remote(pd, rkey, addr, buf)
    }
    fn write_remote(&mut self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.get().write_remote(pd, rkey, addr, data)
    }
    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError> {
        self.get().atomic_remote(pd, rkey, addr, op)
    }
}
