//! The test network: one network namespace holding a bridge, a veth pair whose outer end
//! carries the host side (the kernel's address for the programs' TCP exchange, and the
//! ferroce engine's DPDK port), and one tap device per VM. Addresses from 198.18.0.0/15 only.
//! Everything is removed when the [`Lab`] drops (VMs must be dropped first); namespaces of
//! earlier runs whose process is gone are removed on creation.

use crate::util::{cmd_output, run_bounded};
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

/// Prefix of the namespaces this module creates (`frx<pid>_<n>`).
pub const NS_PREFIX: &str = "frx";
/// The host kernel's address in the lab (the programs' TCP exchange).
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The ferroce engine's own address (answered by the engine, not the kernel).
pub const FERROCE_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);
pub const PREFIX_LEN: u8 = 24;
/// The host-side interface the engine's af_packet port binds to (inside the namespace).
pub const HOST_IF: &str = "fve0";

/// The address of VM `k` (0-based).
pub fn vm_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 2 + k as u8)
}

fn ip(args: &[&str]) -> Result<(), String> {
    run_bounded(Command::new("ip").args(args), Duration::from_secs(20))
}

#[derive(Debug)]
pub struct Lab {
    pub ns: String,
    pub taps: Vec<String>,
    pub mtu: u32,
}

/// Remove namespaces of runs whose process no longer exists.
pub fn cleanup_stale() {
    let Ok(out) = cmd_output(
        Command::new("ip").args(["netns", "list"]),
        Duration::from_secs(10),
    ) else {
        return;
    };
    for line in out.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !pid.is_empty() && !std::path::Path::new("/proc").join(&pid).exists() {
            remove_ns(name);
        }
    }
}

fn remove_ns(ns: &str) {
    // Persistent taps first (they would otherwise outlive a namespace some kernels keep).
    if let Ok(out) = cmd_output(
        Command::new("ip").args(["-n", ns, "-o", "link", "show", "type", "tun"]),
        Duration::from_secs(10),
    ) {
        for l in out.lines() {
            if let Some(n) = l.split(':').nth(1) {
                let n = n.trim().split('@').next().unwrap_or("");
                let _ = ip(&["-n", ns, "tuntap", "del", "dev", n, "mode", "tap"]);
            }
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

impl Lab {
    /// A namespace with a bridge, the host veth and `n_taps` taps, all with link MTU `mtu`.
    pub fn create(n_taps: usize, mtu: u32) -> Result<Lab, String> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        cleanup_stale();
        let ns = format!(
            "{NS_PREFIX}{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        ip(&["netns", "add", &ns])?;
        let lab = Lab {
            ns: ns.clone(),
            taps: (0..n_taps).map(|k| format!("ftap{k}")).collect(),
            mtu,
        };
        let m = mtu.to_string();
        let n = ns.as_str();
        for k in ["all", "default"] {
            let _ = run_bounded(
                Command::new("ip")
                    .args(["netns", "exec", n, "sysctl", "-q", "-w"])
                    .arg(format!("net.ipv6.conf.{k}.disable_ipv6=1")),
                Duration::from_secs(10),
            );
        }
        // The kernel answers ARP only for addresses of the interface asked on (else the bridge
        // answers for the host veth's address with its own MAC, and the engine's port competes).
        for k in [
            "net.ipv4.conf.all.arp_ignore=1",
            "net.ipv4.conf.all.arp_announce=2",
        ] {
            let _ = run_bounded(
                Command::new("ip").args(["netns", "exec", n, "sysctl", "-q", "-w", k]),
                Duration::from_secs(10),
            );
        }
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&["-n", n, "link", "add", "fbr0", "mtu", &m, "type", "bridge"])?;
        ip(&[
            "-n", n, "link", "add", HOST_IF, "mtu", &m, "type", "veth", "peer", "name", "fvb0",
            "mtu", &m,
        ])?;
        ip(&["-n", n, "link", "set", "fvb0", "master", "fbr0"])?;
        for t in &lab.taps {
            ip(&["-n", n, "tuntap", "add", "dev", t, "mode", "tap"])?;
            ip(&["-n", n, "link", "set", t, "mtu", &m, "master", "fbr0"])?;
            ip(&["-n", n, "link", "set", t, "up"])?;
        }
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{HOST_IP}/{PREFIX_LEN}"),
            "dev",
            HOST_IF,
        ])?;
        for i in ["fvb0", HOST_IF, "fbr0"] {
            ip(&["-n", n, "link", "set", i, "up"])?;
        }
        Ok(lab)
    }

    /// A command run inside the namespace.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, prog]);
        c
    }

    /// Whether a TCP socket listens on `port` in the namespace.
    pub fn tcp_listening(&self, port: u16) -> bool {
        let mut c = self.command("cat");
        c.arg("/proc/net/tcp");
        let Ok(t) = cmd_output(&mut c, Duration::from_secs(5)) else {
            return false;
        };
        let want = format!(":{port:04X}");
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        remove_ns(&self.ns);
    }
}
