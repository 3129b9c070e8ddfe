//! Fuzz the IBTA CM MAD codec (spec/rocev2.md §10): any UD payload must parse or fail
//! without panicking; a parsed MAD re-emits to 256 bytes that parse back to the same value,
//! and a REQ's (or SIDR_REQ's) private data yields a cma_hdr or an error.
#![no_main]

use ferroce_transport::roce::cm::wire::{CmBody, CmMad, CmaHdr, MAD_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = CmMad::parse(data) {
        let b = m.emit().expect("emit of a parsed MAD");
        assert_eq!(b.len(), MAD_LEN);
        let again = CmMad::parse(&b).expect("re-emitted MAD does not parse");
        assert_eq!(m, again, "re-parsed MAD differs");
        let pd = match &m.body {
            CmBody::Req(r) => Some(&r.private_data),
            CmBody::SidrReq(r) => Some(&r.private_data),
            _ => None,
        };
        if let Some(pd) = pd {
            let _ = CmaHdr::parse(pd);
        }
    }
});
