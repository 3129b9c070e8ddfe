//! The IBTA connection manager of RoCEv2 mode (spec/rocev2.md §10): CM MADs on QP1.

pub mod wire;
