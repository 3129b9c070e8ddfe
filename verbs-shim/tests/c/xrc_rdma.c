/* XRC traffic of one process through the unmodified ABI: an XRC_SEND QP connected to an
 * XRC_RECV QP of this process (GID index 1: the device's own address, which needs the
 * namespace's hairpin), on the device named by -d. SENDs land in the XRC SRQ they name (on
 * that SRQ's CQ), RDMA WRITE, READ, FETCH_ADD and CMP_SWAP reach the target's memory through
 * the XRC_RECV QP; a WRITE to memory of a PD that has no SRQ in the target's domain fails
 * with a remote access error (spec/transport.md XRC-3); WRITE with immediate is EOPNOTSUPP
 * at post. Prints one line per check and "RESULT ok" at the end. Compiled by
 * tests/verbs_ex.rs against the system <infiniband/verbs.h>. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* INIT -> RTR (-> RTS for the initiator) towards `peer` (this process, GID index 1). */
static int connect_to(struct ibv_context *ctx, struct ibv_qp *q, uint32_t peer, int rts)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = peer,
		.rq_psn = 9, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 1,
								   .hop_limit = 1 } },
	};
	if (ibv_query_gid(ctx, 1, 1, &a.ah_attr.grh.dgid))
		return -1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		return -1;
	if (!rts)
		return 0;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 9;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int to_init(struct ibv_qp *q, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
}

/* Post one work request on the initiator for SRQ `srqn`; its completion's status, or -1. */
static int run(struct ibv_qp *ini, struct ibv_cq *scq, struct ibv_send_wr *wr, uint32_t srqn)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	wr->send_flags |= IBV_SEND_SIGNALED;
	wr->qp_type.xrc.remote_srqn = srqn;
	if (ibv_post_send(ini, wr, &bad))
		return -1;
	if (!poll_one(scq, &wc) || wc.wr_id != wr->wr_id)
		return -1;
	return wc.status;
}

