//! Loss on rxe's own transmissions and RoCEv2 packet counts, both on the lab's bridge.
//!
//! ferroce's `FERROCE_LOSS` injector drops only what ferroce sends or receives through its
//! engine; rxe's transmissions to another rxe, and the order in which rxe's lost responses
//! show up, need loss outside both. An nftables table in the lab namespace (bridge family,
//! forward hook: every frame between the VMs' taps and the host veth) counts every RoCEv2
//! packet (UDP 4791) and drops a random share of those sent from one address. The table dies
//! with the namespace; [`WireLoss::remove`] deletes it earlier.

use crate::lab::Lab;
use crate::util::{cmd_output, run_bounded};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The nftables table's name (in the lab namespace only).
pub const TABLE: &str = "ferroce_wire";
/// RoCEv2's UDP destination port.
const ROCE_PORT: u16 = 4791;

/// Counters read from the rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireCounts {
    /// Every RoCEv2 packet bridged (both directions, dropped ones included).
    pub packets: u64,
    /// Those sent from the lossy address.
    pub from_src: u64,
    /// Those dropped.
    pub dropped: u64,
}

impl WireCounts {
    pub fn since(self, before: WireCounts) -> WireCounts {
        WireCounts {
            packets: self.packets.saturating_sub(before.packets),
            from_src: self.from_src.saturating_sub(before.from_src),
            dropped: self.dropped.saturating_sub(before.dropped),
        }
    }
}

/// The ruleset for dropping `pct` % of `src`'s RoCEv2 packets (in steps of 0.01 %).
pub fn ruleset(src: Ipv4Addr, pct: f64) -> Result<String, String> {
    if !(0.0..100.0).contains(&pct) {
        return Err(format!(
            "rxe loss {pct} %: expected a percentage in [0, 100)"
        ));
    }
    let per_10k = (pct * 100.0).round() as u32;
    // Three rules, each with its own counter, in order: all RoCEv2, from `src`, dropped.
    Ok(format!(
        "table bridge {TABLE} {{\n  chain roce {{\n    type filter hook forward priority 0; policy accept;\n    udp dport {ROCE_PORT} counter\n    ip saddr {src} udp dport {ROCE_PORT} counter\n    ip saddr {src} udp dport {ROCE_PORT} numgen random mod 10000 < {per_10k} counter drop\n  }}\n}}\n"
    ))
}

/// The counters of [`ruleset`]'s three rules as `nft list table` prints them.
pub fn parse_counts(listing: &str) -> Result<WireCounts, String> {
    let v: Vec<u64> = listing
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f.iter().position(|w| *w == "packets")?;
            f.get(i + 1)?.parse().ok()
        })
        .collect();
    match v[..] {
        [packets, from_src, dropped] => Ok(WireCounts {
            packets,
            from_src,
            dropped,
        }),
        _ => Err(format!("unexpected nft listing:\n{listing}")),
    }
}

/// The table installed in one lab's namespace.
#[derive(Debug)]
pub struct WireLoss {
    ns: String,
    pub src: Ipv4Addr,
    pub pct: f64,
}

fn nft(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "nft"]);
    c
}

impl WireLoss {
    /// Count RoCEv2 packets on `lab`'s bridge and drop `pct` % of those from `src`.
    pub fn install(lab: &Lab, src: Ipv4Addr, pct: f64) -> Result<WireLoss, String> {
        let rules = ruleset(src, pct)?;
        if !std::path::Path::new("/usr/sbin/nft").exists() && which_nft().is_none() {
            return Err("nft not found: apt-get install nftables".into());
        }
        // One file, removed below (a directory per process was left behind).
        let f =
            std::env::temp_dir().join(format!("ferroce-nft-{}-{}.nft", std::process::id(), lab.ns));
        std::fs::write(&f, &rules).map_err(|e| e.to_string())?;
        let r = run_bounded(
            nft(&lab.ns).arg("-f").arg(&f).stdin(Stdio::null()),
            Duration::from_secs(10),
        );
        let _ = std::fs::remove_file(&f);
        r.map_err(|e| format!("nft -f: {e}"))?;
        Ok(WireLoss {
            ns: lab.ns.clone(),
            src,
            pct,
        })
    }

    /// The counters so far.
    pub fn counts(&self) -> Result<WireCounts, String> {
        let out = cmd_output(
            nft(&self.ns).args(["list", "table", "bridge", TABLE]),
            Duration::from_secs(10),
        )?;
        parse_counts(&out)
    }

    /// Delete the table (the namespace's removal deletes it too).
    pub fn remove(&self) {
        let _ = run_bounded(
            nft(&self.ns).args(["delete", "table", "bridge", TABLE]),
            Duration::from_secs(10),
        );
    }
}

impl Drop for WireLoss {
    fn drop(&mut self) {
        self.remove();
    }
}

fn which_nft() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("nft"))
            .find(|p| p.exists())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_and_counters() {
        let r = ruleset(Ipv4Addr::new(198, 18, 0, 2), 2.5).unwrap();
        assert!(
            r.contains(
                "ip saddr 198.18.0.2 udp dport 4791 numgen random mod 10000 < 250 counter drop"
            ),
            "{r}"
        );
        assert!(ruleset(Ipv4Addr::LOCALHOST, 100.0).is_err());
        let l = "table bridge ferroce_wire {\n\tchain roce {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tudp dport 4791 counter packets 120 bytes 9000\n\t\tip saddr 198.18.0.2 udp dport 4791 counter packets 60 bytes 100\n\t\tip saddr 198.18.0.2 udp dport 4791 numgen random mod 10000 < 250 counter packets 2 bytes 10 drop\n\t}\n}\n";
        let c = parse_counts(l).unwrap();
        assert_eq!(
            c,
            WireCounts {
                packets: 120,
                from_src: 60,
                dropped: 2
            }
        );
        assert!(parse_counts("table bridge x {}").is_err());
    }
}
