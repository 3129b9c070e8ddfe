//! ferroce transport core: a sans-IO implementation of the native ferroce protocol
//! (spec/). No sockets, threads or clocks: the embedder passes received datagrams and the
//! current time in, and takes datagrams to send, timer deadlines and completions out.
//!
//! - [`wire`]: the packet formats (zero-copy views and parsed representations).
//! - [`Endpoint`]: all connections of one host; the object an embedder drives.
//! - [`mem::Memory`]: registered memory, implemented by the embedder (the core holds no
//!   pointers); [`mem::Regions`] is a safe implementation over owned buffers.

// The core is safe Rust: raw memory and FFI stay in the embedders' audited modules.
#![forbid(unsafe_code)]

pub mod api;
mod at;
mod bits;
pub mod cc;
pub mod cm;
pub mod config;
pub mod conn;
pub mod counters;
pub mod endpoint;
pub mod keys;
pub mod mem;
pub mod path;
pub mod roce;
pub mod script;
pub mod wire;

pub use api::*;
pub use cc::Algorithm as CcAlgorithm;
pub use config::{
    ConnConfig, EndpointConfig, ENGINE_PACE_BURST, ENGINE_PACE_QUANTUM_NS, PATH_SPAN_PACKETS,
};
pub use conn::{path_entropy, ConnState, Connection};
pub use counters::{ConnCounters, EndpointCounters, PathCounters};
pub use endpoint::Endpoint;
pub use path::{PathState, TxPath};
