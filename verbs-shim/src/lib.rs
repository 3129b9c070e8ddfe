//! ferroce's verbs shim: a drop-in `libibverbs.so.1` (rdma-core 44 ABI) that runs unmodified
//! verbs applications over ferroce, with the DPDK engine in the application's own process.
//!
//! - [`sys`]: bindgen output of the system `infiniband/verbs.h` (committed; checked against
//!   the C compiler by `tests/verbs_layout.rs`).
//! - [`verbs`]: the entry points; `exports` binds them to rdma-core's versioned names.
//! - [`state`]: CQs, QPs, work in flight, connections and the engines.
//! - [`engines`]: one engine per device in one process (EAL, ports, lcores they share).
//! - [`mr`]: the memory-region table, the one module that touches application memory.
//! - [`config`]: the engine's configuration from the environment.
//! - [`device`]: device names, node GUIDs and what GIDs name (what libraries read beside verbs).
//! - [`cq_ex`]: extended CQs (`ibv_create_cq_ex`, the `ibv_start_poll` interface).
//! - [`qp_ex`]: the `ibv_wr_*` send API (`ibv_qp_ex`).
//! - [`srq`]: shared receive queues (virtual receives bound to SRQ entries on first byte).
//! - [`xrc`]: XRC domains, XRC SRQs and XRC QPs (both devices).
//! - [`ud`]: UD QPs, carried on one datagram stream per host pair.
//! - [`lid`]: LIDs on the Ethernet ports, for programs that address peers by LID (qperf).
//! - [`uc`]: UC QPs (unreliable streams / IBTA UC QPs): their modify masks and opcodes.
//! - [`cm`]: the connection manager beside the native engine, and the private interface
//!   `librdmacm.so.1` (crate `rdmacm/`) drives it through.
//! - [`bench`]: `ferroce bench verbs` (perftest over the shim next to the engine's own run).
//!
//! Devices: `ferroce0` speaks ferroce's native protocol, `ferroce0_rocev2` IBTA RC over
//! RoCEv2; applications choose with their device option (`-d`).

pub mod bench;
pub mod cm;
pub mod cm_roce;
pub mod config;
pub mod cq_ex;
pub mod device;
pub mod engines;
pub mod exports;
pub mod ferrocedv;
pub mod inflight;
pub mod lid;
pub mod mr;
pub mod qp_ex;
pub mod srq;
pub mod state;
pub mod sys;
pub mod uc;
pub mod ud;
mod ud_roce;
pub mod verbs;
pub mod wr;
pub mod xrc;

/// Where the build put the stub `libmlx5.so.1`, `libefa.so.1` and `libmlx4.so.1`.
pub const STUB_DIR: &str = env!("FERROCE_VERBS_STUB_DIR");
