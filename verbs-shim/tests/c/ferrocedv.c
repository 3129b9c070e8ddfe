/* The ferrocedv extension API (include/ferrocedv.h) over the shim: two RC QPs of this process
 * connected to each other (GID index 1: the device's own address, through the namespace's
 * hairpin), RDMA WRITEs, then the sender's connection, paths and planes queried and checked
 * against the traffic; the plane restriction (the engine has one port, so one plane: masks
 * naming no plane of it are EINVAL, the one plane is accepted and traffic stays on it);
 * bad arguments EINVAL, a QP before RTR ENOTCONN, a UD QP EOPNOTSUPP. On the RoCEv2 device
 * (-d ferroce0_rocev2) every call on its RC QP is EOPNOTSUPP. Prints one line per check and
 * "RESULT ok" at the end. Compiled by tests/verbs_ex.rs with -I include. */
#include <arpa/inet.h>
#include <errno.h>
#include <ferrocedv.h>
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

/* RTR then RTS towards `peer` (a QP of this process, GID index 1). */
static int connect_to(struct ibv_context *ctx, struct ibv_qp *q, uint32_t peer)
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
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 9;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

#define LEN (64 * 1024)
static uint8_t src[LEN], dst[LEN];

/* `n` signaled RDMA WRITEs of LEN bytes from `q`; 1 if all completed successfully. */
static int writes(struct ibv_qp *q, struct ibv_cq *cq, struct ibv_mr *smr, struct ibv_mr *dmr,
		  int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)src, .length = LEN, .lkey = smr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = { .remote_addr = (uintptr_t)dst,
						      .rkey = dmr->rkey } },
				     *bad;
		struct ibv_wc wc;
		if (ibv_post_send(q, &w, &bad) || !poll_one(cq, &wc) ||
		    wc.status != IBV_WC_SUCCESS)
			return 0;
	}
	return !memcmp(src, dst, LEN);
}

#define MAXP 64
struct totals {
	uint64_t tx_pkts, tx_bytes, acked_pkts;
	int all_on_allowed, all_good_sport;
};

/* The paths of `q`'s connection; 0 on success. */
static int paths(struct ibv_qp *q, struct ferrocedv_path *p, uint32_t *n, uint64_t mask,
		 struct totals *t)
{
	*n = MAXP;
	int r = ferrocedv_query_paths(q, p, n, sizeof *p);
	if (r)
		return r;
	memset(t, 0, sizeof *t);
	t->all_on_allowed = t->all_good_sport = 1;
	for (uint32_t i = 0; i < *n; i++) {
		t->tx_pkts += p[i].counters.tx_pkts;
		t->tx_bytes += p[i].counters.tx_bytes;
		t->acked_pkts += p[i].counters.acked_pkts;
		if (p[i].plane >= 64 || !(mask >> p[i].plane & 1) ||
		    !(mask >> p[i].home_plane & 1))
			t->all_on_allowed = 0;
		if (p[i].index != i || p[i].udp_sport == 0 || p[i].state > FERROCEDV_PATH_PROBING)
			t->all_good_sport = 0;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *name = argc > 2 && !strcmp(argv[1], "-d") ? argv[2] : "ferroce0";
	int roce = strstr(name, "rocev2") != NULL;
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
	check(sizeof(struct ferrocedv_qp) == 48 && sizeof(struct ferrocedv_path) == 176,
	      "the header's structures have the shim's sizes");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE |
						       IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
	qa.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &qa);
	if (!pd || !cq || !smr || !dmr || !a || !b || !ud) {
		printf("no PD, CQ, MR or QP\n");
		return 2;
	}
	for (int i = 0; i < LEN; i++)
		src[i] = (uint8_t)(i * 7 + 1);

	struct ferrocedv_qp info;
	struct ferrocedv_path p[MAXP];
	uint32_t np = MAXP;
	check(ferrocedv_query_qp(NULL, &info, sizeof info) == EINVAL &&
		      ferrocedv_query_qp(a, NULL, sizeof info) == EINVAL &&
		      ferrocedv_query_qp(a, &info, sizeof info - 8) == EINVAL &&
		      ferrocedv_query_paths(a, NULL, &np, sizeof p[0]) == EINVAL &&
		      ferrocedv_query_paths(a, p, NULL, sizeof p[0]) == EINVAL &&
		      ferrocedv_query_paths(a, p, &np, sizeof p[0] - 8) == EINVAL &&
		      ferrocedv_set_planes(NULL, 1) == EINVAL,
	      "null pointers and short sizes are EINVAL");
	check(ferrocedv_query_qp(ud, &info, sizeof info) == EOPNOTSUPP &&
		      ferrocedv_set_planes(ud, 1) == EOPNOTSUPP,
	      "a UD QP (no connection of its own) is EOPNOTSUPP");
	check(!to_init(a) && ferrocedv_query_qp(a, &info, sizeof info) ==
					(roce ? EOPNOTSUPP : ENOTCONN),
	      "an RC QP before RTR: ENOTCONN (native), EOPNOTSUPP (RoCEv2)");
	check(!to_init(b) && !connect_to(ctx, a, b->qp_num) &&
		      !connect_to(ctx, b, a->qp_num),
	      "two RC QPs connected to each other");
	if (failed) {
		printf("RESULT FAIL\n");
		return 1;
	}
	check(writes(a, cq, smr, dmr, 4), "4 RDMA WRITEs of 64 KiB complete, the data arrives");

