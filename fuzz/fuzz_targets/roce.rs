//! Fuzz the RoCEv2 parser (BTH, extended headers, pad, ICRC position): any UDP payload must
//! parse or fail without panicking; a parsed packet re-emits (without its ICRC) to the same
//! length and parses back to the same value.
#![no_main]

use ferroce_transport::roce::wire::{Packet, PacketView, ICRC_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = PacketView::new_checked(data) {
        let _ = (
            v.opcode(),
            v.psn(),
            v.dest_qpn(),
            v.pad_count(),
            v.ext_bytes(),
            v.payload(),
            v.pad_bytes(),
            v.icrc(),
            v.icrc_covered(),
        );
    }
    if let Ok(p) = Packet::parse(data) {
        assert_eq!(p.buffer_len(), data.len(), "parsed length differs");
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p
            .emit_without_icrc(&mut buf)
            .expect("emit of a parsed packet");
        assert_eq!(n + ICRC_LEN, data.len(), "re-emitted length differs");
        let q = Packet::parse(&buf).expect("re-emitted packet does not parse");
        assert_eq!(p, q, "re-parsed packet differs");
    }
});
