//! UC QPs (`IBV_QPT_UC`): SEND and RDMA WRITE, with and without immediate, unreliable as
//! verbs defines UC: nothing is acknowledged or resent, a work request completes once sent,
//! and a lost packet loses its message (the receiver drops the partial message and
//! resynchronises on the next message's first packet).
//!
//! The QP is the RC QP's machinery with a different transport underneath: RoCEv2 mode
//! creates an IBTA UC QP in the RoCE engine (the UC opcodes, so it speaks to rxe's UC),
//! native mode an unreliable stream of the connection to the peer (spec/transport.md
//! §3.5). What differs in the verbs layer is here: the attribute masks `ibv_modify_qp`
//! accepts, and the opcodes `ibv_post_send` takes.

use crate::state::{Mode, QpInner, QpShared};
use crate::sys::*;
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::roce::QpParams;
use ferroce_transport::{ConnId, PostError, Transport};

/// Whether `ibv_modify_qp` from `cur` to `new` with attribute `mask` is valid for a UC QP:
/// every required attribute present and nothing beyond the optional ones, as the kernel's
/// `ib_modify_qp_is_ok` table defines UC (no RNR, retry, timeout or RDMA-atomic fields).
pub fn modify_ok(cur: u32, new: u32, mask: u32) -> bool {
    let (req, opt) = match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
            IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (
            IBV_QP_SQ_PSN,
            IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
        ),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (
            0,
            IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
        ),
        _ => return false,
    };
    mask & req == req && mask & !(req | opt | IBV_QP_STATE) == 0
}

/// The send opcodes a UC QP has.
pub fn opcode_ok(op: u32) -> bool {
    matches!(
        op,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM
    )
}

/// Wait (at most 1 s) until the engine has run every command posted so far. A UC QP's
/// `ibv_post_recv` returns only then: on a NIC a posted receive is in place for any packet
/// that arrives after the call, and a UC SEND that finds no receive is lost (RC's would be
/// answered with an RNR NAK and resent). The engine handles the frames of a poll before the
/// commands queued meanwhile, so without the wait a peer told "ready" right after the post
/// (qperf's pingpong) can find its first message dropped.
pub fn barrier(mode: Mode) {
    let Some(e) = crate::state::running(mode) else {
        return;
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let sent = e.h.command(Command::Exec(TransportFn(Box::new(move |_| {
        let _ = tx.send(());
    }))));
    if sent && rx.recv_timeout(std::time::Duration::from_secs(1)).is_err() {
        crate::state::dbg_log!("UC receive: the engine did not run its commands within 1 s");
    }
}

/// Create the UC QP's stream on `conn` (engine thread).
pub fn create_stream(
    t: &mut dyn Transport,
    qp: &QpShared,
    inner: &QpInner,
    conn: ConnId,
) -> Result<(), PostError> {
    match qp.mode {
        Mode::Native => match t.engine_mut().native() {
            Some(ep) => ep.create_uc_stream(conn, qp.qpn, inner.remote_qpn, qp.pd),
            None => Err(PostError::Unsupported),
        },
        Mode::Roce => match t.engine_mut().roce() {
            Some(ep) => ep.create_uc_qp(
                conn,
                QpParams {
                    local_qpn: qp.qpn,
                    remote_qpn: inner.remote_qpn,
                    pd: qp.pd,
                    sq_psn: inner.sq_psn,
                    rq_psn: inner.rq_psn,
                    mtu: inner.path_mtu,
                },
            ),
            None => Err(PostError::UnknownConnection),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uc_masks_follow_the_kernel_table() {
        let init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        assert!(modify_ok(IBV_QPS_RESET, IBV_QPS_INIT, init));
        assert!(!modify_ok(
            IBV_QPS_RESET,
            IBV_QPS_INIT,
            IBV_QP_STATE | IBV_QP_PORT
        ));
        // ibv_uc_pingpong's RTR and RTS.
        let rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        assert!(modify_ok(IBV_QPS_INIT, IBV_QPS_RTR, rtr));
        assert!(modify_ok(
            IBV_QPS_RTR,
            IBV_QPS_RTS,
            IBV_QP_STATE | IBV_QP_SQ_PSN
        ));
        // RC's extra attributes are errors on UC.
        assert!(!modify_ok(
            IBV_QPS_INIT,
            IBV_QPS_RTR,
            rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
        ));
        assert!(!modify_ok(
            IBV_QPS_RTR,
            IBV_QPS_RTS,
            IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY
        ));
        assert!(!modify_ok(
            IBV_QPS_RTR,
            IBV_QPS_RTS,
            IBV_QP_STATE | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN
        ));
        assert!(!modify_ok(
            IBV_QPS_INIT,
            IBV_QPS_RTR,
            rtr & !IBV_QP_PATH_MTU
        ));
        assert!(modify_ok(IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_STATE));
        assert!(!modify_ok(
            IBV_QPS_RESET,
            IBV_QPS_RTS,
            IBV_QP_STATE | IBV_QP_SQ_PSN
        ));
        assert!(!opcode_ok(IBV_WR_RDMA_READ) && opcode_ok(IBV_WR_RDMA_WRITE_WITH_IMM));
    }
}
