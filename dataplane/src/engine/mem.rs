//! Registered memory shared by the application and the engine, locked per access.

use super::*;

/// [`Memory`] over the shared regions, taking the lock for each access only.
pub(super) struct LockedMem<'a>(pub(super) &'a Mutex<Regions>);

impl LockedMem<'_> {
    #[inline]
    fn get(&self) -> std::sync::MutexGuard<'_, Regions> {
        match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
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
