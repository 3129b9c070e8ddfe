//! ferroce's DPDK poll-mode dataplane: the transport core on real packets.
//!
//! - [`engine`]: the run loop (rx burst → Ethernet/ARP/IPv4/UDP → transport → tx burst,
//!   timers from the TSC), bounded queues to the application ([`engine::EngineHandle`]).
//! - [`io`]: the packet I/O seam ([`io::PacketIo`]: rx burst, tx burst, capabilities), a DPDK
//!   port as its implementation; [`fault`] (the seeded fault injector) and [`pcap`]
//!   (capture) wrap any of them.
//! - [`udp`]: the kernel UDP backend, a [`io::PacketIo`] over UDP sockets (no DPDK device,
//!   hugepages or root).
//! - [`net`]: frame parsing and header writing; [`counters`]: counters and their JSON form.
//! - [`config`]: the TOML configuration (with flag and environment overrides) and
//!   [`config::run_engine`], what `ferroce dataplane` runs.
//! - [`summary`]: the readable summary `ferroce dataplane run` prints (`--json`: the report).
//! - [`compliance_target`]: `workload.role = "compliance"`, the target of `ferroce compliance`.
//! - [`app`]: a self-verifying workload (the harness's) over an engine's queues.
//! - [`bench`]: `ferroce bench dataplane` (raw PMD rate vs the transport's, CPU time, ACKs
//!   and allocations per packet); [`cpu`]: the thread CPU clock and allocation counter it uses.
//! - [`netns`]: network namespaces, veth pairs and hugepages for tests, with drop guards.

pub mod app;
pub mod backend;
pub mod bench;
pub mod cli;
pub mod compliance_target;
pub mod config;
pub mod counters;
pub mod cpu;
pub mod engine;
pub mod entropy;
pub mod fault;
pub mod io;
pub mod launch;
pub mod net;
pub mod netns;
pub mod pcap;
pub mod summary;
pub mod udp;
pub mod wake;

pub use cli::{main_bench, main_dataplane};
pub use config::{run_engine, Config};
pub use engine::{Engine, EngineHandle, EngineParams, Output};
pub use ferroce_dpdk_sys as dpdk;
