//! Test set-up with drop guards: network namespaces joined by a veth pair, and a hugepage
//! reservation. Everything is undone when the guard drops, also when a test panics; stale
//! leftovers of killed runs (named after a pid that no longer exists) are removed first.

use std::io;
use std::process::{Command, Stdio};

/// Prefix of every namespace and interface these guards create.
pub const PREFIX: &str = "fdp";

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Delete namespaces named `fdp<pid>...` whose process is gone (a killed earlier run).
pub fn cleanup_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if pid.is_empty() {
            continue;
        }
        if !std::path::Path::new("/proc").join(&pid).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// Two namespaces joined by a veth pair, with kernel addresses; removed on drop.
#[derive(Debug)]
pub struct VethPair {
    pub ns: [String; 2],
    pub ifname: [String; 2],
    /// The kernel's addresses on the two ends.
    pub kernel_ip: [String; 2],
}

impl VethPair {
    /// `tag` makes names unique within this process (a letter or two).
    pub fn create(tag: &str, kernel_ip: [&str; 2], prefix_len: u8) -> io::Result<VethPair> {
        cleanup_stale();
        let pid = std::process::id();
        let ns = [
            format!("{PREFIX}{pid}{tag}a"),
            format!("{PREFIX}{pid}{tag}b"),
        ];
        // Interface names: at most 15 bytes.
        let short = pid % 1_000_000;
        let ifname = [
            format!("{PREFIX}{short}{tag}a"),
            format!("{PREFIX}{short}{tag}b"),
        ];
        let pair = VethPair {
            ns: ns.clone(),
            ifname: ifname.clone(),
            kernel_ip: [kernel_ip[0].to_string(), kernel_ip[1].to_string()],
        };
        // From here on, Drop cleans up whatever was made.
        for n in &ns {
            ip(&["netns", "add", n])?;
        }
        ip(&[
            "link", "add", &ifname[0], "netns", &ns[0], "type", "veth", "peer", "name", &ifname[1],
            "netns", &ns[1],
        ])?;
        for k in 0..2 {
            let (n, i) = (&ns[k], &ifname[k]);
            // No IPv6 on the link: fewer foreign frames (router solicitations, MLD).
            let _ = Command::new("ip")
                .args(["netns", "exec", n, "sysctl", "-q", "-w"])
                .arg(format!("net.ipv6.conf.{i}.disable_ipv6=1"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{}/{prefix_len}", kernel_ip[k]),
                "dev",
                i,
            ])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
            ip(&["-n", n, "link", "set", i, "up"])?;
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and so the pair.
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// A hugepage reservation of at least `n` 2 MiB pages; the previous count is restored on drop.
#[derive(Debug)]
pub struct Hugepages {
    prev: u64,
    pub reserved: u64,
}

impl Hugepages {
    pub fn reserve(n: u64) -> io::Result<Hugepages> {
        let prev: u64 = std::fs::read_to_string(NR_HUGEPAGES)?
            .trim()
            .parse()
            .map_err(io::Error::other)?;
        if prev < n {
            std::fs::write(NR_HUGEPAGES, n.to_string())?;
        }
        let now: u64 = std::fs::read_to_string(NR_HUGEPAGES)?
            .trim()
            .parse()
            .map_err(io::Error::other)?;
        let g = Hugepages {
            prev,
            reserved: now,
        };
        if now < n {
            return Err(io::Error::other(format!(
                "asked for {n} hugepages, the kernel reserved {now} (memory fragmented?)"
            )));
        }
        Ok(g)
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        if self.reserved != self.prev {
            let _ = std::fs::write(NR_HUGEPAGES, self.prev.to_string());
        }
    }
}

/// One namespace holding both ends of a veth pair (for one process driving both ends, as the
/// benchmark does); removed on drop.
#[derive(Debug)]
pub struct VethLoop {
    pub ns: String,
    pub ifname: [String; 2],
}

impl VethLoop {
    pub fn create(tag: &str) -> io::Result<VethLoop> {
        cleanup_stale();
        let pid = std::process::id();
        let ns = format!("{PREFIX}{pid}{tag}");
        let short = pid % 1_000_000;
        let ifname = [
            format!("{PREFIX}{short}{tag}a"),
            format!("{PREFIX}{short}{tag}b"),
        ];
        ip(&["netns", "add", &ns])?;
        let g = VethLoop {
            ns: ns.clone(),
            ifname: ifname.clone(),
        };
        ip(&[
            "link", "add", &ifname[0], "netns", &ns, "type", "veth", "peer", "name", &ifname[1],
            "netns", &ns,
        ])?;
        for i in &ifname {
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns, "sysctl", "-q", "-w"])
                .arg(format!("net.ipv6.conf.{i}.disable_ipv6=1"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            ip(&["-n", &ns, "link", "set", i, "up"])?;
        }
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(g)
    }
}

impl VethLoop {
    /// Add address `cidr` (e.g. "198.18.201.1/32") to interface `dev` of the namespace.
    pub fn add_addr(&self, cidr: &str, dev: &str) -> io::Result<()> {
        ip(&["-n", &self.ns, "addr", "add", cidr, "dev", dev])
    }
}

impl Drop for VethLoop {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

extern "C" {
    fn setns(fd: std::ffi::c_int, nstype: std::ffi::c_int) -> std::ffi::c_int;
}

/// Move the calling thread into network namespace `name` (threads it starts later inherit
/// it; sockets opened later live there).
pub fn enter_netns(name: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    const CLONE_NEWNET: std::ffi::c_int = 0x4000_0000;
    // SAFETY: setns with a valid namespace fd we hold open for the call; it changes only the
    // calling thread's network namespace.
    let rc = unsafe { setns(f.as_raw_fd(), CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
