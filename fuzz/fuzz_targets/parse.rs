//! Fuzz the native wire parser: any bytes must parse or fail without panicking, and whatever
//! parses must re-emit to a packet of the same length that parses back to the same value.
#![no_main]

use ferroce_transport::wire::{Packet, PacketView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = PacketView::new_checked(data) {
        let _ = (
            v.opcode(),
            v.flags(),
            v.path(),
            v.dst_conn(),
            v.crc_ok(),
            v.payload(),
        );
    }
    if let Ok(p) = Packet::parse(data) {
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).expect("emit of a parsed packet");
        assert_eq!(n, data.len(), "re-emitted length differs");
        let q = Packet::parse(&buf[..n]).expect("re-emitted packet does not parse");
        assert_eq!(p, q, "re-parsed packet differs");
    }
});
