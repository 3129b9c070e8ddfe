/* Misused verbs calls through the unmodified ABI (issue 15, item 4): bad arguments, wrong
 * states, memory of another protection domain, memory deregistered or QPs destroyed while work
 * is outstanding. Each must get the errno or completion status rdma-core documents (rxe's and
 * mlx5's answers where the man pages leave it open), never a crash of the process or of the
 * engine living in it. One device, named by -d; two RC QPs of this process connected to each
 * other (GID index 1: the device's own address, which needs the namespace's hairpin for
 * RoCEv2). Prints one line per check and "RESULT ok" at the end. Compiled by
 * tests/misuse.rs against the system <infiniband/verbs.h>. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

struct pair {
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
};

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth,
			 .max_send_sge = 2, .max_recv_sge = 2 },
	};
	return ibv_create_qp(pd, &ia);
}

static int to_init(struct ibv_qp *q)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_LOCAL_WRITE,
	};
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR -> RTS towards `peer` (this process, GID index 1). */
static int connect_to(struct ibv_context *ctx, struct ibv_qp *q, struct ibv_qp *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = peer->qp_num,
		.rq_psn = 7, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 1,
								   .hop_limit = 1 } },
	};
	if (ibv_query_gid(ctx, 1, 1, &a.ah_attr.grh.dgid))
		return -1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Two connected RC QPs (a in pd_a, b in pd_b), each with its own CQ. */
static int make_pair(struct ibv_context *ctx, struct ibv_pd *pd_a, struct ibv_pd *pd_b,
		     struct pair *p)
{
	p->cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	p->cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!p->cq_a || !p->cq_b)
		return -1;
	p->a = rc_qp(pd_a, p->cq_a, 32);
	p->b = rc_qp(pd_b, p->cq_b, 32);
	if (!p->a || !p->b || to_init(p->a) || to_init(p->b))
		return -1;
	if (connect_to(ctx, p->b, p->a) || connect_to(ctx, p->a, p->b))
		return -1;
	return 0;
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cq_a);
	ibv_destroy_cq(p->cq_b);
}

static int post_send(struct ibv_qp *q, enum ibv_wr_opcode op, uint64_t id, void *addr,
		     uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0,
				 .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = rkey;
	return ibv_post_send(q, &w, &bad);
}

static int post_recv(struct ibv_qp *q, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad = NULL;
	return ibv_post_recv(q, &w, &bad);
}