	if (roce) {
		np = MAXP;
		check(ferrocedv_query_qp(a, &info, sizeof info) == EOPNOTSUPP &&
			      ferrocedv_query_paths(a, p, &np, sizeof p[0]) == EOPNOTSUPP &&
			      ferrocedv_set_planes(a, 1) == EOPNOTSUPP,
		      "RoCEv2 RC QP (go-back-N, no paths or planes): EOPNOTSUPP");
		printf(failed ? "RESULT FAIL\n" : "RESULT ok\n");
		return failed;
	}

	memset(&info, 0xa5, sizeof info);
	int r = ferrocedv_query_qp(a, &info, sizeof info);
	const char *ip = getenv("FERROCE_IP");
	printf("conn %llu peer %08x state %u paths %u planes %u mask %#llx mtu %u\n",
	       (unsigned long long)info.conn_id, ntohl(info.peer_ipv4), info.state,
	       info.num_paths, info.num_planes, (unsigned long long)info.plane_mask, info.mtu);
	check(r == 0 && info.state == FERROCEDV_CONN_OPEN && info.num_paths >= 1 &&
		      info.num_paths <= MAXP && info.num_planes == 1 && info.plane_mask == 1 &&
		      (info.comp_mask & FERROCEDV_QP_MASK_MTU) && info.mtu >= 256 &&
		      info.mtu <= 9000 && ip && info.peer_ipv4 == inet_addr(ip),
	      "query_qp: open connection to this host, its paths, one plane, all allowed");

	struct totals t1, t2;
	r = paths(a, p, &np, info.plane_mask, &t1);
	printf("paths %u: tx %llu pkts %llu bytes, acked %llu\n", np,
	       (unsigned long long)t1.tx_pkts, (unsigned long long)t1.tx_bytes,
	       (unsigned long long)t1.acked_pkts);
	for (uint32_t i = 0; i < np; i++)
		printf("  path %u: state %u plane %u/%u sport %u srtt %llu ns cwnd %llu "
		       "inflight %llu tx %llu resent %llu rtos %llu reroutes %llu\n",
		       p[i].index, p[i].state, p[i].plane, p[i].home_plane, p[i].udp_sport,
		       (unsigned long long)p[i].srtt_ns, (unsigned long long)p[i].cwnd_bytes,
		       (unsigned long long)p[i].inflight_bytes,
		       (unsigned long long)p[i].counters.tx_pkts,
		       (unsigned long long)p[i].counters.retx_pkts,
		       (unsigned long long)p[i].counters.rtos,
		       (unsigned long long)p[i].counters.reroutes);
	check(r == 0 && np == info.num_paths && t1.all_good_sport && t1.all_on_allowed,
	      "query_paths: every path, in index order, with a source port, on the plane");
	check(t1.tx_bytes >= 4ull * LEN && t1.tx_pkts >= 4 * LEN / info.mtu && t1.acked_pkts > 0,
	      "the paths' counters carry the 256 KiB written");
	int srtt = 0;
	for (uint32_t i = 0; i < np; i++)
		if ((p[i].comp_mask & FERROCEDV_PATH_MASK_SRTT) && p[i].srtt_ns > 0 &&
		    p[i].cwnd_bytes > 0)
			srtt = 1;
	check(srtt, "a path that carried data has an RTT sample and a window");

	uint32_t one = 1;
	struct ferrocedv_path big[2][2]; /* a larger (newer) entry size: stride honoured */
	memset(big, 0, sizeof big);
	check(ferrocedv_query_paths(a, &big[0][0], &one, 2 * sizeof p[0]) == 0 && one == 1 &&
		      big[0][0].index == 0 && big[0][1].index == 0 &&
		      big[0][1].counters.tx_pkts == 0,
	      "capacity 1 gets path 0 only; a larger entry size leaves each tail alone");

	check(ferrocedv_set_planes(a, 0) == EINVAL, "set_planes(0): EINVAL");
	check(ferrocedv_set_planes(a, 1ull << 1) == EINVAL,
	      "set_planes with no plane of the engine (plane 1 of 1): EINVAL");
	check(ferrocedv_query_qp(a, &info, sizeof info) == 0 && info.plane_mask == 1,
	      "a refused mask changes nothing");
	check(ferrocedv_set_planes(a, 1) == 0 && ferrocedv_query_qp(a, &info, sizeof info) == 0 &&
		      info.plane_mask == 1,
	      "set_planes(plane 0): accepted");

	check(writes(a, cq, smr, dmr, 4), "4 more WRITEs complete under the restriction");
	r = paths(a, p, &np, 1, &t2);
	check(r == 0 && t2.tx_bytes >= t1.tx_bytes + 4ull * LEN && t2.all_on_allowed,
	      "the counters moved by 256 KiB more, every path on the allowed plane");
	check(ferrocedv_set_planes(a, UINT64_MAX) == 0, "set_planes(all): accepted");
	printf(failed ? "RESULT FAIL\n" : "RESULT ok\n");
	return failed;
}
