/* RoCEv2 QPs between RTR and RTS. The shim creates a QP's engine QP at RTR (an RTR QP must
 * respond) and gives it its send queue's PSN at RTS. Two checks, each over two RC QPs of this
 * process and the namespace's hairpin (GID index 1):
 * - a QP that stays in RTR a while (a slow or loaded application) must, once in RTS, send
 *   from the sq_psn RTS names, or its first request is out of sequence at the peer for good
 *   (the peer NAKs a PSN the QP never sent, every resend is out of sequence again): QP b
 *   waits 50 ms in RTR, then both directions WRITE;
 * - a QP just moved to RTR answers a WRITE at once: QP d goes to RTR and stays there, c
 *   connects and WRITEs to it immediately, and the WRITE must complete well before c's
 *   local ACK timeout (67 ms) could have resent it (it did not while the shim created RTR
 *   QPs only 2 ms later, on a thread).
 * Prints one line per check and "RESULT ok" at the end. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static int to_init(struct ibv_qp *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE };
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
}

/* RTR towards `peer` expecting its requests from `rq_psn`. */
static int to_rtr(struct ibv_context *ctx, struct ibv_qp *q, uint32_t peer, uint32_t rq_psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = peer,
		.rq_psn = rq_psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 1,
								   .hop_limit = 1 } },
	};
	if (ibv_query_gid(ctx, 1, 1, &a.ah_attr.grh.dgid))
		return -1;
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *q, uint32_t sq_psn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = sq_psn, .timeout = 14,
				 .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4 };
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_MAX_QP_RD_ATOMIC);
}

#define LEN 4096
static uint8_t buf_a[LEN], buf_b[LEN];

/* A signaled RDMA WRITE of LEN bytes from `q`: 1 if it completed successfully. */
static int write_one(struct ibv_qp *q, struct ibv_cq *cq, void *src, struct ibv_mr *smr,
		     void *dst, struct ibv_mr *dmr)
{
	struct ibv_sge s = { .addr = (uintptr_t)src, .length = LEN, .lkey = smr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = { .remote_addr = (uintptr_t)dst, .rkey = dmr->rkey } },
			    *bad;
	struct ibv_wc wc;
	return !ibv_post_send(q, &w, &bad) && poll_one(cq, &wc) && wc.status == IBV_WC_SUCCESS;
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
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *ma = ibv_reg_mr(pd, buf_a, LEN, acc), *mb = ibv_reg_mr(pd, buf_b, LEN, acc);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
	if (!pd || !cq || !ma || !mb || !a || !b) {
		printf("no PD, CQ, MR or QP\n");
		return 2;
	}
	/* Each QP's sq_psn is the other's rq_psn: a sends from 100, b from 5000. */
	check(!to_init(a) && !to_init(b) && !to_rtr(ctx, b, a->qp_num, 100),
	      "b in RTR (expects a's requests from PSN 100)");
	usleep(50 * 1000); /* b stays in RTR: a responder only */
	check(!to_rts(b, 5000) && !to_rtr(ctx, a, b->qp_num, 5000) && !to_rts(a, 100),
	      "b to RTS late (its requests from PSN 5000), a connected");
	if (failed) {
		printf("RESULT FAIL\n");
		return 1;
	}
	memset(buf_a, 0xa5, LEN);
	memset(buf_b, 0x5b, LEN);
	check(write_one(a, cq, buf_a, ma, buf_b, mb) && buf_b[LEN - 1] == 0xa5,
	      "a WRITEs to b (b responds)");
	memset(buf_b, 0x3c, LEN);
	check(write_one(b, cq, buf_b, mb, buf_a, ma) && buf_a[LEN - 1] == 0x3c,
	      "b, late to RTS, WRITEs to a from the PSN RTS named");
	check(write_one(b, cq, buf_b, mb, buf_a, ma), "and again");

	struct ibv_qp *c = ibv_create_qp(pd, &qa), *d = ibv_create_qp(pd, &qa);
	check(c && d && !to_init(c) && !to_init(d) && !to_rtr(ctx, d, c->qp_num, 300),
	      "d in RTR (expects c's requests from PSN 300)");
	check(c && d && !to_rtr(ctx, c, d->qp_num, 7000) && !to_rts(c, 300), "c connected");
	memset(buf_a, 0x77, LEN);
	double t0 = now_s();
	int ok = c && d && write_one(c, cq, buf_a, ma, buf_b, mb) && buf_b[0] == 0x77;
	double ms = (now_s() - t0) * 1e3;
	printf("WRITE to a QP in RTR: %.1f ms\n", ms);
	check(ok && ms < 40, "c WRITEs to d while d is in RTR: answered at once (< 40 ms)");
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