/* One SEND (or WRITE) on a fresh pair; the requester's completion status (or -1). */
static int one_op(struct ibv_context *ctx, struct ibv_pd *pd_a, struct ibv_pd *pd_b,
		  enum ibv_wr_opcode op, void *src, uint32_t len, uint32_t lkey, void *dst,
		  uint32_t dlen, uint32_t dkey, uint64_t raddr, uint32_t rkey, int *recv_status)
{
	struct pair p;
	struct ibv_wc wc;
	int st = -1;
	*recv_status = -1;
	if (make_pair(ctx, pd_a, pd_b, &p))
		return -2;
	if (op == IBV_WR_SEND && post_recv(p.b, 2, dst, dlen, dkey))
		goto out;
	if (post_send(p.a, op, 1, src, len, lkey, raddr, rkey))
		goto out;
	if (poll_one(p.cq_a, &wc))
		st = wc.status;
	if (op == IBV_WR_SEND && poll_one_for(p.cq_b, &wc, 0.5))
		*recv_status = wc.status;
out:
	free_pair(&p);
	return st;
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
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	const size_t big = 1 << 20;
	char *buf = aligned_alloc(4096, big), *buf2 = aligned_alloc(4096, big);
	memset(buf, 0x5a, big);
	memset(buf2, 0, big);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	/* --- Registration --- */
	errno = 0;
	check(!ibv_reg_mr(pd, NULL, 4096, acc) && errno == EINVAL, "reg_mr of NULL: EINVAL");
	/* A range that is not mapped: the kernel cannot pin it (EFAULT). */
	char *hole = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	munmap(hole + 4096, 4096);
	errno = 0;
	check(!ibv_reg_mr(pd, hole, 3 * 4096, acc) && errno == EFAULT,
	      "reg_mr over an unmapped page: EFAULT");
	errno = 0;
	check(!ibv_reg_mr(pd, buf, (size_t)1 << 62, acc) && errno != 0,
	      "reg_mr of 2^62 bytes: refused");
	errno = 0;
	check(!ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "reg_mr remote write without local write: EINVAL");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, big, acc);
	struct ibv_mr *mr2 = ibv_reg_mr(pd, buf2, big, acc);
	struct ibv_mr *other = ibv_reg_mr(pd2, buf2, big, acc); /* same memory, other PD */
	check(mr && mr2 && other, "three MRs registered");
	if (!mr || !mr2 || !other)
		return 1;

	/* --- CQ and QP arguments --- */
	errno = 0;
	check(!ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL, "create_cq cqe 0: EINVAL");
	errno = 0;
	check(!ibv_create_cq(ctx, -1, NULL, NULL, 0) && errno == EINVAL,
	      "create_cq cqe -1: EINVAL");
	struct ibv_device_attr da;
	check(!ibv_query_device(ctx, &da), "query_device");
	errno = 0;
	check(!ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) && errno == EINVAL,
	      "create_cq cqe max_cqe + 1: EINVAL");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = da.max_sge + 1,
			 .max_recv_sge = 1 },
	};
	errno = 0;
	check(!ibv_create_qp(pd, &ia) && errno == EINVAL, "create_qp max_send_sge > max_sge: EINVAL");
	ia.cap.max_send_sge = 1;
	ia.send_cq = NULL;
	errno = 0;
	check(!ibv_create_qp(pd, &ia) && errno == EINVAL, "create_qp without a send CQ: EINVAL");
	ia.send_cq = cq;

	/* --- Posting in the wrong state --- */
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	check(q != NULL, "rc qp created (RESET)");
	if (!q)
		return 1;
	check(post_send(q, IBV_WR_SEND, 1, buf, 8, mr->lkey, 0, 0) == EINVAL,
	      "post_send in RESET: EINVAL");
	check(post_recv(q, 1, buf, 8, mr->lkey) == EINVAL, "post_recv in RESET: EINVAL");
	check(!to_init(q), "qp to INIT");
	check(post_send(q, IBV_WR_SEND, 1, buf, 8, mr->lkey, 0, 0) == EINVAL,
	      "post_send in INIT: EINVAL");
	check(post_recv(q, 1, buf, 8, mr->lkey) == 0, "post_recv in INIT: accepted");
	{
		struct ibv_sge s[2] = { { (uintptr_t)buf, 8, mr->lkey },
					{ (uintptr_t)buf, 8, mr->lkey } };
		struct ibv_recv_wr w = { .wr_id = 9, .sg_list = s, .num_sge = 2 }, *bad = NULL;
		check(ibv_post_recv(q, &w, &bad) == EINVAL && bad == &w,
		      "post_recv with num_sge > max_recv_sge: EINVAL, bad_wr set");
	}
	/* Not checked: posting beyond max_send_wr / max_recv_wr (ENOMEM in rxe and mlx5). The
	 * shim's queues are not bounded by the QP's capabilities yet. */
	check(!ibv_destroy_qp(q), "destroy qp with receives posted");
	check(!ibv_destroy_cq(cq), "destroy its cq");

	/* --- Local memory checks at the requester --- */
	int rs;
	int st = one_op(ctx, pd, pd, IBV_WR_SEND, buf, 3000, 0xdead0, buf2, 4096, mr2->lkey, 0, 0,
			&rs);
	check(st == IBV_WC_LOC_PROT_ERR, "SEND with an unknown lkey: IBV_WC_LOC_PROT_ERR");
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf + big - 100, 3000, mr->lkey, buf2, 4096,
		    mr2->lkey, 0, 0, &rs);
	check(st == IBV_WC_LOC_PROT_ERR, "SEND past the end of its MR: IBV_WC_LOC_PROT_ERR");
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf2, 3000, other->lkey, buf2, 4096, mr2->lkey, 0, 0,
		    &rs);
	check(st == IBV_WC_LOC_PROT_ERR, "SEND from an MR of another PD: IBV_WC_LOC_PROT_ERR");

	/* --- Remote memory of another PD --- */
	memset(buf2, 0, big);
	st = one_op(ctx, pd, pd, IBV_WR_RDMA_WRITE, buf, 3000, mr->lkey, NULL, 0, 0,
		    (uintptr_t)buf2, other->rkey, &rs);
	check(st == IBV_WC_REM_ACCESS_ERR, "WRITE with an rkey of another PD: IBV_WC_REM_ACCESS_ERR");
	int untouched = 1;
	for (size_t i = 0; i < 3000; i++)
		untouched &= buf2[i] == 0;
	check(untouched, "... and nothing written");
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf, 3000, mr->lkey, buf2, 4096, other->lkey, 0, 0,
		    &rs);
	check(st == IBV_WC_REM_OP_ERR && rs == IBV_WC_LOC_PROT_ERR,
	      "SEND into a receive of another PD: IBV_WC_REM_OP_ERR, receive IBV_WC_LOC_PROT_ERR");
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf, 3000, mr->lkey, buf2, 1000, mr2->lkey, 0, 0,
		    &rs);
	check(st == IBV_WC_REM_INV_REQ_ERR && rs == IBV_WC_LOC_LEN_ERR,
	      "SEND longer than the receive: IBV_WC_REM_INV_REQ_ERR, receive IBV_WC_LOC_LEN_ERR");
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf, 0, mr->lkey, buf2, 16, mr2->lkey, 0, 0, &rs);
	check(st == IBV_WC_SUCCESS && rs == IBV_WC_SUCCESS, "zero-length SEND: success both ends");

	/* Inline data is copied at post time: no lkey, any memory (the shim's copy must be in the
	 * QP's protection domain). */
	{
		struct pair p;
		struct ibv_wc wc;
		check(!make_pair(ctx, pd, pd, &p), "pair for an inline SEND");
		char msg[64] = "inline payload";
		struct ibv_sge s = { .addr = (uintptr_t)msg, .length = sizeof msg, .lkey = 0 };
		struct ibv_send_wr w = { .wr_id = 5, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
		memset(buf2, 0, 64);
		check(!post_recv(p.b, 6, buf2, 64, mr2->lkey) && !ibv_post_send(p.a, &w, &bad),
		      "inline SEND posted");
		int ok = poll_one(p.cq_a, &wc) && wc.status == IBV_WC_SUCCESS;
		ok = ok && poll_one(p.cq_b, &wc) && wc.status == IBV_WC_SUCCESS;
		check(ok && !memcmp(buf2, msg, sizeof msg), "inline SEND delivered");
		free_pair(&p);
	}

	/* --- Memory deregistered while in use --- */
	{
		struct pair p;
		struct ibv_wc wc;
		check(!make_pair(ctx, pd, pd, &p), "pair for deregistration");
		char *tmp = aligned_alloc(4096, big);
		memset(tmp, 1, big);
		struct ibv_mr *t = ibv_reg_mr(pd, tmp, big, acc);
		check(!post_send(p.a, IBV_WR_RDMA_WRITE, 1, tmp, big, t->lkey, (uintptr_t)buf2,
				 mr2->rkey),
		      "1 MiB WRITE posted");
		check(!ibv_dereg_mr(t), "source MR deregistered with the WRITE outstanding");
		int got = poll_one(p.cq_a, &wc);
		check(got && (wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_LOC_PROT_ERR),
		      "its completion: success or IBV_WC_LOC_PROT_ERR");
		free(tmp);
		free_pair(&p);
		/* The target deregistered: a WRITE to it is a remote access error. */
		char *tgt = aligned_alloc(4096, 8192);
		struct ibv_mr *tm = ibv_reg_mr(pd, tgt, 8192, acc);
		uint32_t rkey = tm->rkey;
		check(!ibv_dereg_mr(tm), "target MR deregistered");
		st = one_op(ctx, pd, pd, IBV_WR_RDMA_WRITE, buf, 3000, mr->lkey, NULL, 0, 0,
			    (uintptr_t)tgt, rkey, &rs);
		check(st == IBV_WC_REM_ACCESS_ERR, "WRITE to a deregistered MR: IBV_WC_REM_ACCESS_ERR");
		free(tgt);
	}

	/* --- Queues full: one work request beyond max_recv_wr / max_send_wr is ENOMEM --- */
	{
		struct pair p;
		struct ibv_wc wc;
		check(!make_pair(ctx, pd, pd, &p), "pair for full queues");
		int ok = 1;
		for (int i = 0; i < 32; i++)
			ok = ok && !post_recv(p.b, 100 + i, buf2, 64, mr2->lkey);
		check(ok, "32 receives posted on a QP of max_recv_wr 32");
		check(post_recv(p.b, 200, buf2, 64, mr2->lkey) == ENOMEM,
		      "the 33rd receive: ENOMEM");
		/* One receive consumed: room for one more. */
		ok = !post_send(p.a, IBV_WR_SEND, 7, buf, 16, mr->lkey, 0, 0) &&
		     poll_one(p.cq_a, &wc) && wc.status == IBV_WC_SUCCESS &&
		     poll_one(p.cq_b, &wc) && wc.status == IBV_WC_SUCCESS;
		check(ok, "a SEND takes one of them");
		check(!post_recv(p.b, 201, buf2, 64, mr2->lkey), "then one more receive fits");
		free_pair(&p);
		/* Sends the peer cannot take (no receive posted: RNR) stay outstanding. */
		check(!make_pair(ctx, pd, pd, &p), "pair for a full send queue");
		ok = 1;
		for (int i = 0; i < 32; i++)
			ok = ok && !post_send(p.a, IBV_WR_SEND, 300 + i, buf, 16, mr->lkey, 0, 0);
		check(ok, "32 SENDs posted on a QP of max_send_wr 32 (peer without receives)");
		check(post_send(p.a, IBV_WR_SEND, 400, buf, 16, mr->lkey, 0, 0) == ENOMEM,
		      "the 33rd SEND: ENOMEM");
		free_pair(&p);
	}

	/* --- CQ overrun: IBV_EVENT_CQ_ERR on the context's async fd, the QP in error --- */
	{
		struct pair p;
		p.cq_a = ibv_create_cq(ctx, 2, NULL, NULL, 0);
		p.cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
		p.a = rc_qp(pd, p.cq_a, 32);
		p.b = rc_qp(pd, p.cq_b, 32);
		check(p.cq_a && p.cq_b && p.a && p.b && !to_init(p.a) && !to_init(p.b) &&
			      !connect_to(ctx, p.b, p.a) && !connect_to(ctx, p.a, p.b),
		      "pair whose send CQ holds 2 completions");
		int ok = 1;
		for (int i = 0; i < 4; i++)
			ok = ok && !post_recv(p.b, 500 + i, buf2, 64, mr2->lkey);
		int posted = 0;
		/* The third completion overruns the CQ and moves the QP to error, after which a
		 * post is refused: that may already happen to the fourth. */
		for (int i = 0; i < 4; i++)
			posted += !post_send(p.a, IBV_WR_SEND, 600 + i, buf, 16, mr->lkey, 0, 0);
		check(ok && posted >= 3, "3 or 4 signalled SENDs posted, nothing polled");
		struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
		int ready = poll(&pf, 1, 10000) == 1;
		struct ibv_async_event ev;
		int got = ready && !ibv_get_async_event(ctx, &ev);
		check(got && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == p.cq_a,
		      "IBV_EVENT_CQ_ERR for the overrun CQ");
		if (got)
			ibv_ack_async_event(&ev);
		got = poll(&pf, 1, 5000) == 1 && !ibv_get_async_event(ctx, &ev);
		check(got && ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == p.a,
		      "then IBV_EVENT_QP_FATAL for the QP whose completion was lost");
		if (got)
			ibv_ack_async_event(&ev);
		check(p.a->state == IBV_QPS_ERR, "that QP is in the error state");
		free_pair(&p);
	}

	/* --- QPs destroyed with work outstanding --- */
	{
		struct pair p;
		check(!make_pair(ctx, pd, pd, &p), "pair for destruction");
		int posted = 0;
		for (int i = 0; i < 16; i++)
			posted += !post_send(p.a, IBV_WR_RDMA_WRITE, i, buf, 65536, mr->lkey,
					     (uintptr_t)buf2, mr2->rkey);
		check(posted == 16, "16 WRITEs of 64 KiB posted");
		check(!ibv_destroy_qp(p.a), "requester QP destroyed with them outstanding");
		check(!ibv_destroy_qp(p.b), "responder QP destroyed");
		usleep(200000);
		check(!ibv_destroy_cq(p.cq_a) && !ibv_destroy_cq(p.cq_b), "their CQs destroyed");
	}

	/* --- The engine still works after all of that --- */
	st = one_op(ctx, pd, pd, IBV_WR_SEND, buf, 5000, mr->lkey, buf2, 8192, mr2->lkey, 0, 0,
		    &rs);
	check(st == IBV_WC_SUCCESS && rs == IBV_WC_SUCCESS && !memcmp(buf, buf2, 5000),
	      "a fresh pair moves a 5000-byte SEND afterwards");

	ibv_dereg_mr(other);
	ibv_dereg_mr(mr2);
	ibv_dereg_mr(mr);
	check(!ibv_dealloc_pd(pd2), "dealloc pd2");
	check(!ibv_dealloc_pd(pd), "dealloc pd");
	check(!ibv_close_device(ctx), "close device");
	ibv_free_device_list(list);
	free(buf);
	free(buf2);
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
