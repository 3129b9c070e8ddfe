/* UD through the verbs ABI in one process: two UD QPs of one device talk through the
 * device's own GID (the datagrams loop back as on a NIC).
 *
 *   ud_grh -d DEV -m MAX_PAYLOAD [-s]
 *
 * Checks, each printing "CHECK <name>: ok" or "CHECK <name>: FAIL (why)":
 *   grh      A SEND_WITH_IMM of 16 bytes from QP a to QP b: the receive completes with
 *            IBV_WC_SUCCESS, IBV_WC_RECV, byte_len 40 + 16, src_qp = a's QPN, wc_flags with
 *            IBV_WC_GRH and IBV_WC_WITH_IMM, the immediate; the buffer holds 20 zero bytes, an
 *            IPv4 header (0x45, protocol 17, source = the device's IPv4 GID), then the payload.
 *   ah       ibv_create_ah_from_wc on that completion: b answers a through that AH (to the
 *            completion's src_qp), a receives it with src_qp = b's QPN.
 *   qkey     A datagram with a wrong Q_Key is dropped (nothing within 300 ms); one with a
 *            controlled Q_Key (high bit set: the sender's own) arrives.
 *   mtu      A SEND of MAX_PAYLOAD bytes arrives. One of MAX_PAYLOAD + 1: with -s (RoCEv2,
 *            IBTA C10-93.1.1, as rxe) it completes successfully and nothing arrives (the
 *            next datagram takes the receive); without -s (the native device's own UD) it is
 *            refused by ibv_post_send with EINVAL.
 * Prints "RESULT ok" and exits 0 when every check passed, 1 otherwise (2: setup error).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x11111111u
#define BUF 16384
#define SEND 8192 /* the send area's offset */
#define GRH 40

static struct ibv_pd *pd;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qa, *qb;
static struct ibv_mr *mr;
static char *buf; /* [0, 4160): receive area, [SEND, SEND + 4096): send area */
static int failed;

static void check(const char *name, int ok, const char *why)
{
	printf("CHECK %s: %s%s%s%s\n", name, ok ? "ok" : "FAIL", ok ? "" : " (", ok ? "" : why,
	       ok ? "" : ")");
	if (!ok)
		failed = 1;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *ud_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return NULL;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

static int post_recv(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = GRH + 4096 + 24, .lkey = mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &w, &bad);
}

static int post_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey,
		     uint32_t len, int imm)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf + SEND, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr w = {
		.wr_id = 7,
		.sg_list = &s,
		.num_sge = 1,
		.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(0xfeedf00d),
	},
			   *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = qkey;
	return ibv_post_send(qp, &w, &bad);
}

