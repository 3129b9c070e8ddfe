/* Remote access checks, seen from an ordinary verbs program.
 *
 *   server: wrong_rkey -d DEV [-p PORT]
 *   client: wrong_rkey -d DEV [-p PORT] SERVER_IP
 *
 * Compiled by tests/verbs_apps.rs against the system <infiniband/verbs.h>, linked with
 * -libverbs and run with LD_LIBRARY_PATH at the shim. The two sides exchange QP numbers, GIDs,
 * buffer addresses and rkeys over TCP (as ibv_rc_pingpong does), one RC QP per case:
 *
 *   case 0  RDMA WRITE with a wrong rkey               -> IBV_WC_REM_ACCESS_ERR
 *   case 1  RDMA WRITE past the end of the MR           -> IBV_WC_REM_ACCESS_ERR
 *   case 2  RDMA WRITE to an MR without REMOTE_WRITE    -> IBV_WC_REM_ACCESS_ERR
 *   case 3  RDMA WRITE done right (control)             -> IBV_WC_SUCCESS
 *
 * Every write is 3000 bytes (three packets at MTU 1024). The server fills its buffers A
 * (REMOTE_WRITE), B (REMOTE_READ only) and C (REMOTE_WRITE, the control's target) with a
 * pattern and prints their checksums before and after; it fails unless A and B are
 * byte-for-byte unchanged and C holds exactly the client's bytes. The client fails unless
 * every case completes with its expected status. Both print "RESULT ok" on success.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NCASE 4
#define BUF 4096
#define WLEN 3000

static const char *case_name[NCASE] = {"wrong rkey", "out of bounds", "MR without REMOTE_WRITE",
                                       "control (valid rkey)"};

struct qp_info {
    uint32_t qpn;
    uint32_t psn;
    union ibv_gid gid;
};

struct server_info {
    struct qp_info qp[NCASE];
    uint64_t addr_a, addr_b, addr_c;
    uint32_t rkey_a, rkey_b, rkey_c;
};

struct client_info {
    struct qp_info qp[NCASE];
};

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void die(const char *what) {
    fprintf(stderr, "wrong_rkey: %s: %s\n", what, strerror(errno));
    exit(2);
}

static int xfer(int fd, void *buf, size_t n, int send_it) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = send_it ? write(fd, (char *)buf + off, n - off) : read(fd, (char *)buf + off, n - off);
        if (r <= 0)
            return -1;
        off += (size_t)r;
    }
    return 0;
}

static int tcp_server(int port) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1))
        die("listen");
    int fd = accept(ls, NULL, NULL);
    if (fd < 0)
        die("accept");
    close(ls);
    return fd;
}

static int tcp_client(const char *ip, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        die("server address");
    for (int i = 0; i < 100; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
        usleep(100000);
    }
    die("connect");
    return -1;
}

static void to_rts(struct ibv_qp *qp, const struct qp_info *local, const struct qp_info *remote) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote->qpn;
    a.rq_psn = remote->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote->gid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = local->psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify RTS");
}

int main(int argc, char **argv) {
    const char *devname = NULL, *server_ip = NULL;
    int port = 18516, opt;
    while ((opt = getopt(argc, argv, "d:p:")) != -1) {
        if (opt == 'd')
            devname = optarg;
        else if (opt == 'p')
            port = atoi(optarg);
        else
            return 2;
    }
    if (optind < argc)
        server_ip = argv[optind];
    alarm(60);
    srand48(getpid() * time(NULL));

    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && list[i]; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname))
            dev = list[i];
    if (!dev)
        die("no such device");
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx)
        die("ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    if (!pd || !cq)
        die("pd/cq");
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 1, &gid))
        die("ibv_query_gid");

    struct ibv_qp *qp[NCASE];
    struct qp_info local[NCASE];
    for (int i = 0; i < NCASE; i++) {
        struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                              .max_recv_sge = 1}};
        qp[i] = ibv_create_qp(pd, &ia);
        if (!qp[i])
            die("ibv_create_qp");
        local[i].qpn = qp[i]->qp_num;
        local[i].psn = lrand48() & 0xffffff;
        local[i].gid = gid;
    }

    unsigned char *a = aligned_alloc(4096, BUF), *b = aligned_alloc(4096, BUF), *c = aligned_alloc(4096, BUF);
    int ok = 1;
    if (!server_ip) {
        for (int i = 0; i < BUF; i++) {
            a[i] = (unsigned char)(0xa0 ^ i);
            b[i] = (unsigned char)(0xb0 ^ (i * 3));
            c[i] = 0xcc;
        }
        uint64_t ha = fnv(a, BUF), hb = fnv(b, BUF), hc = fnv(c, BUF);
        struct ibv_mr *ma = ibv_reg_mr(pd, a, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        struct ibv_mr *mb = ibv_reg_mr(pd, b, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        struct ibv_mr *mc = ibv_reg_mr(pd, c, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!ma || !mb || !mc)
            die("ibv_reg_mr");
        printf("server: checksum before A %016llx B %016llx C %016llx\n", (unsigned long long)ha,
               (unsigned long long)hb, (unsigned long long)hc);
        fflush(stdout);
        int fd = tcp_server(port);
        struct server_info si = {.addr_a = (uintptr_t)a, .addr_b = (uintptr_t)b, .addr_c = (uintptr_t)c,
                                 .rkey_a = ma->rkey, .rkey_b = mb->rkey, .rkey_c = mc->rkey};
        memcpy(si.qp, local, sizeof local);
        struct client_info ci;
        if (xfer(fd, &si, sizeof si, 1) || xfer(fd, &ci, sizeof ci, 0))
            die("exchange");
        for (int i = 0; i < NCASE; i++)
            to_rts(qp[i], &local[i], &ci.qp[i]);
        char go = 'g', done = 0;
        if (xfer(fd, &go, 1, 1) || xfer(fd, &done, 1, 0))
            die("sync");
        usleep(200000); /* anything still in flight would land now */
        uint64_t ha2 = fnv(a, BUF), hb2 = fnv(b, BUF), hc2 = fnv(c, BUF);
        unsigned char want[BUF];
        for (int i = 0; i < BUF; i++)
            want[i] = i < WLEN ? (unsigned char)(0x5e + i * 7) : 0xcc;
        uint64_t hcw = fnv(want, BUF);
        printf("server: checksum after  A %016llx B %016llx C %016llx\n", (unsigned long long)ha2,
               (unsigned long long)hb2, (unsigned long long)hc2);
        if (ha2 != ha) {
            printf("server: buffer A CHANGED (wrong rkey / out-of-bounds write landed)\n");
            ok = 0;
        }
        if (hb2 != hb) {
            printf("server: buffer B CHANGED (write to an MR without REMOTE_WRITE landed)\n");
            ok = 0;
        }
        if (hc2 != hcw) {
            printf("server: buffer C does not hold the control write (want %016llx)\n", (unsigned long long)hcw);
            ok = 0;
        }
        char res = ok ? 'k' : 'x';
        xfer(fd, &res, 1, 1);
        close(fd);
    } else {
        unsigned char *src = a;
        for (int i = 0; i < BUF; i++)
            src[i] = (unsigned char)(0x5e + i * 7);
        struct ibv_mr *ms = ibv_reg_mr(pd, src, BUF, IBV_ACCESS_LOCAL_WRITE);
        if (!ms)
            die("ibv_reg_mr");
        int fd = tcp_client(server_ip, port);
        struct server_info si;
        struct client_info ci;
        memcpy(ci.qp, local, sizeof local);
        if (xfer(fd, &si, sizeof si, 0) || xfer(fd, &ci, sizeof ci, 1))
            die("exchange");
        for (int i = 0; i < NCASE; i++)
            to_rts(qp[i], &local[i], &si.qp[i]);
        char go;
        if (xfer(fd, &go, 1, 0))
            die("sync");
        uint64_t raddr[NCASE] = {si.addr_a, si.addr_a + BUF - 1000, si.addr_b, si.addr_c};
        uint32_t rkey[NCASE] = {si.rkey_a ^ 0x00010203u, si.rkey_a, si.rkey_b, si.rkey_c};
        if (rkey[0] == si.rkey_b || rkey[0] == si.rkey_c)
            rkey[0] ^= 0x40000000u;
        for (int i = 0; i < NCASE; i++) {
            struct ibv_sge sge = {.addr = (uintptr_t)src, .length = WLEN, .lkey = ms->lkey};
            struct ibv_send_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
            wr.wr.rdma.remote_addr = raddr[i];
            wr.wr.rdma.rkey = rkey[i];
            struct ibv_send_wr *bad;
            if (ibv_post_send(qp[i], &wr, &bad))
                die("ibv_post_send");
        }
        int seen[NCASE] = {0}, got = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (got < NCASE) {
            struct ibv_wc wc;
            int n = ibv_poll_cq(cq, 1, &wc);
            if (n < 0)
                die("ibv_poll_cq");
            if (n == 0) {
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if (t1.tv_sec - t0.tv_sec > 30) {
                    printf("client: timed out with %d of %d completions\n", got, NCASE);
                    ok = 0;
                    break;
                }
                usleep(50);
                continue;
            }
            int i = (int)wc.wr_id - 100;
            if (i < 0 || i >= NCASE || seen[i]) {
                printf("client: unexpected completion wr_id %llu status %s\n", (unsigned long long)wc.wr_id,
                       ibv_wc_status_str(wc.status));
                ok = 0;
                continue;
            }
            seen[i] = 1;
            got++;
            enum ibv_wc_status want = i == 3 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
            int good = wc.status == want && wc.qp_num == qp[i]->qp_num;
            printf("client: case %d (%s): status %d (%s), want %d (%s): %s\n", i, case_name[i], wc.status,
                   ibv_wc_status_str(wc.status), want, ibv_wc_status_str(want), good ? "ok" : "WRONG");
            ok &= good;
        }
        char done = 'd', res = 0;
        if (xfer(fd, &done, 1, 1) || xfer(fd, &res, 1, 0))
            die("sync");
        if (res != 'k') {
            printf("client: the server saw its buffers changed\n");
            ok = 0;
        }
        close(fd);
    }
    printf("RESULT %s\n", ok ? "ok" : "FAIL");
    fflush(stdout);
    for (int i = 0; i < NCASE; i++)
        ibv_destroy_qp(qp[i]);
    ibv_destroy_cq(cq);
    ibv_close_device(ctx);
    return ok ? 0 : 1;
}
