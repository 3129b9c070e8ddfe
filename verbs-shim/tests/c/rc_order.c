/* RC ordering and placement checks, seen from an ordinary verbs program (issue 11).
 *
 *   server: rc_order -d DEV [-p PORT] [-T SECONDS]
 *   client: rc_order -d DEV [-p PORT] [-T SECONDS] [-t TESTS] [-n N] [-s SIZE] [-k K]
 *                    [-q DEPTH] [-r ROUNDS] [-w WINDOW] SERVER_IP
 *
 * TESTS is a comma list of lww, lww=NxSIZE[xK] (N, SIZE and K for that one), flag and zero; the
 * defaults are -t lww,flag,zero -n 2000 -s 8 -k 1 -q 64 -r 500 -w 4 -T 30.
 *
 * Compiled by tests/rc_order.rs against the system <infiniband/verbs.h>, linked with -libverbs
 * and run with LD_LIBRARY_PATH at the shim. The client names the subtests (-t, a comma list,
 * default "lww,flag,zero"); for each one it sends the server a request carrying the
 * parameters and its QP numbers over TCP, the server answers with its QPs, buffer address and
 * rkey (as ibv_rc_pingpong exchanges them; GID index 1, MTU 1024), and both sides use fresh RC
 * QPs for that subtest only, so an error in one cannot leak into the next.
 *
 *   lww   The client posts N RDMA WRITEs of SIZE bytes to the SAME remote address, keeping up
 *         to DEPTH in flight, signalling every K-th and the last one. Write i fills the
 *         buffer with the u64 value i+1 in every word. After the last completion it tells
 *         the server, which checks at once (and again 200 ms later) that every word is N:
 *         RDMA WRITEs on one RC QP are placed in order, so once the last completes the
 *         buffer holds the last one's bytes. Stale words and the values seen are printed.
 *   flag  ROUNDS rounds, up to WINDOW rounds in flight, three WRs each on one QP: an RDMA
 *         WRITE of a 4 KiB data block (slot b = r % WINDOW; word j = (r+1) << 32 | j), an
 *         8-byte RDMA WRITE of r+1 to a counter word shared by all rounds, and an RDMA
 *         WRITE_WITH_IMM (imm r) to slot b's flag word: 8 bytes (r+1) in even rounds, zero
 *         length in odd ones. The server, on each RECV_RDMA_WITH_IMM completion, checks at
 *         once that block b holds round r's data and the counter at least r+1 (both WRITEs
 *         came before the WRITE_WITH_IMM) and, in even rounds, that slot b's flag is r+1 (its
 *         own payload); if not, it watches the flag 5 ms more to tell a payload placed after
 *         its completion from an older write on top. Then it reposts the receive and
 *         acknowledges round r over TCP (the client reuses slot b only then).
 *   zero  Zero-length RDMA WRITEs, one RC QP per case, each followed by an 8-byte control
 *         WRITE on the same QP: (0) valid rkey, num_sge 0; (1) valid rkey, one SGE of length
 *         0; (2) rkey 0, remote address 0, num_sge 0; (3) rkey 0, remote address 0, one SGE
 *         of length 0. Every zero-length WRITE must complete with IBV_WC_SUCCESS (IBTA: a
 *         zero-length RDMA WRITE touches no memory and checks no key), the server's buffer
 *         must be unchanged apart from the control words.
 *
 * Every wait is bounded (-T, default 30 s per wait; alarm(10 x that) for the whole program).
 * Each subtest prints "SUBTEST <name> ...: ok" or "...: FAIL (why)"; both sides print
 * "RESULT ok" or "RESULT FAIL" at the end and exit 0 only if every subtest passed (1 on a
 * failed check, 2 on a setup error).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { T_LWW = 1, T_FLAG = 2, T_ZERO = 3, T_END = 9 };
#define MAXQ 4
#define NZERO 4
#define FLAG_BLOCK 4096
#define MAXWIN 64

struct qp_info {
    uint32_t qpn;
    uint32_t psn;
    union ibv_gid gid;
};

/* Client -> server: one subtest. */
struct request {
    uint32_t test, n, size, k, depth, rounds, window, nqp;
    struct qp_info qp[MAXQ];
};

/* Server -> client. */
struct reply {
    uint64_t addr;
    uint32_t rkey, nqp;
    struct qp_info qp[MAXQ];
};

/* Client -> server after a subtest's traffic: how it went on the client's side. */
struct done_msg {
    uint32_t ok, completions;
};

