//! Fuzz the native wire parser (and the CM messages that travel in native packets): any bytes
//! must parse or fail without panicking, and whatever parses must re-emit to a packet that
//! parses back to the same value, of the same length except for an ACK_MULTI, whose SACK words
//! a receiver takes in any number but an encoder writes in the fewest (spec/wire.md §2.10.1,
//! vector ack_multi_nonminimal).
#![no_main]

use ferroce_transport::cm::CmMsg;
use ferroce_transport::wire::{Opcode, Packet, PacketView};
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
        if v_opcode(data) == Some(Opcode::AckMulti) {
            assert!(n <= data.len(), "re-emitted ACK_MULTI is longer");
        } else {
            assert_eq!(n, data.len(), "re-emitted length differs");
        }
        let q = Packet::parse(&buf[..n]).expect("re-emitted packet does not parse");
        assert_eq!(p, q, "re-parsed packet differs");
    }
    if let Ok(m) = CmMsg::parse(data) {
        let mut buf = vec![0u8; m.len()];
        let n = m.emit(&mut buf).expect("emit of a parsed CM message");
        let again = CmMsg::parse(&buf[..n]).expect("re-emitted CM message does not parse");
        assert_eq!(m, again, "re-parsed CM message differs");
    }
});

fn v_opcode(data: &[u8]) -> Option<Opcode> {
    PacketView::new_checked(data).ok().map(|v| v.opcode())
}
