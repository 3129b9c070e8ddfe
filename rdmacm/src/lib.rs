//! ferroce's drop-in `librdmacm.so.1` (rdma-core 44 ABI): the RDMA connection manager for
//! unmodified programs (rping, ucmatose, rdma_server/rdma_client, perftest `-R`) over the
//! verbs shim's native engine. Found through `LD_LIBRARY_PATH` next to the shim's
//! `libibverbs.so.1`, whose private CM interface (verbs-shim/src/cm.rs) it drives.
//!
//! - [`id`]: event channels, cm ids, the connection life cycle.
//! - [`ud`]: RDMA_PS_UDP ids' answers to a service-ID resolution.
//! - [`events`]: getting, processing and acknowledging events.
//! - [`qp`]: queue pairs over the public verbs ABI and the transitions the CM drives.
//! - [`addr`]: the address rule, `rdma_getaddrinfo`, the synchronous `rdma_create_ep` layer.
//! - [`misc`]: what is refused (multicast, ECE, rsockets) and `rpoll`/`rselect`.
//! - [`state`], [`shim`], [`verbs`], [`sys`], [`exports`]: objects, the two FFI seams, the
//!   C layouts, the symbol versions.

pub mod addr;
pub mod events;
pub mod exports;
pub mod id;
pub mod misc;
pub mod qp;
pub mod shim;
pub mod state;
pub mod sys;
pub mod ud;
pub mod verbs;