/* Server -> client: the server's verdict. */
struct verdict {
    uint32_t ok, stale_now, stale_later;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid my_gid;
static int wait_s = 30;

static void die(const char *what) {
    fprintf(stderr, "rc_order: %s: %s\n", what, errno ? strerror(errno) : "failed");
    fflush(stdout);
    exit(2);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
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

static void xsend(int fd, void *buf, size_t n, const char *what) {
    if (xfer(fd, buf, n, 1)) {
        fprintf(stderr, "rc_order: TCP send (%s) failed: %s\n", what, strerror(errno));
        exit(2);
    }
}

static void xrecv(int fd, void *buf, size_t n, const char *what) {
    if (xfer(fd, buf, n, 0)) {
        fprintf(stderr, "rc_order: TCP receive (%s) failed or timed out after %d s: %s\n", what, wait_s,
                errno ? strerror(errno) : "peer closed");
        exit(2);
    }
}

static void set_timeout(int fd) {
    struct timeval tv = {.tv_sec = wait_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
    set_timeout(fd);
    return fd;
}

static int tcp_client(const char *ip, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        die("server address");
    for (int i = 0; i < 10 * wait_s; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            set_timeout(fd);
            return fd;
        }
        close(fd);
        usleep(100000);
    }
    die("connect");
    return -1;
}

static struct ibv_qp *make_qp(struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t depth, struct qp_info *info) {
    struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1,
                                          .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp)
        die("ibv_create_qp");
    info->qpn = qp->qp_num;
    info->psn = lrand48() & 0xffffff;
    info->gid = my_gid;
    return qp;
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

/* One completion from `cq`, waiting at most wait_s; 0 on timeout. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
    double t0 = now_s();
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0)
            die("ibv_poll_cq");
        if (n == 1)
            return 1;
        if (now_s() - t0 > wait_s)
            return 0;
        usleep(20);
    }
}

static uint64_t flag_word(uint32_t round, uint32_t j) {
    return ((uint64_t)(round + 1) << 32) | j;
}

/* The flag subtest's remote buffer: `w` data blocks, a 64-byte line with the counter word,
 * then one 64-byte line per slot with that slot's WRITE_WITH_IMM payload. */
static size_t flag_counter_off(uint32_t w) {
    return (size_t)w * FLAG_BLOCK;
}

static size_t flag_slot_off(uint32_t w, uint32_t b) {
    return flag_counter_off(w) + 64 + 64 * (size_t)b;
}

static size_t flag_len(uint32_t w) {
    return flag_slot_off(w, w);
}

/* ----------------------------------------------------------------------------------------- */
/* Server side                                                                                */

/* Count the words of `buf` (n words) that are not `want`, print up to a few distinct values. */
static uint32_t stale_words(const uint64_t *buf, uint32_t n, uint64_t want, const char *when) {
    uint32_t stale = 0;
    uint64_t vals[8];
    uint32_t counts[8], nv = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = buf[i];
        if (v == want)
            continue;
        stale++;
        uint32_t j;
        for (j = 0; j < nv && vals[j] != v; j++)
            ;
        if (j == nv && nv < 8) {
            vals[nv] = v;
            counts[nv++] = 0;
        }
        if (j < nv)
            counts[j]++;
    }
    if (stale) {
        printf("server: lww %s: %u of %u words stale (want %" PRIu64 "), values seen:", when, stale, n, want);
        for (uint32_t j = 0; j < nv; j++)
            printf(" %" PRIu64 " x%u", vals[j], counts[j]);
        printf("%s\n", nv == 8 ? " ..." : "");
    } else {
        printf("server: lww %s: all %u words hold %" PRIu64 "\n", when, n, want);
    }
    fflush(stdout);
    return stale;
}

static int serve_one(int fd, const struct request *rq) {
    uint32_t nqp = rq->nqp;
    if (nqp < 1 || nqp > MAXQ)
        die("bad request");
    uint32_t depth = rq->depth ? rq->depth : 64;
    struct ibv_cq *cq = ibv_create_cq(ctx, 4 * depth + 16, NULL, NULL, 0);
    if (!cq)
        die("ibv_create_cq");
    size_t len = rq->test == T_LWW ? rq->size : rq->test == T_FLAG ? flag_len(rq->window) : 64;
    len = (len + 63) & ~(size_t)63;
    uint64_t *buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (!buf)
        die("aligned_alloc");
    memset(buf, rq->test == T_ZERO ? 0xab : 0, len);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr)
        die("ibv_reg_mr");
    struct reply rp = {.addr = (uintptr_t)buf, .rkey = mr->rkey, .nqp = nqp};
    struct ibv_qp *qp[MAXQ];
    for (uint32_t i = 0; i < nqp; i++) {
        qp[i] = make_qp(cq, cq, depth + 16, &rp.qp[i]);
        to_rts(qp[i], &rp.qp[i], &rq->qp[i]);
    }
    /* Receives for the flag rounds' WRITE_WITH_IMMs (never consumed otherwise). */
    uint32_t nrecv = rq->test == T_FLAG ? rq->window + 8 : 0;
    for (uint32_t i = 0; i < nrecv; i++) {
        struct ibv_recv_wr wr = {.wr_id = i, .sg_list = NULL, .num_sge = 0}, *bad;
        if (ibv_post_recv(qp[0], &wr, &bad))
            die("ibv_post_recv");
    }
    xsend(fd, &rp, sizeof rp, "reply");
    int ok = 1;
    struct verdict vd = {0};
    if (rq->test == T_LWW) {
        struct done_msg dm;
        xrecv(fd, &dm, sizeof dm, "lww done");
        uint32_t words = rq->size / 8;
        vd.stale_now = stale_words(buf, words, rq->n, "at once");
        usleep(200000);
        vd.stale_later = stale_words(buf, words, rq->n, "200 ms later");
        ok = dm.ok && !vd.stale_now && !vd.stale_later;
    } else if (rq->test == T_FLAG) {
        uint32_t w = rq->window, bad_rounds = 0, timed_out = 0;
        volatile uint64_t *counter = buf + flag_counter_off(w) / 8;
        for (uint32_t r = 0; r < rq->rounds; r++) {
            struct ibv_wc wc;
            if (!poll_one(cq, &wc)) {
                printf("server: flag round %u: no RECV_RDMA_WITH_IMM within %d s\n", r, wait_s);
                timed_out = 1;
                break;
            }
            if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
                printf("server: flag round %u: completion status %d (%s) opcode %d, want success / "
                       "RECV_RDMA_WITH_IMM\n",
                       r, wc.status, ibv_wc_status_str(wc.status), wc.opcode);
                timed_out = 1;
                break;
            }
            /* Check at once: the data and counter WRITEs preceded the WRITE_WITH_IMM on this
             * QP, and the WRITE_WITH_IMM's own payload is placed before its completion. */
            const volatile uint64_t *blk = buf + (size_t)(r % w) * (FLAG_BLOCK / 8);
            volatile uint64_t *slot = buf + flag_slot_off(w, r % w) / 8;
            uint32_t imm = ntohl(wc.imm_data), wrong = 0, first = 0;
            uint64_t seen = 0;
            for (uint32_t j = 0; j < FLAG_BLOCK / 8; j++)
                if (blk[j] != flag_word(r, j)) {
                    if (!wrong++) {
                        first = j;
                        seen = blk[j];
                    }
                }
            uint64_t cv = *counter, fv = *slot;
            int counter_bad = cv < (uint64_t)r + 1;
            int slot_bad = r % 2 == 0 && fv != (uint64_t)r + 1;
            if (imm != r || wrong || counter_bad || slot_bad) {
                bad_rounds++;
                /* The client reuses this slot only after our ack: a later change of it can
                 * only be this round's payload arriving after its completion. */
                double tw = now_s();
                uint64_t later = *slot;
                while (slot_bad && later != (uint64_t)r + 1 && now_s() - tw < 0.005)
                    later = *slot;
                double late_us = (now_s() - tw) * 1e6;
                if (bad_rounds <= 10) {
                    printf("server: flag round %u at its RECV_RDMA_WITH_IMM: imm %u%s", r, imm,
                           imm == r ? "" : " (WRONG)");
                    if (wrong)
                        printf(", %u of %u data words wrong (word %u holds %#" PRIx64 ", want %#" PRIx64 ")",
                               wrong, FLAG_BLOCK / 8, first, seen, flag_word(r, first));
                    else
                        printf(", data ok");
                    if (counter_bad)
                        printf(", counter word holds %" PRIu64 " (round %" PRIu64 "'s), want >= %u", cv,
                               cv ? cv - 1 : 0, r + 1);
                    else
                        printf(", counter ok");
                    if (slot_bad) {
                        printf(", its own 8-byte payload slot holds %" PRIu64 ", want %u: ", fv, r + 1);
                        if (later == (uint64_t)r + 1)
                            printf("placed %.0f us AFTER the completion", late_us);
                        else
                            printf("still %" PRIu64 " after 5 ms", later);
                    }
                    printf("\n");
                }
            }
            struct ibv_recv_wr wr = {.wr_id = r, .sg_list = NULL, .num_sge = 0}, *bad;
            if (ibv_post_recv(qp[0], &wr, &bad))
                die("ibv_post_recv");
            xsend(fd, &r, sizeof r, "flag ack");
        }
        struct done_msg dm;
        if (!timed_out)
            xrecv(fd, &dm, sizeof dm, "flag done");
        else
            dm.ok = 0;
        vd.stale_now = bad_rounds;
        if (bad_rounds)
            printf("server: flag: %u of %u rounds found their data, counter or payload not in place at "
                   "the RECV_RDMA_WITH_IMM completion\n",
                   bad_rounds, rq->rounds);
        ok = dm.ok && !bad_rounds && !timed_out;
    } else if (rq->test == T_ZERO) {
        struct done_msg dm;
        xrecv(fd, &dm, sizeof dm, "zero done");
        usleep(100000);
        /* Words 0..NZERO-1 hold the fill or (if that case's control WRITE completed, only)
         * the control value 0x1000 + i; the rest, where the valid-rkey zero-length WRITEs
         * pointed (word 5), keep the fill. */
        uint64_t fill;
        memset(&fill, 0xab, sizeof fill);
        uint32_t changed = 0;
        for (uint32_t i = 0; i < 8; i++) {
            uint64_t v = buf[i], ctl = 0x1000 + i;
            int want_ctl = i < NZERO && (dm.completions >> i & 1);
            int good = want_ctl ? v == ctl : v == fill || (i < NZERO && v == ctl);
            if (!good) {
                changed++;
                printf("server: zero: word %u holds %#" PRIx64 ", want %#" PRIx64 "\n", i, v, want_ctl ? ctl : fill);
            }
        }
        if (changed)
            printf("server: zero: %u words of the buffer changed\n", changed);
        else
            printf("server: zero: buffer untouched apart from the control writes\n");
        vd.stale_now = changed;
        ok = dm.ok && !changed;
    }
    vd.ok = ok;
    xsend(fd, &vd, sizeof vd, "verdict");
    for (uint32_t i = 0; i < nqp; i++)
        ibv_destroy_qp(qp[i]);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    free(buf);
    return ok;
}

