//! Fuzz the verbs shim's work-request decoding (verbs-shim/src/wr.rs, what `ibv_post_send`
//! runs on each `ibv_send_wr`): arbitrary bytes as a work request image and its SGEs must
//! decode or be refused with EINVAL, never panic, under a few QP limits; what decodes obeys
//! the limits.
#![no_main]

use ibverbs::wr::{decode_send_wr_bytes, SendLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for lim in [
        SendLimits {
            max_sge: 16,
            max_inline: 4096,
            uc: false,
        },
        SendLimits {
            max_sge: 1,
            max_inline: 0,
            uc: true,
        },
    ] {
        match decode_send_wr_bytes(data, &lim) {
            Ok(d) => {
                if let Some(n) = d.inline_len {
                    assert!(n <= lim.max_inline as u64);
                }
                if lim.uc {
                    assert!(matches!(
                        d.op,
                        ferroce_transport::SendOp::Send { .. }
                            | ferroce_transport::SendOp::Write { .. }
                    ));
                }
            }
            Err(e) => assert_eq!(e, EINVAL),
        }
    }
});

/// Linux's EINVAL, the only error `ibv_post_send` gives a malformed work request.
const EINVAL: i32 = 22;
