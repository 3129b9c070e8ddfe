/* The extended CQ and QP through the inline functions of the system verbs.h
 * (ibv_create_cq_ex, ibv_start_poll/ibv_next_poll/ibv_end_poll, ibv_wc_read_*; ibv_wr_start,
 * ibv_wr_send_imm, ibv_wr_set_ud_addr, ibv_wr_set_sge, ibv_wr_set_inline_data,
 * ibv_wr_complete, ibv_wr_abort), which call the function pointers of struct ibv_cq_ex and
 * struct ibv_qp_ex: so this checks the shim's layout of those structs too.
 * Completions come from UD datagrams to the device's own GID (index 1), which the shim
 * delivers itself, and from flushing a QP. One device, named by -d; one line per check and
 * "RESULT ok" at the end. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", what, ok ? "ok" : "FAIL");
	if (!ok)
		failed = 1;
}

/* start_poll until it returns something other than ENOENT, for at most 5 s. */
static int start(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int r = ibv_start_poll(cq, &attr);
		if (r != ENOENT)
			return r;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			return ENOENT;
	}
}

int main(int argc, char **argv)
{
	const char *name = argc > 2 && !strcmp(argv[1], "-d") ? argv[2] : "ferroce0";
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		printf("no device %s\n", name);
		return 2;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	/* What the device does not fill is refused. */
	struct ibv_cq_init_attr_ex bad = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &bad) && errno == EOPNOTSUPP, "completion timestamps: EOPNOTSUPP");
	bad.wc_flags = IBV_WC_STANDARD_FLAGS;
	bad.comp_vector = ctx->num_comp_vectors;
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &bad) && errno == EINVAL, "comp_vector out of range: EINVAL");

	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	check(cq != NULL, "ibv_create_cq_ex with IBV_WC_STANDARD_FLAGS");
	if (!cq)
		return 1;
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	check(ibv_start_poll(cq, &pa) == ENOENT, "empty CQ: ENOENT");
	pa.comp_mask = 1;
	check(ibv_start_poll(cq, &pa) == EINVAL, "poll attr comp_mask 1: EINVAL");

	/* A UD QP on the extended CQ (as a plain ibv_cq), a datagram to itself. */
	struct ibv_qp_init_attr qa = {
		.send_cq = ibv_cq_ex_to_cq(cq),
		.recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	check(qp != NULL, "UD QP on the extended CQ");
	if (!qp)
		return 1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	a.qp_state = IBV_QPS_RTR;
	r |= ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	r |= ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	check(r == 0, "UD QP to RTS");

	enum { N = 100 };
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < N; i++)
		buf[2048 + i] = (char)(i + 1);
	struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = 40 + N, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *bad_r;
	check(ibv_post_recv(qp, &rwr, &bad_r) == 0, "post a receive");

	union ibv_gid gid;
	check(ibv_query_gid(ctx, 1, 1, &gid) == 0, "own GID (index 1)");
	struct ibv_ah_attr aha = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aha);
	check(ah != NULL, "AH to own GID");
	struct ibv_sge ss = { .addr = (uintptr_t)buf + 2048, .length = N, .lkey = mr->lkey };
	struct ibv_send_wr swr = {
		.wr_id = 9,
		.sg_list = &ss,
		.num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0x12345678),
		.wr = { .ud = { .ah = ah, .remote_qpn = qp->qp_num, .remote_qkey = 0x11111111 } },
	}, *bad_s;
	check(ibv_post_send(qp, &swr, &bad_s) == 0, "post SEND_WITH_IMM to itself");

	/* Both completions, in any order, through start_poll / next_poll. */
	int got_send = 0, got_recv = 0, n = 0;
	r = start(cq);
	check(r == 0, "start_poll finds a completion");
	while (r == 0 && n < 4) {
		n++;
		if (cq->wr_id == 9) {
			got_send = cq->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cq) == IBV_WC_SEND &&
				   ibv_wc_read_qp_num(cq) == qp->qp_num;
		} else if (cq->wr_id == 7) {
			got_recv = cq->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cq) == IBV_WC_RECV &&
				   ibv_wc_read_byte_len(cq) == 40 + N &&
				   be32toh(ibv_wc_read_imm_data(cq)) == 0x12345678 &&
				   ibv_wc_read_qp_num(cq) == qp->qp_num &&
				   ibv_wc_read_src_qp(cq) == qp->qp_num &&
				   (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) &&
				   (ibv_wc_read_wc_flags(cq) & IBV_WC_GRH) &&
				   /* sl: what the GRH bytes hold, as mlx5 reports it (0xa: a UDP
				    * header, RoCEv2, over IPv4; ud.rs; UCX reads it) */
				   ibv_wc_read_slid(cq) == 0 && ibv_wc_read_sl(cq) == 0xa &&
				   ibv_wc_read_dlid_path_bits(cq) == 0 &&
				   ibv_wc_read_vendor_err(cq) == 0;
		}
		r = ibv_next_poll(cq);
		if (r == ENOENT && !(got_send && got_recv)) {
			ibv_end_poll(cq);
			r = start(cq);
		}
	}
	ibv_end_poll(cq);
	check(got_send, "send completion: wr_id, status, opcode, qp_num");
	check(got_recv, "receive completion: byte_len, imm, qp_num, src_qp, wc_flags, slid, sl");
	check(!memcmp(buf + 40, buf + 2048, N), "the datagram's payload after the GRH");
	check(ibv_start_poll(cq, NULL) == ENOENT, "nothing more: ENOENT");

	/* The ibv_wr_* API on a second UD QP: create_qp_ex with send ops, two sends in one
	 * wr_start/wr_complete (an SGE and inline data), one aborted batch. */
	struct ibv_qp_init_attr_ex xa = {
		.send_cq = ibv_cq_ex_to_cq(cq),
		.recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_UD,
		.pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	check(ibv_qp_to_qp_ex(qp) == NULL, "ibv_qp_to_qp_ex of a QP without send ops: NULL");
	xa.send_ops_flags |= IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &xa) && errno == EOPNOTSUPP, "UD QP with RDMA_WRITE: EOPNOTSUPP");
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW;
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &xa) && errno == EOPNOTSUPP, "BIND_MW: EOPNOTSUPP");
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	struct ibv_qp *q2 = ibv_create_qp_ex(ctx, &xa);
	struct ibv_qp_ex *qx = q2 ? ibv_qp_to_qp_ex(q2) : NULL;
	check(qx != NULL && (void *)qx == (void *)q2, "create_qp_ex with send ops; ibv_qp_to_qp_ex");
	if (!qx)
		return 1;
	a.qp_state = IBV_QPS_INIT;
	r = ibv_modify_qp(q2, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	a.qp_state = IBV_QPS_RTR;
	r |= ibv_modify_qp(q2, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	r |= ibv_modify_qp(q2, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	check(r == 0, "second UD QP to RTS");
	for (int i = 0; i < 2; i++) {
		rs.addr = (uintptr_t)buf + 512 * i;
		rwr.wr_id = 20 + i;
		ibv_post_recv(q2, &rwr, &bad_r);
	}
	ibv_wr_start(qx);
	qx->wr_id = 31;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, q2->qp_num, 0x11111111);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 2048, N);
	ibv_wr_abort(qx);
	ibv_wr_start(qx);
	qx->wr_id = 32;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htobe32(0xabcdef01));
	ibv_wr_set_ud_addr(qx, ah, q2->qp_num, 0x11111111);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 2048, N);
	qx->wr_id = 33;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, q2->qp_num, 0x11111111);
	ibv_wr_set_inline_data(qx, "inline!", 7);
	check(ibv_wr_complete(qx) == 0, "ibv_wr_complete of two sends");
	int sends = 0, recvs = 0, stray = 0;
	n = 0;
	r = start(cq);
	while (r == 0 && n < 8 && (sends < 2 || recvs < 2)) {
		n++;
		uint64_t id = cq->wr_id;
		if ((id == 32 || id == 33) && cq->status == IBV_WC_SUCCESS &&
		    ibv_wc_read_opcode(cq) == IBV_WC_SEND)
			sends++;
		else if (id == 20 && cq->status == IBV_WC_SUCCESS && ibv_wc_read_byte_len(cq) == 40 + N &&
			 (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) &&
			 be32toh(ibv_wc_read_imm_data(cq)) == 0xabcdef01)
			recvs++;
		else if (id == 21 && cq->status == IBV_WC_SUCCESS && ibv_wc_read_byte_len(cq) == 40 + 7 &&
			 !(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM))
			recvs++;
		else
			stray++;
		r = ibv_next_poll(cq);
		if (r == ENOENT && (sends < 2 || recvs < 2)) {
			ibv_end_poll(cq);
			r = start(cq);
		}
	}
	ibv_end_poll(cq);
	check(sends == 2 && recvs == 2 && stray == 0, "both sends and both receives, nothing from the aborted batch");
	check(!memcmp(buf + 40, buf + 2048, N) && !memcmp(buf + 512 + 40, "inline!", 7),
	      "the SGE's and the inline data's bytes");
	ibv_destroy_qp(q2);

	/* Flushed receives: errors through the same interface; ibv_poll_cq sees the same CQ. */
	for (int i = 0; i < 3; i++) {
		rwr.wr_id = 100 + i;
		ibv_post_recv(qp, &rwr, &bad_r);
	}
	a.qp_state = IBV_QPS_ERR;
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "QP to ERR");
	r = start(cq);
	int flushed = 0;
	if (r == 0) {
		flushed += cq->status == IBV_WC_WR_FLUSH_ERR && cq->wr_id == 100;
		r = ibv_next_poll(cq);
		flushed += r == 0 && cq->status == IBV_WC_WR_FLUSH_ERR && cq->wr_id == 101;
		ibv_end_poll(cq);
	}
	check(flushed == 2, "flushed receives 100, 101 via start_poll/next_poll");
	struct ibv_wc wc;
	check(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 1 && wc.wr_id == 102 &&
		      wc.status == IBV_WC_WR_FLUSH_ERR,
	      "the third through ibv_poll_cq on the same CQ");

	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	check(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq of the extended CQ");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
