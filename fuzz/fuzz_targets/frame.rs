//! Fuzz the DPDK engine's frame parser (Ethernet, ARP, IPv4, UDP; dataplane/src/net.rs): any
//! frame is a UDP datagram or ARP message for us or a counted drop reason, never a panic; a
//! datagram's payload range lies inside the frame; the ECN helpers never panic.
#![no_main]

use ferroce_dataplane::net::{ecn_of, parse_with, set_ecn, Frame};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 11);

fuzz_target!(|data: &[u8]| {
    for (port, verify) in [(4792, true), (4791, false)] {
        match parse_with(data, MAC, IP, port, verify) {
            Ok(Frame::Udp(u)) => {
                assert!(u.payload.0 <= u.payload.1 && u.payload.1 <= data.len());
                assert_eq!(u.dst_port, port);
            }
            Ok(Frame::Arp(_)) => {}
            Err(r) => {
                let _ = r.name();
            }
        }
    }
    let _ = ecn_of(data);
    let mut f = data.to_vec();
    if set_ecn(&mut f, 3) {
        assert_eq!(ecn_of(&f), Some(3));
    }
});
