//! Decoding an application's `ibv_send_wr` into the engine's request: the checks and the
//! opcode → [`SendOp`] mapping of `ibv_post_send`, apart from the QP state and the engine so
//! that it can be tested and fuzzed on its own. [`decode_send_wr_bytes`] is the fuzzing entry
//! point: arbitrary bytes taken as a work request image plus its scatter/gather list, with
//! every pointer in the image ignored (nothing outside the given bytes is read).

use crate::sys::*;
use ferroce_transport::{SendOp, SgList, Sge};
use std::ffi::c_int;
use std::mem::size_of;

/// Scatter/gather entries a work request may carry at most (what `ibv_create_qp` accepts).
pub const MAX_SGE: u32 = 16;

/// What the QP allows, for [`decode_send`].
#[derive(Clone, Copy, Debug)]
pub struct SendLimits {
    /// The QP's `max_send_sge`.
    pub max_sge: u32,
    /// Inline data limit (bytes).
    pub max_inline: u32,
    /// A UC QP: no READ or atomics.
    pub uc: bool,
}

/// One decoded work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedSend {
    pub op: SendOp,
    /// `IBV_SEND_INLINE` on an operation that carries data: the total length to copy.
    pub inline_len: Option<u64>,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
}

/// `num_sge` in range for this QP (checked before the list is read).
pub fn num_sge_ok(num_sge: c_int, lim: &SendLimits) -> bool {
    num_sge >= 0 && num_sge as u32 <= lim.max_sge.min(MAX_SGE)
}