int main(int argc, char **argv)
{
	const char *name = argc > 2 && !strcmp(argv[1], "-d") ? argv[2] : "ferroce0";
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		printf("no device %s\n", name);
		return 2;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other_pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
	if (!pd || !other_pd || !scq || !rcq || !x) {
		printf("no PD, CQ or XRCD\n");
		return 2;
	}
	struct ibv_srq *srq[2];
	uint32_t srqn[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_srq_init_attr_ex sa = {
			.attr = { .max_wr = 8, .max_sge = 1 },
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
				     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
			.srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = rcq,
		};
		srq[i] = ibv_create_srq_ex(ctx, &sa);
		if (!srq[i] || ibv_get_srq_num(srq[i], &srqn[i])) {
			printf("no XRC SRQ\n");
			return 2;
		}
	}
	/* Target memory (PD of the SRQs), another PD's, the initiator's. */
	static uint64_t tgt[512] __attribute__((aligned(8))), foreign[64], local[512], rbuf[2][64];
	int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *tmr = ibv_reg_mr(pd, tgt, sizeof tgt, remote);
	struct ibv_mr *fmr = ibv_reg_mr(other_pd, foreign, sizeof foreign, remote);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof local, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!tmr || !fmr || !lmr || !rmr) {
		printf("no MR\n");
		return 2;
	}
	/* One receive in each SRQ. */
	for (int i = 0; i < 2; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)rbuf[i], .length = sizeof rbuf[i],
				     .lkey = rmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		check(!ibv_post_srq_recv(srq[i], &rw, &bad), "post a receive to each XRC SRQ");
	}
	struct ibv_qp_init_attr_ex ra = {
		.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x,
	};
	struct ibv_qp_init_attr_ex sa = {
		.qp_type = IBV_QPT_XRC_SEND, .send_cq = scq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
	};
	struct ibv_qp *t = ibv_create_qp_ex(ctx, &ra), *ini = ibv_create_qp_ex(ctx, &sa);
	check(t && ini && !to_init(t, remote) && !to_init(ini, 0) &&
		      !connect_to(ctx, t, ini->qp_num, 0) && !connect_to(ctx, ini, t->qp_num, 1),
	      "XRC_RECV in RTR and XRC_SEND in RTS, connected");
	if (failed) {
		printf("RESULT FAIL\n");
		return 1;
	}

	/* SEND to the second SRQ (inline), then to the first (from registered memory). */
	for (int i = 0; i < 512; i++)
		local[i] = 0x1000 + i;
	struct ibv_wc wc;
	struct ibv_sge ls = { .addr = (uintptr_t)local, .length = 40, .lkey = lmr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ls, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE };
	check(run(ini, scq, &w, srqn[1]) == IBV_WC_SUCCESS, "XRC SEND (inline) completes");
	check(poll_one(rcq, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 101 &&
		      wc.byte_len == 40 && wc.qp_num == t->qp_num && !memcmp(rbuf[1], local, 40),
	      "it lands in the SRQ it names, on the SRQ's CQ, from the XRC_RECV QP");
	ls.addr = (uintptr_t)&local[8];
	ls.length = 64;
	w = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(0x55) };
	check(run(ini, scq, &w, srqn[0]) == IBV_WC_SUCCESS, "XRC SEND with immediate completes");
	check(poll_one(rcq, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 &&
		      wc.byte_len == 64 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htonl(0x55) && !memcmp(rbuf[0], &local[8], 64),
	      "it lands in the other SRQ with its immediate");

	/* RDMA WRITE of 3000 bytes (3 packets at MTU 1024), READ it back elsewhere. */
	ls.addr = (uintptr_t)local;
	ls.length = 3000;
	w = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .wr.rdma = { .remote_addr = (uintptr_t)&tgt[8], .rkey = tmr->rkey } };
	check(run(ini, scq, &w, srqn[0]) == IBV_WC_SUCCESS && !memcmp(&tgt[8], local, 3000),
	      "XRC RDMA WRITE reaches the target's memory");
	ls.addr = (uintptr_t)&local[400];
	ls.length = 800;
	w = (struct ibv_send_wr){ .wr_id = 4, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ,
				  .wr.rdma = { .remote_addr = (uintptr_t)&tgt[8], .rkey = tmr->rkey } };
	check(run(ini, scq, &w, srqn[1]) == IBV_WC_SUCCESS && !memcmp(&local[400], local, 800),
	      "XRC RDMA READ reads it back");

	/* Atomics on tgt[0]. */
	tgt[0] = 40;
	ls.addr = (uintptr_t)&local[500];
	ls.length = 8;
	w = (struct ibv_send_wr){ .wr_id = 5, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .wr.atomic = { .remote_addr = (uintptr_t)tgt, .rkey = tmr->rkey,
						 .compare_add = 2 } };
	check(run(ini, scq, &w, srqn[0]) == IBV_WC_SUCCESS && local[500] == 40 && tgt[0] == 42,
	      "XRC FETCH_ADD");
	w = (struct ibv_send_wr){ .wr_id = 6, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				  .wr.atomic = { .remote_addr = (uintptr_t)tgt, .rkey = tmr->rkey,
						 .compare_add = 42, .swap = 7 } };
	check(run(ini, scq, &w, srqn[0]) == IBV_WC_SUCCESS && local[500] == 42 && tgt[0] == 7,
	      "XRC CMP_SWAP");

	/* WRITE with immediate: refused at post; nothing sent. */
	struct ibv_send_wr *bad;
	ls.length = 8;
	w = (struct ibv_send_wr){ .wr_id = 7, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = (uintptr_t)tgt, .rkey = tmr->rkey } };
	w.qp_type.xrc.remote_srqn = srqn[0];
	check(ibv_post_send(ini, &w, &bad) == EOPNOTSUPP && bad == &w,
	      "XRC RDMA WRITE with immediate: EOPNOTSUPP at post");

	/* Memory of a PD with no SRQ in the domain: a remote access error, nothing written. */
	w = (struct ibv_send_wr){ .wr_id = 8, .sg_list = &ls, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .wr.rdma = { .remote_addr = (uintptr_t)foreign, .rkey = fmr->rkey } };
	check(run(ini, scq, &w, srqn[0]) == IBV_WC_REM_ACCESS_ERR && foreign[0] == 0,
	      "XRC WRITE to another PD's memory: IBV_WC_REM_ACCESS_ERR");

	ibv_destroy_qp(ini);
	ibv_destroy_qp(t);
	for (int i = 0; i < 2; i++)
		ibv_destroy_srq(srq[i]);
	ibv_close_xrcd(x);
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
