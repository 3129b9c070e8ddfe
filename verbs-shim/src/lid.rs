//! LIDs on ferroce's ports, for programs that address peers by LID alone (qperf without
//! `-cm1` exchanges LIDs and QPNs, never GIDs; its UC and UD tests never use the CM).
//!
//! The ports are Ethernet (RoCE), where IBTA gives LIDs no meaning and a real NIC refuses an
//! address vector without a GRH. ferroce instead gives each port a LID: the low 16 bits of
//! the engine's IPv4 address (0, no LID, when those are 0 or in the multicast/permissive
//! range ≥ 0xC000), and an address vector without a GRH but with a non-zero DLID names the
//! host of this one's /16 whose low 16 bits are that DLID. An address vector with neither a
//! GRH nor a DLID still names nothing (EINVAL, as rdma-core's tests expect on RoCE).

use std::net::Ipv4Addr;

/// The LID of host `ip`: its low 16 bits, or 0 (no LID) where that is no unicast LID.
pub fn lid_of(ip: Ipv4Addr) -> u16 {
    let l = (u32::from(ip) & 0xffff) as u16;
    if l >= 0xc000 {
        0
    } else {
        l
    }
}

/// The LID the ports report (from the engine's configured address; 0 without one).
pub fn port_lid() -> u16 {
    crate::config::local_ip().map_or(0, lid_of)
}

/// The host a DLID names: this host's /16 with the DLID as its low 16 bits.
pub fn peer_of_lid(dlid: u16) -> Option<Ipv4Addr> {
    if dlid == 0 || dlid >= 0xc000 {
        return None;
    }
    let me = crate::config::local_ip()?;
    Some(Ipv4Addr::from(u32::from(me) & 0xffff_0000 | dlid as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lids_map_to_hosts_of_the_same_slash_16() {
        assert_eq!(lid_of(Ipv4Addr::new(198, 18, 0, 12)), 12);
        assert_eq!(lid_of(Ipv4Addr::new(198, 18, 3, 1)), 0x0301);
        assert_eq!(lid_of(Ipv4Addr::new(198, 18, 0xc0, 1)), 0);
        assert_eq!(lid_of(Ipv4Addr::new(198, 18, 0, 0)), 0);
    }
}
