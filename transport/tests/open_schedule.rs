//! The OPEN resend schedule (spec/transport.md §2.2): an initiator whose peer never answers
//! sends OPEN 16 times, after waits of open_rto x 2^min(k-1, 8) (1, 2, 4 ... 128, 256, 256 ...
//! ms), and the connection fails when the wait after the 16th expires: 2,303 ms after the
//! first OPEN with the defaults. The budget is long so a path still coming up (a memif link
//! attaching, ARP) does not fail the connection before it exists.

use ferroce_transport::mem::Regions;
use ferroce_transport::wire::{Opcode, Packet};
use ferroce_transport::*;
use std::net::Ipv4Addr;

// checks: [OPEN-4]
#[test]
fn open_is_resent_on_its_schedule_then_the_connection_fails() {
    let mut ep = Endpoint::new(EndpointConfig::default());
    let mut mem = Regions::new();
    let conn = ep.connect(Ipv4Addr::new(198, 18, 0, 2));
    let mut buf = vec![0u8; 65_536];
    let mut opens = Vec::new();
    let mut failed_at = None;
    let mut now = 0u64;
    while now < 10_000_000_000 && failed_at.is_none() {
        while let Some(t) = ep.poll_transmit(now, &mut buf, &mut mem) {
            let p = Packet::parse(&buf[..t.len]).expect("a valid packet");
            assert_eq!(p.opcode(), Opcode::Open, "only OPENs to a silent peer");
            opens.push(now);
        }
        while let Some(e) = ep.poll_event() {
            if let Event::Failed { conn: c } = e {
                assert_eq!(c, conn);
                failed_at = Some(now);
            }
        }
        match ep.poll_timeout() {
            Some(t) => {
                now = t.max(now);
                ep.handle_timeout(now);
            }
            None => break,
        }
    }
    assert_eq!(opens.len(), 16, "OPENs sent at {opens:?}");
    let waits: Vec<u64> = opens
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000)
        .collect();
    let want: Vec<u64> = (1..16).map(|k: u32| 1u64 << (k - 1).min(8)).collect();
    assert_eq!(waits, want, "waits between OPENs (ms)");
    let failed_at = failed_at.expect("the connection fails");
    assert_eq!(
        (failed_at - opens[0]) / 1_000_000,
        2_303,
        "the connection fails 2,303 ms after the first OPEN"
    );
}
