//! Runs the real ferroce transport core on the simulated fabric: a simulator host wrapping an
//! [`ferroce_transport::Endpoint`] (or any other engine), self-verifying RDMA workloads, and
//! ready-made scenarios: two-host runs ([`TwoHostRun`]) and many-host, many-flow runs
//! ([`multi`]: incast, permutation, late joiners). The integration tests, the benchmarks and
//! the `ferroce` program all drive the core through this crate.

pub mod host;
pub mod multi;
pub mod scenario;
pub mod soak;
/// The workload lives in its own crate (`ferroce-workload`) so that the production crates can
/// use it without the simulator; the harness re-exports it under its old path.
pub mod workload {
    pub use ferroce_workload::*;
}

pub use host::{Client, NodeHost, Server};
pub use multi::{Flow, FlowHandle};
pub use scenario::{Fabric, LossPlacement, RunReport, TwoHostRun};
pub use workload::ServerKeys;
pub use workload::{OpKind, WorkloadSpec};
