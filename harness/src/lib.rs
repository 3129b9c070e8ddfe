//! Runs the real ferroce transport core on the simulated fabric: a simulator host wrapping an
//! [`ferroce_transport::Endpoint`], self-verifying RDMA workloads, and ready-made scenarios.
//! The integration tests and the `ferroce` program both drive the core through this crate.

pub mod host;
pub mod scenario;
pub mod workload;

pub use host::{NodeHost, ServerKeys};
pub use scenario::{Fabric, LossPlacement, RunReport, TwoHostRun};
pub use workload::{OpKind, WorkloadSpec};
