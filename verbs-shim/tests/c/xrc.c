/* XRC domains, XRC SRQs and XRC QPs through the inline functions of the system verbs.h
 * (ibv_open_xrcd, ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num, ibv_create_qp_ex),
 * which call the shim's verbs_context operations. Both devices (-d ferroce0, -d
 * ferroce0_rocev2) have them and must pass every check alike; ibv_open_qp shares an
 * XRC_RECV QP through its domain. No traffic (ibv_xsrq_pingpong and rdma-core's tests carry XRC traffic). One line per check
 * and "RESULT ok" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
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

static struct ibv_xrcd *open_x(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};
	errno = 0;
	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xsrq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *x,
			    struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.xrcd = x,
		.cq = cq,
	};
	errno = 0;
	return ibv_create_srq_ex(ctx, &a);
}

int main(int argc, char **argv)
{
	const char *name = argc > 2 && !strcmp(argv[1], "-d") ? argv[2] : "ferroce0";
	const char *file = argc > 4 && !strcmp(argv[3], "-f") ? argv[4] : "/tmp/ferroce_xrc_test";
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		printf("no device %s\n", name);
		return 2;
	}
	struct ibv_device_attr da;
	check(!ibv_query_device(ctx, &da) && (da.device_cap_flags & IBV_DEVICE_XRC),
	      "IBV_DEVICE_XRC advertised");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!pd || !cq) {
		printf("no PD or CQ\n");
		return 2;
	}
	struct ibv_qp_init_attr_ex send = {
		.qp_type = IBV_QPT_XRC_SEND,
		.send_cq = cq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	/* Argument checks. */
	check(!open_x(ctx, -1, 0) && errno == EINVAL, "fd -1 without O_CREAT: EINVAL");
	check(!open_x(ctx, -1, O_CREAT | O_RDWR) && errno == EINVAL, "other oflags: EINVAL");
	struct ibv_xrcd_init_attr only_fd = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
	errno = 0;
	check(!ibv_open_xrcd(ctx, &only_fd) && errno == EINVAL, "no OFLAGS in comp_mask: EINVAL");
	struct ibv_xrcd_init_attr reserved = { .comp_mask = IBV_XRCD_INIT_ATTR_RESERVED };
	errno = 0;
	check(!ibv_open_xrcd(ctx, &reserved) && errno == EOPNOTSUPP, "reserved comp_mask: EOPNOTSUPP");
	check(!open_x(ctx, 1000, O_CREAT) && errno == EBADF, "closed fd: EBADF");

	/* A private domain. */
	struct ibv_xrcd *priv = open_x(ctx, -1, O_CREAT);
	check(priv != NULL && priv->context == ctx, "fd -1, O_CREAT: a private domain");

	/* A domain shared through a file. */
	unlink(file);
	int fd = open(file, O_RDONLY | O_CREAT, 0400);
	if (fd < 0) {
		printf("open %s: %s\n", file, strerror(errno));
		return 2;
	}
	check(!open_x(ctx, fd, 0) && errno == EINVAL, "file without a domain, no O_CREAT: EINVAL");
	struct ibv_xrcd *x1 = open_x(ctx, fd, O_CREAT);
	check(x1 != NULL, "file, O_CREAT: created");
	check(!open_x(ctx, fd, O_CREAT | O_EXCL) && errno == EINVAL, "O_CREAT|O_EXCL, exists: EINVAL");
	int fd2 = open(file, O_RDONLY);
	struct ibv_xrcd *x2 = open_x(ctx, fd2, 0);
	check(x2 != NULL && x2 != x1, "same inode through another fd, no O_CREAT: opened");

	/* XRC SRQs. */
	struct ibv_srq *s1 = xsrq(ctx, pd, x1, cq);
	struct ibv_srq *s2 = xsrq(ctx, pd, x2, cq);
	check(s1 && s2, "ibv_create_srq_ex IBV_SRQT_XRC");
	uint32_t n1 = 0, n2 = 0;
	check(s1 && s2 && !ibv_get_srq_num(s1, &n1) && !ibv_get_srq_num(s2, &n2) && n1 && n2 &&
		      n1 != n2 && n1 < (1 << 24) && n2 < (1 << 24),
	      "ibv_get_srq_num: distinct 24-bit numbers");
	check(!xsrq(ctx, pd, NULL, cq) && errno == EINVAL, "XRC SRQ without an XRCD: EINVAL");
	check(!xsrq(ctx, pd, x1, NULL) && errno == EINVAL, "XRC SRQ without a CQ: EINVAL");
	struct ibv_srq_init_attr_ex tm = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_TM,
		.srq_type = IBV_SRQT_TM,
		.pd = pd,
		.cq = cq,
		.tm_cap = { .max_num_tags = 4, .max_ops = 4 },
	};
	errno = 0;
	check(!ibv_create_srq_ex(ctx, &tm) && errno == EOPNOTSUPP, "tag-matching SRQ: EOPNOTSUPP");
	struct ibv_srq_init_attr_ex basic = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_BASIC,
		.pd = pd,
		.cq = cq,
	};
	struct ibv_srq *b = ibv_create_srq_ex(ctx, &basic);
	check(b != NULL, "basic SRQ through ibv_create_srq_ex (CQ in comp_mask)");

	/* XRC SRQ receives are posted like any SRQ's. */
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr ? mr->lkey : 0 };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	check(s1 && mr && !ibv_post_srq_recv(s1, &rw, &bad), "ibv_post_srq_recv on an XRC SRQ");

	/* XRC QPs. */
	struct ibv_qp_init_attr_ex recv = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x1,
	};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &recv);
	check(tgt != NULL && tgt->qp_type == IBV_QPT_XRC_RECV && tgt->qp_num, "XRC_RECV QP");
	struct ibv_qp_init_attr_ex no_x = { .qp_type = IBV_QPT_XRC_RECV };
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &no_x) && errno == EINVAL, "XRC_RECV QP without an XRCD: EINVAL");
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &send);
	check(ini != NULL && ini->qp_type == IBV_QPT_XRC_SEND, "XRC_SEND QP");
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	int im = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	check(tgt && ini && !ibv_modify_qp(tgt, &init, im) && !ibv_modify_qp(ini, &init, im),
	      "both to INIT");
	struct ibv_recv_wr *badr;
	check(ini && ibv_post_recv(ini, &rw, &badr) == EINVAL, "post_recv on XRC_SEND: EINVAL");
	/* ibv_open_qp: another handle of the XRC_RECV QP, through its domain. */
	int ctxv;
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
			     IBV_QP_OPEN_ATTR_CONTEXT,
		.qp_num = tgt ? tgt->qp_num : 1,
		.xrcd = x1,
		.qp_context = &ctxv,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	check(opened && opened != tgt && tgt && opened->qp_num == tgt->qp_num &&
		      opened->qp_type == IBV_QPT_XRC_RECV && opened->qp_context == &ctxv,
	      "ibv_open_qp: another handle of the XRC_RECV QP");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	check(opened && !ibv_query_qp(opened, &qa, IBV_QP_STATE, &qia) && qa.qp_state == IBV_QPS_INIT,
	      "the opened handle sees the QP's state (INIT)");
	struct ibv_qp_open_attr bad_oa = oa;
	bad_oa.qp_num = oa.qp_num + 4096;
	errno = 0;
	check(!ibv_open_qp(ctx, &bad_oa) && errno == EINVAL, "ibv_open_qp of no QP of the domain: EINVAL");
	bad_oa = oa;
	bad_oa.qp_type = IBV_QPT_XRC_SEND;
	errno = 0;
	check(!ibv_open_qp(ctx, &bad_oa) && errno == EINVAL, "ibv_open_qp of an XRC_SEND type: EINVAL");
	bad_oa = oa;
	bad_oa.xrcd = open_x(ctx, -1, O_CREAT);
	errno = 0;
	check(bad_oa.xrcd && !ibv_open_qp(ctx, &bad_oa) && errno == EINVAL,
	      "ibv_open_qp through another domain: EINVAL");
	if (bad_oa.xrcd)
		ibv_close_xrcd(bad_oa.xrcd);

	/* Busy while it has SRQs or QPs; the last handle is the one that counts. */
	check(ibv_close_xrcd(x2) == 0, "close one of two handles with SRQs: 0");
	check(ibv_close_xrcd(x1) == EBUSY, "close the last handle with SRQs: EBUSY");
	check(!ibv_destroy_srq(s1) && !ibv_destroy_srq(s2), "destroy the XRC SRQs");
	check(ibv_close_xrcd(x1) == EBUSY, "close the last handle with an XRC_RECV QP: EBUSY");
	check(tgt && ini && !ibv_destroy_qp(tgt) && !ibv_destroy_qp(ini), "destroy the XRC QPs");
	/* The opened handle keeps the QP (and the domain busy) after its creator's is gone. */
	check(ibv_close_xrcd(x1) == EBUSY, "close with an opened handle left: EBUSY");
	struct ibv_qp *again = ibv_open_qp(ctx, &oa);
	check(again && again->qp_num == oa.qp_num, "ibv_open_qp while only an opened handle lives");
	check(opened && !ibv_modify_qp(opened, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT),
	      "modify through the opened handle");
	check(opened && again && !ibv_destroy_qp(opened) && !ibv_destroy_qp(again),
	      "destroy the opened handles");
	errno = 0;
	check(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "the QP is gone with its last handle: EINVAL");
	check(ibv_close_xrcd(x1) == 0, "close the last handle: 0");
	check(!open_x(ctx, fd, 0) && errno == EINVAL, "closed domain is gone: EINVAL without O_CREAT");
	struct ibv_xrcd *x3 = open_x(ctx, fd, O_CREAT | O_EXCL);
	check(x3 != NULL, "O_CREAT|O_EXCL after it is gone: created");
	check(x3 && ibv_close_xrcd(x3) == 0, "close it");
	check(ibv_close_xrcd(priv) == 0, "close the private domain");

	if (b)
		ibv_destroy_srq(b);
	if (mr)
		ibv_dereg_mr(mr);
	close(fd);
	close(fd2);
	unlink(file);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("RESULT %s\n", failed ? "FAIL" : "ok");
	return failed;
}
