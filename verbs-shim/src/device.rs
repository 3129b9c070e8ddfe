//! What a device is known by outside the verbs calls: its uverbs node name, its node GUID,
//! and the addresses its GIDs stand for.
//!
//! Libraries look past the verbs API at a device (see `docs/verbs-devices.md` for what each
//! reads and why):
//! - UCX (1.13) skips a device unless `/dev/infiniband/<ibv_device.dev_name>` is a character
//!   device it may open for reading and writing. The shim never opens it (it has no kernel
//!   driver), so the set-up (`scripts/setup.sh`, [`node_path`]) makes that path a link to
//!   `/dev/null`. The names are ferroce's own, so they never shadow a real HCA's `uverbsN`.
//! - libfabric's verbs provider (1.17) addresses its DGRAM endpoints by GID index 0 unless
//!   `FI_VERBS_GID_IDX` says otherwise. GID 0 is the link-local GID `fe80::<node GUID>`, and
//!   the node GUID carries the engine's IPv4 address, so that GID names the host as well as
//!   GID 1 (`::ffff:<IPv4>`) does: [`ip_of_gid`] reads both.

use std::net::Ipv4Addr;

/// Where UCX looks for a device's uverbs node.
pub const NODE_DIR: &str = "/dev/infiniband";

/// `ibv_device.dev_name` of device `index` (its uverbs node's name).
pub fn uverbs_name(index: usize) -> String {
    format!("ferroce_uverbs{index}")
}

/// The uverbs node UCX checks for device `index`.
pub fn node_path(index: usize) -> String {
    format!("{NODE_DIR}/{}", uverbs_name(index))
}

/// The node GUID's fixed part: a locally administered EUI-64 prefix, then "fe ce".
const GUID_TAG: u64 = 0x02fe_ce00_0000_0000;

/// Node GUID of device `index` on the host with address `ip`: `02:fe:ce:<index>:<IPv4>`.
pub fn node_guid(ip: Ipv4Addr, index: usize) -> u64 {
    GUID_TAG | ((index as u64 & 0xff) << 32) | u32::from(ip) as u64
}

/// The IPv4 host a GID names: `::ffff:<IPv4>` (GID 1), or the link-local `fe80::<node GUID>`
/// of a ferroce device (GID 0). `None` for any other GID.
pub fn ip_of_gid(raw: &[u8; 16]) -> Option<Ipv4Addr> {
    let ip = Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15]);
    if raw[..10].iter().all(|&b| b == 0) && raw[10] == 0xff && raw[11] == 0xff {
        return Some(ip);
    }
    let link_local = raw[0] == 0xfe && raw[1] == 0x80 && raw[2..8].iter().all(|&b| b == 0);
    let guid = u64::from_be_bytes(raw[8..16].try_into().ok()?);
    (link_local && guid & 0xffff_ff00_0000_0000 == GUID_TAG).then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_local(guid: u64) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&guid.to_be_bytes());
        g
    }

    #[test]
    fn both_gids_name_the_host() {
        let ip = Ipv4Addr::new(198, 18, 0, 11);
        for index in 0..2 {
            assert_eq!(
                ip_of_gid(&link_local(node_guid(ip, index))),
                Some(ip),
                "GID 0 of device {index}"
            );
        }
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&ip.octets());
        assert_eq!(ip_of_gid(&mapped), Some(ip));
        // Another vendor's link-local GID (a MAC-derived EUI-64), a global IPv6 GID, a
        // subnet prefix that is not link-local: no IPv4 host.
        assert_eq!(ip_of_gid(&link_local(0x0a00_27ff_fe12_3456)), None);
        let mut v6 = mapped;
        v6[0] = 0x20;
        assert_eq!(ip_of_gid(&v6), None);
        let mut other = link_local(node_guid(ip, 0));
        other[3] = 1;
        assert_eq!(ip_of_gid(&other), None);
        assert_eq!(ip_of_gid(&[0; 16]), None);
    }

    #[test]
    fn node_names_are_ferroce_own() {
        assert_eq!(node_path(1), "/dev/infiniband/ferroce_uverbs1");
        assert!(!uverbs_name(0).starts_with("uverbs"));
    }
}