static int run_server(int port) {
    int fd = tcp_server(port);
    int all = 1;
    for (;;) {
        struct request rq;
        xrecv(fd, &rq, sizeof rq, "request");
        if (rq.test == T_END)
            break;
        all &= serve_one(fd, &rq);
    }
    close(fd);
    return all;
}

/* ----------------------------------------------------------------------------------------- */
/* Client side                                                                                */

struct session {
    int fd;
    struct ibv_cq *cq;
    struct ibv_qp *qp[MAXQ];
    struct qp_info local[MAXQ];
    struct reply rp;
    uint32_t nqp;
};

static void open_session(struct session *s, int fd, struct request *rq) {
    s->fd = fd;
    s->nqp = rq->nqp;
    uint32_t depth = rq->depth ? rq->depth : 64;
    s->cq = ibv_create_cq(ctx, 4 * depth + 16, NULL, NULL, 0);
    if (!s->cq)
        die("ibv_create_cq");
    for (uint32_t i = 0; i < s->nqp; i++) {
        s->qp[i] = make_qp(s->cq, s->cq, depth + 16, &s->local[i]);
        rq->qp[i] = s->local[i];
    }
    xsend(fd, rq, sizeof *rq, "request");
    xrecv(fd, &s->rp, sizeof s->rp, "reply");
    for (uint32_t i = 0; i < s->nqp; i++) {
        to_rts(s->qp[i], &s->local[i], &s->rp.qp[i]);
        printf("client: %s: QP %#x (psn %#x) -> server QP %#x (psn %#x)\n", rq->test == T_LWW ? "lww" : rq->test == T_FLAG ? "flag" : "zero",
               s->local[i].qpn, s->local[i].psn, s->rp.qp[i].qpn, s->rp.qp[i].psn);
    }
}