/// Decode `w` with its already-read scatter/gather list; `Err(EINVAL)` for what
/// `ibv_post_send` refuses (it sets `bad_wr` then).
pub fn decode_send(w: &ibv_send_wr, sgl: &SgList, lim: &SendLimits) -> Result<DecodedSend, c_int> {
    if !num_sge_ok(w.num_sge, lim) || sgl.len() != w.num_sge as usize {
        return Err(libc::EINVAL);
    }
    if lim.uc && !crate::uc::opcode_ok(w.opcode) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the unions hold plain integers (every bit pattern is valid); the opcode says
    // which member the application meant, and only that one is used below.
    let (rdma, atomic, imm) = unsafe { (w.wr.rdma, w.wr.atomic, w.__bindgen_anon_1.imm_data) };
    let imm = u32::from_be(imm);
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send { imm: None },
        IBV_WR_SEND_WITH_IMM => SendOp::Send { imm: Some(imm) },
        IBV_WR_RDMA_WRITE => SendOp::Write {
            rkey: rdma.rkey,
            raddr: rdma.remote_addr,
            imm: None,
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::Write {
            rkey: rdma.rkey,
            raddr: rdma.remote_addr,
            imm: Some(imm),
        },
        IBV_WR_RDMA_READ => SendOp::Read {
            rkey: rdma.rkey,
            raddr: rdma.remote_addr,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            rkey: atomic.rkey,
            raddr: atomic.remote_addr,
            add: atomic.compare_add,
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CmpSwap {
            rkey: atomic.rkey,
            raddr: atomic.remote_addr,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        _ => return Err(libc::EINVAL),
    };
    let flags = w.send_flags;
    let carries_data = matches!(
        w.opcode,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM
    );
    let inline_len = if flags & IBV_SEND_INLINE != 0 && carries_data {
        let total: u64 = sgl.iter().map(|s| s.len as u64).sum();
        if total > lim.max_inline as u64 {
            return Err(libc::EINVAL);
        }
        Some(total)
    } else {
        None
    };
    Ok(DecodedSend {
        op,
        inline_len,
        signaled: flags & IBV_SEND_SIGNALED != 0,
        solicited: flags & IBV_SEND_SOLICITED != 0,
        fence: flags & IBV_SEND_FENCE != 0,
    })
}

/// Bytes of one `ibv_sge` in a [`decode_send_wr_bytes`] input.
pub const SGE_BYTES: usize = size_of::<ibv_sge>();

/// The fuzzing entry point: the first `size_of::<ibv_send_wr>()` bytes of `data` (zero-padded
/// when shorter) are a work request as an application would lay it out, the rest its
/// scatter/gather entries, [`SGE_BYTES`] each. The image's `next` and `sg_list` pointers are
/// replaced by null and never followed; a `num_sge` that the bytes do not cover is refused as a
/// short list would be.
pub fn decode_send_wr_bytes(data: &[u8], lim: &SendLimits) -> Result<DecodedSend, c_int> {
    let n = size_of::<ibv_send_wr>();
    let mut img = vec![0u8; n];
    let k = data.len().min(n);
    img[..k].copy_from_slice(&data[..k]);
    // SAFETY: `img` holds exactly size_of::<ibv_send_wr>() initialised bytes, read unaligned;
    // every field of ibv_send_wr is an integer, a raw pointer or a union of those, for which
    // every bit pattern is a valid value. The pointers are overwritten before any use.
    let mut w: ibv_send_wr = unsafe { std::ptr::read_unaligned(img.as_ptr().cast()) };
    w.next = std::ptr::null_mut();
    w.sg_list = std::ptr::null_mut();
    if !num_sge_ok(w.num_sge, lim) {
        return Err(libc::EINVAL);
    }
    let rest = data.get(n..).unwrap_or(&[]);
    if rest.len() / SGE_BYTES < w.num_sge as usize {
        return Err(libc::EINVAL);
    }
    let mut sgl = SgList::new();
    for c in rest.chunks_exact(SGE_BYTES).take(w.num_sge as usize) {
        let u64_at = |o: usize| u64::from_ne_bytes(c[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_ne_bytes(c[o..o + 4].try_into().unwrap_or([0; 4]));
        sgl.push(Sge {
            addr: u64_at(0),
            len: u32_at(8),
            lkey: u32_at(12),
        });
    }
    decode_send(&w, &sgl, lim)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: SendLimits = SendLimits {
        max_sge: 4,
        max_inline: 64,
        uc: false,
    };

    fn image(w: &ibv_send_wr, sges: &[ibv_sge]) -> Vec<u8> {
        let mut v = vec![0u8; size_of::<ibv_send_wr>()];
        // SAFETY: copying the bytes of a plain C struct into a buffer of its size.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (w as *const ibv_send_wr).cast::<u8>(),
                v.as_mut_ptr(),
                v.len(),
            )
        };
        for s in sges {
            v.extend_from_slice(&s.addr.to_ne_bytes());
            v.extend_from_slice(&s.length.to_ne_bytes());
            v.extend_from_slice(&s.lkey.to_ne_bytes());
        }
        v
    }

    /// The layout fuzz/make_seeds.py writes its seed work requests in.
    #[test]
    fn the_seed_layout_is_the_structs() {
        use std::mem::offset_of;
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(SGE_BYTES, 16);
        assert_eq!(offset_of!(ibv_send_wr, num_sge), 24);
        assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
        assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
        assert_eq!(offset_of!(ibv_send_wr, __bindgen_anon_1), 36);
        assert_eq!(offset_of!(ibv_send_wr, wr), 40);
        assert_eq!(
            offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_2, rkey),
            24
        );
    }

    #[test]
    fn a_write_with_imm_decodes_from_its_bytes() {
        let mut w = ibv_send_wr {
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: IBV_SEND_SIGNALED | IBV_SEND_INLINE,
            ..Default::default()
        };
        w.wr.rdma.remote_addr = 0x1234_5678_9abc;
        w.wr.rdma.rkey = 77;
        w.__bindgen_anon_1.imm_data = 0xdead_beefu32.to_be();
        // A pointer in the image is never followed.
        w.sg_list = 0x10 as *mut ibv_sge;
        let sge = ibv_sge {
            addr: 0x1000,
            length: 40,
            lkey: 9,
        };
        let d = decode_send_wr_bytes(&image(&w, &[sge]), &LIM).expect("valid WR");
        assert_eq!(
            d.op,
            SendOp::Write {
                rkey: 77,
                raddr: 0x1234_5678_9abc,
                imm: Some(0xdead_beef)
            }
        );
        assert_eq!(d.inline_len, Some(40));
        assert!(d.signaled && !d.solicited && !d.fence);
    }

    #[test]
    fn bad_work_requests_are_einval() {
        let sge = ibv_sge {
            addr: 0,
            length: 100,
            lkey: 1,
        };
        let base = ibv_send_wr {
            num_sge: 1,
            opcode: IBV_WR_SEND,
            ..Default::default()
        };
        // Unknown opcode, too many SGEs, an SGE count the bytes do not hold, inline too long,
        // READ on a UC QP.
        let cases: Vec<(ibv_send_wr, Vec<ibv_sge>, SendLimits)> = vec![
            (ibv_send_wr { opcode: 99, ..base }, vec![sge], LIM),
            (ibv_send_wr { num_sge: 5, ..base }, vec![sge; 5], LIM),
            (
                ibv_send_wr {
                    num_sge: -1,
                    ..base
                },
                vec![],
                LIM,
            ),
            (ibv_send_wr { num_sge: 2, ..base }, vec![sge], LIM),
            (
                ibv_send_wr {
                    send_flags: IBV_SEND_INLINE,
                    ..base
                },
                vec![sge],
                LIM,
            ),
            (
                ibv_send_wr {
                    opcode: IBV_WR_RDMA_READ,
                    ..base
                },
                vec![sge],
                SendLimits { uc: true, ..LIM },
            ),
        ];
        for (i, (w, s, lim)) in cases.iter().enumerate() {
            assert_eq!(
                decode_send_wr_bytes(&image(w, s), lim),
                Err(libc::EINVAL),
                "case {i}"
            );
        }
        // Short or empty input is a zeroed WR: opcode 0, an RDMA WRITE with no SGEs.
        assert_eq!(
            decode_send_wr_bytes(&[], &LIM).map(|d| d.op),
            Ok(SendOp::Write {
                rkey: 0,
                raddr: 0,
                imm: None
            })
        );
    }
}
