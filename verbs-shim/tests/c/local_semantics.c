/* The verbs behaviour rdma-core's tests check only through loopback traffic (which the shim
 * does not carry), checked locally with completions made by flushing a QP: a completion
 * channel's fd is pollable and signals once per ibv_req_notify_cq, ibv_resize_cq refuses
 * less room than the unpolled completions, ibv_rereg_mr changes translation, PD and access;
 * and the bad-input answers (GID table too small, completion vector, queue depth, AH without
 * GRH). One device, named by -d; prints one line per check and "RESULT ok" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", what, ok ? "ok" : "FAIL");
	if (!ok)
		failed = 1;
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
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

	/* GID table */
	struct ibv_gid_entry e[16];
	check(ibv_query_gid_table(ctx, e, 1, 0) == -EINVAL, "gid table of 1 entry: -EINVAL");
	check(ibv_query_gid_table(ctx, e, 16, 0) == 2, "gid table of 16 entries: 2 GIDs");
	struct ibv_gid_entry one;
	check(ibv_query_gid_ex(ctx, 1, 5, &one, 0) == ENODATA, "empty gid slot 5: ENODATA");
	check(ibv_query_gid_ex(ctx, 1, 16, &one, 0) == EINVAL, "gid index 16: EINVAL");

	/* CQ and QP bad input */
	errno = 0;
	check(!ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors) && errno == EINVAL,
	      "cq on vector num_comp_vectors: EINVAL");
	errno = 0;
	check(!ibv_create_cq(ctx, 4, NULL, NULL, -1) && errno == EINVAL, "cq on vector -1: EINVAL");

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	check(ch && cq, "channel and cq created");
	if (!ch || !cq)
		return 1;
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 0xffffffff, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	errno = 0;
	check(!ibv_create_qp(pd, &ia) && errno == EINVAL, "qp with max_send_wr 0xffffffff: EINVAL");
	ia.cap.max_send_wr = 8;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	check(qp != NULL, "ud qp created");
	if (!qp)
		return 1;

	struct ibv_ah_attr ah = { .is_global = 0, .port_num = 1 };
	errno = 0;
	check(!ibv_create_ah(pd, &ah) && errno == EINVAL, "ah without grh: EINVAL");
	ah.is_global = 1;
	ah.grh.sgid_index = 1;
	ibv_query_gid(ctx, 1, 1, &ah.grh.dgid);
	struct ibv_ah *a = ibv_create_ah(pd, &ah);
	check(a != NULL, "ah with grh created");
	if (a)
		ibv_destroy_ah(a);

	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x123 };
	check(!ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "ud qp to INIT");
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr gi;
	check(!ibv_query_qp(qp, &got, IBV_QP_QKEY, &gi) && got.qkey == 0x123, "query_qp: qkey 0x123");

	/* Completion channel: non-blocking fd, one event per arm. */
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_cq *ecq;
	void *ectx;
	errno = 0;
	check(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EAGAIN,
	      "get_cq_event with no event, non-blocking: EAGAIN");
	char *buf = aligned_alloc(4096, 8192), *buf2 = aligned_alloc(4096, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	check(mr != NULL, "mr registered");
	if (!mr)
		return 1;
	for (int i = 0; i < 3; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		check(!ibv_post_recv(qp, &w, &bad), "post recv");
	}
	check(!ibv_req_notify_cq(cq, 0), "req_notify_cq");
	check(!readable(ch->fd, 0), "channel fd not readable before a completion");
	qa.qp_state = IBV_QPS_ERR;
	check(!ibv_modify_qp(qp, &qa, IBV_QP_STATE), "qp to ERR (flushes 3 receives)");
	check(readable(ch->fd, 2000), "channel fd readable (poll) after the completion");
	check(!ibv_get_cq_event(ch, &ecq, &ectx) && ecq == cq, "get_cq_event: the cq");
	ibv_ack_cq_events(cq, 1);
	check(!readable(ch->fd, 50), "one event per arm: fd not readable again");

	/* Resize below the unpolled completions. */
	check(ibv_resize_cq(cq, 1) == EINVAL, "resize to 1 with 3 unpolled: EINVAL");
	check(!ibv_resize_cq(cq, 8) && cq->cqe >= 8, "resize to 8");
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(cq, 8, wc);
	check(n == 3 && wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[0].wr_id == 100,
	      "3 flushed receives polled");
	check(!ibv_resize_cq(cq, 1), "resize to 1 when empty");

	/* Rereg */
	errno = 0;
	check(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "rereg without flags: ERR_INPUT/EINVAL");
	errno = 0;
	check(ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "rereg with an unknown flag: ERR_INPUT/EINVAL");
	errno = 0;
	check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
			      IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "rereg remote write without local write: ERR_INPUT/EINVAL");
	errno = 0;
	check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
			      IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "rereg translation without a buffer: ERR_INPUT/EINVAL");
	uint32_t lkey = mr->lkey;
	check(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, 8192, 0) &&
		      mr->addr == buf2 && mr->length == 8192 && mr->lkey == lkey,
	      "rereg translation: new buffer, same key");
	check(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) && mr->pd == pd2,
	      "rereg pd");
	check(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS | IBV_REREG_MR_CHANGE_PD, pd, NULL, 0,
			    IBV_ACCESS_LOCAL_WRITE) && mr->pd == pd,
	      "rereg access and pd back");

	check(!ibv_dereg_mr(mr), "dereg");
	check(!ibv_destroy_qp(qp), "destroy qp");
	check(!ibv_destroy_cq(cq), "destroy cq");
	check(!ibv_destroy_comp_channel(ch), "destroy channel");
	ibv_dealloc_pd(pd2);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	free(buf2);
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