static void close_session(struct session *s) {
    for (uint32_t i = 0; i < s->nqp; i++)
        ibv_destroy_qp(s->qp[i]);
    ibv_destroy_cq(s->cq);
}

static struct verdict finish(struct session *s, uint32_t ok, uint32_t completions) {
    struct done_msg dm = {.ok = ok, .completions = completions};
    xsend(s->fd, &dm, sizeof dm, "done");
    struct verdict vd;
    xrecv(s->fd, &vd, sizeof vd, "verdict");
    return vd;
}

static int client_lww(int fd, uint32_t n, uint32_t size, uint32_t k, uint32_t depth) {
    double t0 = now_s();
    if (size < 8 || size % 8 || n == 0 || k == 0 || depth == 0) {
        printf("client: lww: bad parameters (size a nonzero multiple of 8, n, k, depth > 0)\n");
        return 0;
    }
    struct request rq = {.test = T_LWW, .n = n, .size = size, .k = k, .depth = depth, .nqp = 1};
    struct session s;
    open_session(&s, fd, &rq);
    double tp = now_s();
    /* A ring of `depth` source slots: write i uses slot i % depth, reused only after write
     * i - depth completed (at most `depth` writes are in flight). */
    size_t slot = ((size_t)size + 63) & ~(size_t)63;
    unsigned char *src = aligned_alloc(4096, (slot * depth + 4095) & ~(size_t)4095);
    if (!src)
        die("aligned_alloc");
    struct ibv_mr *mr = ibv_reg_mr(pd, src, slot * depth, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr");
    uint32_t posted = 0, done = 0, completions = 0, ok = 1;
    while (done < n && ok) {
        while (posted < n && posted - done < depth) {
            uint64_t *p = (uint64_t *)(src + (size_t)(posted % depth) * slot);
            for (uint32_t j = 0; j < size / 8; j++)
                p[j] = (uint64_t)posted + 1;
            int sig = (posted + 1) % k == 0 || posted + 1 == n;
            struct ibv_sge sge = {.addr = (uintptr_t)p, .length = size, .lkey = mr->lkey};
            struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE, .send_flags = sig ? IBV_SEND_SIGNALED : 0},
                               *bad;
            wr.wr.rdma.remote_addr = s.rp.addr;
            wr.wr.rdma.rkey = s.rp.rkey;
            int e = ibv_post_send(s.qp[0], &wr, &bad);
            if (e) {
                printf("client: lww: ibv_post_send of write %u failed: %s\n", posted, strerror(e));
                ok = 0;
                break;
            }
            posted++;
        }
        if (!ok)
            break;
        struct ibv_wc wc;
        if (!poll_one(s.cq, &wc)) {
            printf("client: lww: timed out after %d s with %u of %u writes known complete (%u posted)\n", wait_s,
                   done, n, posted);
            ok = 0;
            break;
        }
        completions++;
        uint32_t id = (uint32_t)wc.wr_id;
        if (wc.status != IBV_WC_SUCCESS) {
            printf("client: lww: write %u completed with status %d (%s)\n", id, wc.status,
                   ibv_wc_status_str(wc.status));
            ok = 0;
            break;
        }
        if (id < done || id >= posted || ((id + 1) % k != 0 && id + 1 != n)) {
            printf("client: lww: unexpected completion wr_id %u (%u done, %u posted, every %u-th signalled)\n",
                   id, done, posted, k);
            ok = 0;
            break;
        }
        done = id + 1;
    }
    double t1 = now_s();
    struct verdict vd = finish(&s, ok, completions);
    close_session(&s);
    ibv_dereg_mr(mr);
    free(src);
    int good = ok && vd.ok;
    printf("SUBTEST lww n=%u size=%u k=%u depth=%u: %s", n, size, k, depth, good ? "ok" : "FAIL");
    if (!good) {
        if (!ok)
            printf(" (client side: %u of %u writes completed)", done, n);
        else
            printf(" (%u of %u words stale at once, %u 200 ms later; the server printed the values)",
                   vd.stale_now, size / 8, vd.stale_later);
    }
    printf(" [%.2f s, %.1f MB/s]\n", now_s() - t0, (double)n * size / (t1 - tp) / 1e6);
    fflush(stdout);
    return good;
}

