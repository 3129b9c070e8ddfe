//! ferroce against Linux soft-RoCE (rdma_rxe): a qemu VM harness and the interop matrix.
//!
//! - [`image`]: builds and caches the VM kernel + initramfs from Debian packages.
//! - [`lab`]: the network namespace with a bridge, the host veth and the VMs' taps.
//! - [`vm`]: boots a VM and runs commands in it (bounded in time, cleaned up on drop).
//! - [`apps`]: the verbs programs on both sides and the matrix runner.
//! - [`wirecheck`]: decodes captures with ferroce's RoCEv2 codec and with tshark.
//!
//! `ferroce interop rxe` is [`main_interop`].

pub mod apps;
pub mod cpio;
pub mod image;
pub mod lab;
pub mod matrix;
pub mod util;
pub mod vm;
pub mod wirecheck;
pub mod wireloss;

pub use matrix::main_interop;

/// Whether this process can run the VM harness (root: namespaces, taps, apt).
pub fn can_run() -> Result<(), String> {
    if !util::is_root() {
        return Err("needs root (network namespaces, tap devices)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("no /dev/net/tun".into());
    }
    Ok(())
}

/// Serializes VM use within one process (TCG is CPU-bound: one scenario at a time).
pub static VM_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