/* The next completion of `cq` with `opcode`, within `secs` (others are checked: success). */
static int poll_for(struct ibv_cq *cq, int opcode, double secs, struct ibv_wc *out)
{
	double t0 = now();
	while (now() - t0 < secs) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return -1;
		if (n == 0) {
			usleep(100);
			continue;
		}
		if ((int)wc.opcode == opcode || wc.status != IBV_WC_SUCCESS) {
			*out = wc;
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	uint32_t max = 1024;
	int c, silent = 0;
	while ((c = getopt(argc, argv, "d:m:s")) != -1) {
		if (c == 'd')
			dev = optarg;
		else if (c == 'm')
			max = (uint32_t)atoi(optarg);
		else if (c == 's')
			silent = 1;
	}
	alarm(60);
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; l && l[i]; i++)
		if (dev && !strcmp(ibv_get_device_name(l[i]), dev))
			ctx = ibv_open_device(l[i]);
	if (!ctx) {
		fprintf(stderr, "no device %s\n", dev ? dev : "(none given)");
		return 2;
	}
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, BUF);
	mr = pd ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE) : NULL;
	cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!mr || !cq_a || !cq_b || !(qa = ud_qp(cq_a)) || !(qb = ud_qp(cq_b))) {
		perror("setup");
		return 2;
	}
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 1, &gid)) {
		perror("ibv_query_gid");
		return 2;
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah) {
		perror("ibv_create_ah");
		return 2;
	}
	char why[256];
	struct ibv_wc wc;

	/* grh */
	memcpy(buf + SEND, "0123456789abcdef", 16);
	if (post_recv(qb, 1) || post_send(qa, ah, qb->qp_num, QKEY, 16, 1)) {
		perror("post");
		return 2;
	}
	int got = poll_for(cq_b, IBV_WC_RECV, 10, &wc);
	const unsigned char *ip = (const unsigned char *)buf + 20;
	static const char zero[20];
	snprintf(why, sizeof why,
		 "got %d status %d byte_len %u src_qp %#x (a %#x) flags %#x imm %#x ip[0] %#x",
		 got, got == 1 ? wc.status : -1, wc.byte_len, wc.src_qp, qa->qp_num,
		 wc.wc_flags, ntohl(wc.imm_data), ip[0]);
	check("grh",
	      got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
		      wc.byte_len == GRH + 16 && wc.src_qp == qa->qp_num &&
		      (wc.wc_flags & IBV_WC_GRH) && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc.imm_data) == 0xfeedf00d && !memcmp(buf, zero, 20) && ip[0] == 0x45 &&
		      ip[9] == 17 && !memcmp(ip + 12, gid.raw + 12, 4) &&
		      !memcmp(buf + GRH, "0123456789abcdef", 16),
	      why);

	/* ah: b answers a through an AH made from the completion. */
	struct ibv_wc sw;
	poll_for(cq_a, IBV_WC_SEND, 5, &sw);
	struct ibv_ah *back = got == 1 ? ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh *)buf, 1)
				       : NULL;
	int ok = 0;
	if (back) {
		uint32_t to = wc.src_qp;
		memcpy(buf + SEND, "pong", 4);
		if (!post_recv(qa, 2) && !post_send(qb, back, to, QKEY, 4, 0)) {
			got = poll_for(cq_a, IBV_WC_RECV, 10, &wc);
			ok = got == 1 && wc.status == IBV_WC_SUCCESS && wc.src_qp == qb->qp_num &&
			     wc.byte_len == GRH + 4 && !memcmp(buf + GRH, "pong", 4);
		}
		poll_for(cq_b, IBV_WC_SEND, 5, &sw);
	}
	snprintf(why, sizeof why, "ah %p errno %d", (void *)back, back ? 0 : errno);
	check("ah", ok, why);

	/* qkey: a wrong one is dropped, a controlled one is the sender's own. */
	if (post_recv(qb, 3) || post_send(qa, ah, qb->qp_num, QKEY ^ 0xff, 8, 0))
		return 2;
	poll_for(cq_a, IBV_WC_SEND, 5, &sw);
	int dropped = poll_for(cq_b, IBV_WC_RECV, 0.3, &wc) == 0;
	if (post_send(qa, ah, qb->qp_num, 0x80000000u, 8, 0))
		return 2;
	poll_for(cq_a, IBV_WC_SEND, 5, &sw);
	got = poll_for(cq_b, IBV_WC_RECV, 10, &wc);
	snprintf(why, sizeof why, "wrong Q_Key dropped %d, controlled got %d status %d", dropped,
		 got, got == 1 ? wc.status : -1);
	check("qkey", dropped && got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 3, why);

	/* mtu */
	memset(buf + SEND, 0x5a, 4097);
	if (post_recv(qb, 4) || post_send(qa, ah, qb->qp_num, QKEY, max, 0))
		return 2;
	poll_for(cq_a, IBV_WC_SEND, 5, &sw);
	got = poll_for(cq_b, IBV_WC_RECV, 10, &wc);
	int ok_max = got == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == GRH + max;
	int big = post_send(qa, ah, qb->qp_num, QKEY, max + 1, 0), ok_big;
	if (silent) {
		/* Completes, sends nothing: the receive stays for the next (small) datagram. */
		int sent = big == 0 && poll_for(cq_a, IBV_WC_SEND, 5, &sw) == 1 &&
			   sw.status == IBV_WC_SUCCESS;
		if (post_recv(qb, 5) || post_send(qa, ah, qb->qp_num, QKEY, 8, 0))
			return 2;
		poll_for(cq_a, IBV_WC_SEND, 5, &sw);
		got = poll_for(cq_b, IBV_WC_RECV, 10, &wc);
		ok_big = sent && got == 1 && wc.wr_id == 5 && wc.byte_len == GRH + 8;
	} else {
		ok_big = big == EINVAL;
	}
	snprintf(why, sizeof why, "%u bytes ok %d; %u bytes: post returned %d, then got %d wr_id %lu",
		 max, ok_max, max + 1, big, got, got == 1 ? (unsigned long)wc.wr_id : 0);
	check("mtu", ok_max && ok_big, why);

	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed ? 1 : 0;
}