static int client_flag(int fd, uint32_t rounds, uint32_t window) {
    double t0 = now_s();
    if (window == 0 || window > MAXWIN || rounds == 0) {
        printf("client: flag: bad parameters (1 <= window <= %d, rounds > 0)\n", MAXWIN);
        return 0;
    }
    /* Three WRs a round: data block, counter, WRITE_WITH_IMM. */
    uint32_t depth = 3 * window + 8;
    struct request rq = {.test = T_FLAG, .rounds = rounds, .window = window, .depth = depth, .nqp = 1};
    struct session s;
    open_session(&s, fd, &rq);
    /* Local sources: the remote layout (blocks, then 64-byte lines) with a counter line per
     * slot as well, so a slot's sources are reused only after its round was acknowledged. */
    size_t len = flag_len(window) + 64 * (size_t)window;
    unsigned char *src = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (!src)
        die("aligned_alloc");
    struct ibv_mr *mr = ibv_reg_mr(pd, src, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr");
    static const char *what[3] = {"data WRITE", "counter WRITE", "WRITE_WITH_IMM"};
    uint32_t posted = 0, acked = 0, outstanding = 0, ok = 1, completions = 0;
    while (acked < rounds && ok) {
        while (posted < rounds && posted - acked < window && outstanding + 3 <= depth) {
            uint32_t r = posted, b = r % window;
            uint64_t *blk = (uint64_t *)(src + (size_t)b * FLAG_BLOCK);
            for (uint32_t j = 0; j < FLAG_BLOCK / 8; j++)
                blk[j] = flag_word(r, j);
            uint64_t *fl = (uint64_t *)(src + flag_slot_off(window, b));
            uint64_t *cn = (uint64_t *)(src + flag_len(window) + 64 * (size_t)b);
            *fl = *cn = (uint64_t)r + 1;
            struct ibv_sge dsge = {.addr = (uintptr_t)blk, .length = FLAG_BLOCK, .lkey = mr->lkey};
            struct ibv_sge csge = {.addr = (uintptr_t)cn, .length = 8, .lkey = mr->lkey};
            struct ibv_sge fsge = {.addr = (uintptr_t)fl, .length = 8, .lkey = mr->lkey};
            struct ibv_send_wr fwr = {.wr_id = 3 * (uint64_t)r + 2, .sg_list = r % 2 ? NULL : &fsge,
                                      .num_sge = r % 2 ? 0 : 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                      .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(r)};
            fwr.wr.rdma.remote_addr = s.rp.addr + flag_slot_off(window, b);
            fwr.wr.rdma.rkey = s.rp.rkey;
            struct ibv_send_wr cwr = {.wr_id = 3 * (uint64_t)r + 1, .next = &fwr, .sg_list = &csge, .num_sge = 1,
                                      .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
            cwr.wr.rdma.remote_addr = s.rp.addr + flag_counter_off(window);
            cwr.wr.rdma.rkey = s.rp.rkey;
            struct ibv_send_wr dwr = {.wr_id = 3 * (uint64_t)r, .next = &cwr, .sg_list = &dsge, .num_sge = 1,
                                      .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
                               *bad;
            dwr.wr.rdma.remote_addr = s.rp.addr + (uint64_t)b * FLAG_BLOCK;
            dwr.wr.rdma.rkey = s.rp.rkey;
            int e = ibv_post_send(s.qp[0], &dwr, &bad);
            if (e) {
                printf("client: flag: ibv_post_send of round %u failed (%s) at the %s\n", r, strerror(e),
                       bad == &fwr ? what[2] : bad == &cwr ? what[1] : what[0]);
                ok = 0;
                break;
            }
            posted++;
            outstanding += 3;
        }
        if (!ok)
            break;
        /* Reap send completions without waiting. */
        struct ibv_wc wc;
        int n;
        while ((n = ibv_poll_cq(s.cq, 1, &wc)) == 1) {
            completions++;
            outstanding--;
            if (wc.status != IBV_WC_SUCCESS) {
                printf("client: flag: round %u's %s completed with status %d (%s)\n", (uint32_t)(wc.wr_id / 3),
                       what[wc.wr_id % 3], wc.status, ibv_wc_status_str(wc.status));
                ok = 0;
            }
        }
        if (n < 0)
            die("ibv_poll_cq");
        if (!ok)
            break;
        if (posted - acked >= window || posted == rounds || outstanding + 3 > depth) {
            if (acked < posted) {
                uint32_t r;
                xrecv(fd, &r, sizeof r, "flag ack");
                if (r != acked) {
                    printf("client: flag: server acknowledged round %u, want %u\n", r, acked);
                    ok = 0;
                    break;
                }
                acked++;
            } else {
                usleep(20);
            }
        }
    }
    /* The remaining send completions. */
    while (ok && outstanding) {
        struct ibv_wc wc;
        if (!poll_one(s.cq, &wc)) {
            printf("client: flag: timed out with %u send completions missing\n", outstanding);
            ok = 0;
            break;
        }
        completions++;
        outstanding--;
        if (wc.status != IBV_WC_SUCCESS) {
            printf("client: flag: round %u's %s completed with status %d (%s)\n", (uint32_t)(wc.wr_id / 3),
                   what[wc.wr_id % 3], wc.status, ibv_wc_status_str(wc.status));
            ok = 0;
        }
    }
    if (!ok) {
        /* The server may be waiting for a round that never comes: end the program. */
        printf("SUBTEST flag rounds=%u window=%u: FAIL (client side, %u rounds acknowledged)\n", rounds, window,
               acked);
        printf("RESULT FAIL\n");
        fflush(stdout);
        exit(1);
    }
    struct verdict vd = finish(&s, ok, completions);
    int good = vd.ok;
    close_session(&s);
    ibv_dereg_mr(mr);
    free(src);
    printf("SUBTEST flag rounds=%u window=%u: %s", rounds, window, good ? "ok" : "FAIL");
    if (!good)
        printf(" (%u of %u rounds found their data, counter or payload not in place at the "
               "RECV_RDMA_WITH_IMM completion; the server printed them)",
               vd.stale_now, rounds);
    printf(" [%.2f s]\n", now_s() - t0);
    fflush(stdout);
    return good;
}

static const char *zero_case[NZERO] = {"valid rkey, num_sge 0", "valid rkey, one SGE of length 0",
                                       "rkey 0, remote address 0, num_sge 0",
                                       "rkey 0, remote address 0, one SGE of length 0"};

static int client_zero(int fd) {
    double t0 = now_s();
    struct request rq = {.test = T_ZERO, .depth = 8, .nqp = NZERO};
    struct session s;
    open_session(&s, fd, &rq);
    uint64_t *src = aligned_alloc(4096, 4096);
    if (!src)
        die("aligned_alloc");
    for (int i = 0; i < NZERO; i++)
        src[i] = 0x1000 + i;
    struct ibv_mr *mr = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr");
    int ok = 1, zero_ok[NZERO] = {0}, ctl_ok[NZERO] = {0};
    uint32_t landed = 0;
    for (int i = 0; i < NZERO; i++) {
        struct ibv_sge zsge = {.addr = (uintptr_t)(src + 16), .length = 0, .lkey = mr->lkey};
        struct ibv_sge csge = {.addr = (uintptr_t)(src + i), .length = 8, .lkey = mr->lkey};
        struct ibv_send_wr cwr = {.wr_id = 100 + i, .sg_list = &csge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                                  .send_flags = IBV_SEND_SIGNALED};
        cwr.wr.rdma.remote_addr = s.rp.addr + 8 * (uint64_t)i;
        cwr.wr.rdma.rkey = s.rp.rkey;
        int with_sge = i % 2, key0 = i >= 2;
        struct ibv_send_wr zwr = {.wr_id = i, .sg_list = with_sge ? &zsge : NULL, .num_sge = with_sge,
                                  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
                           *bad;
        zwr.wr.rdma.remote_addr = key0 ? 0 : s.rp.addr + 40;
        zwr.wr.rdma.rkey = key0 ? 0 : s.rp.rkey;
        int e = ibv_post_send(s.qp[i], &zwr, &bad);
        if (e) {
            printf("client: zero case %d (%s): ibv_post_send REFUSED the zero-length WRITE: %s\n", i, zero_case[i],
                   strerror(e));
            ok = 0;
            continue;
        }
        e = ibv_post_send(s.qp[i], &cwr, &bad);
        if (e) {
            printf("client: zero case %d: ibv_post_send of the control write failed: %s\n", i, strerror(e));
            ok = 0;
        }
        for (int c = 0; c < (e ? 1 : 2); c++) {
            struct ibv_wc wc;
            if (!poll_one(s.cq, &wc)) {
                printf("client: zero case %d (%s): no completion within %d s\n", i, zero_case[i], wait_s);
                ok = 0;
                break;
            }
            if (wc.wr_id == (uint64_t)i) {
                zero_ok[i] = wc.status == IBV_WC_SUCCESS;
                printf("client: zero case %d (%s): status %d (%s), want 0 (success): %s\n", i, zero_case[i],
                       wc.status, ibv_wc_status_str(wc.status), zero_ok[i] ? "ok" : "WRONG");
            } else if (wc.wr_id == (uint64_t)(100 + i)) {
                ctl_ok[i] = wc.status == IBV_WC_SUCCESS;
                if (ctl_ok[i])
                    landed |= 1u << i;
                printf("client: zero case %d: the 8-byte control WRITE after it: status %d (%s)\n", i, wc.status,
                       ibv_wc_status_str(wc.status));
            } else {
                printf("client: zero case %d: unexpected completion wr_id %llu status %s\n", i,
                       (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
                ok = 0;
            }
        }
    }
    int nbad = 0;
    for (int i = 0; i < NZERO; i++)
        nbad += !zero_ok[i] || !ctl_ok[i];
    ok &= nbad == 0;
    struct verdict vd = finish(&s, ok, landed);
    close_session(&s);
    ibv_dereg_mr(mr);
    free(src);
    int good = ok && vd.ok;
    printf("SUBTEST zero: %s", good ? "ok" : "FAIL");
    if (!good) {
        printf(" (wrong:");
        for (int i = 0; i < NZERO; i++)
            if (!zero_ok[i] || !ctl_ok[i])
                printf(" [case %d: %s%s]", i, zero_case[i], zero_ok[i] ? ", control write failed" : "");
        if (!vd.ok && ok)
            printf(" [server buffer changed]");
        printf(")");
    }
    printf(" [%.2f s]\n", now_s() - t0);
    fflush(stdout);
    return good;
}

int main(int argc, char **argv) {
    const char *devname = NULL, *server_ip = NULL, *tests = "lww,flag,zero";
    int port = 18517, opt;
    uint32_t n = 2000, size = 8, k = 1, depth = 64, rounds = 500, window = 4;
    while ((opt = getopt(argc, argv, "d:p:t:n:s:k:q:r:w:T:")) != -1) {
        switch (opt) {
        case 'd': devname = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 't': tests = optarg; break;
        case 'n': n = (uint32_t)atoi(optarg); break;
        case 's': size = (uint32_t)atoi(optarg); break;
        case 'k': k = (uint32_t)atoi(optarg); break;
        case 'q': depth = (uint32_t)atoi(optarg); break;
        case 'r': rounds = (uint32_t)atoi(optarg); break;
        case 'w': window = (uint32_t)atoi(optarg); break;
        case 'T': wait_s = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s -d DEV [-p PORT] [-T SECONDS] [-t lww[=NxSIZE[xK]],flag,zero] [-n N] [-s SIZE] [-k K] "
                            "[-q DEPTH] [-r ROUNDS] [-w WINDOW] [SERVER_IP]\n",
                    argv[0]);
            return 2;
        }
    }
    if (optind < argc)
        server_ip = argv[optind];
    if (wait_s <= 0)
        wait_s = 30;
    alarm(10 * wait_s);
    srand48(getpid() * time(NULL));

    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && list[i]; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname))
            dev = list[i];
    if (!dev) {
        fprintf(stderr, "rc_order: no device %s\n", devname ? devname : "(any)");
        return 2;
    }
    ctx = ibv_open_device(dev);
    if (!ctx)
        die("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    if (!pd)
        die("ibv_alloc_pd");
    if (ibv_query_gid(ctx, 1, 1, &my_gid))
        die("ibv_query_gid");

    int all = 1;
    if (!server_ip) {
        all = run_server(port);
    } else {
        int fd = tcp_client(server_ip, port);
        char *list_copy = strdup(tests), *save = NULL;
        for (char *t = strtok_r(list_copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            unsigned tn, ts, tk = k;
            if (!strcmp(t, "lww"))
                all &= client_lww(fd, n, size, k, depth);
            else if (sscanf(t, "lww=%ux%ux%u", &tn, &ts, &tk) >= 2)
                all &= client_lww(fd, tn, ts, tk, depth);
            else if (!strcmp(t, "flag"))
                all &= client_flag(fd, rounds, window);
            else if (!strcmp(t, "zero"))
                all &= client_zero(fd);
            else {
                fprintf(stderr, "rc_order: unknown subtest %s (lww, lww=NxSIZE[xK], flag, zero)\n", t);
                return 2;
            }
        }
        free(list_copy);
        struct request end = {.test = T_END};
        xsend(fd, &end, sizeof end, "end");
        close(fd);
    }
    printf("RESULT %s\n", all ? "ok" : "FAIL");
    fflush(stdout);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return all ? 0 : 1;
}
