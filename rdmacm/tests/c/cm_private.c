/* Private data both ways, a consumer reject with private data, the refusals (multicast,
 * RDMA_PS_IPOIB; an RDMA_PS_UDP id is a UD one) and the event channel's fd, through the librdmacm API as a C program sees it;
 * and a connection the client leaves open when it exits, which its CM must disconnect (a
 * DREQ at exit, as Linux's kernel CM sends when the process's rdma_cm file closes); and
 * rdma_destroy_id while another thread still holds the id's DISCONNECTED event, as rping's
 * main thread destroys its id while its event thread prints that event: the destroy must
 * wait for the acknowledgement and then return (it used to wait forever).
 *   cm_private server PORT
 *   cm_private client ADDR PORT
 * Prints "RESULT ok" when every check held, exits 1 at the first that did not. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); \
	printf(__VA_ARGS__); printf(" (errno %d)\n", errno); exit(1); } } while (0)

static const char REQ[] = "ferroce-req", REP[] = "ferroce-rep-data", NO[] = "please-reject",
	GO[] = "go-away", OPEN[] = "left-open";

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "channel fd not readable for %s",
	      rdma_event_str(t));
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == t, "got %s (status %d), want %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(t));
	return e;
}

static int acked;

/* The event thread of rping, slowed down: acknowledge the event only after main has gone
 * into rdma_destroy_id. */
static void *ack_later(void *e)
{
	struct timespec t = { .tv_nsec = 200 * 1000 * 1000 };
	nanosleep(&t, NULL);
	__atomic_store_n(&acked, 1, __ATOMIC_SEQ_CST);
	rdma_ack_cm_event(e);
	return NULL;
}

static int has(const struct rdma_cm_event *e, const char *s)
{
	size_t n = strlen(s);
	return e->param.conn.private_data_len >= n && !memcmp(e->param.conn.private_data, s, n);
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4,
		.max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, NULL, &a) == 0, "rdma_create_qp");
	CHECK(id->qp && id->send_cq && id->recv_cq && id->pd, "rdma_create_qp left no QP/CQ/PD");
}

static void refusals(struct rdma_event_channel *ch, struct rdma_cm_id *id)
{
	struct rdma_cm_id *u;
	errno = 0;
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_IPOIB) == -1 && errno == EPROTONOSUPPORT,
	      "RDMA_PS_IPOIB not refused");
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_UDP) == 0 && u->qp_type == IBV_QPT_UD &&
	      u->ps == RDMA_PS_UDP, "RDMA_PS_UDP id not created as UD");
	CHECK(rdma_destroy_id(u) == 0, "rdma_destroy_id of the UD id");
	struct sockaddr_in mc = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0xe0000101) };
	errno = 0;
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL) == -1 && errno == ENOSYS,
	      "rdma_join_multicast not refused");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "channel fd readable with no event");
}

static int server(const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "rdma_create_event_channel");
	struct rdma_cm_id *l, *a = NULL, *b = NULL;
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&sin) == 0, "rdma_bind_addr");
	/* Before listening: a client's REQ cannot make the channel readable yet. */
	refusals(ch, l);
	CHECK(rdma_listen(l, 4) == 0, "rdma_listen");
	CHECK(ntohs(rdma_get_src_port(l)) == atoi(port), "rdma_get_src_port");
	for (int i = 0; i < 3; i++) {
		struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK(e->listen_id == l, "listen_id");
		struct rdma_cm_id *id = e->id;
		if (has(e, OPEN)) {
			rdma_ack_cm_event(e);
			make_qp(id);
			struct rdma_conn_param c = { .responder_resources = 1, .initiator_depth = 1,
				.rnr_retry_count = 7 };
			CHECK(rdma_accept(id, &c) == 0, "rdma_accept");
			rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
			b = id;
		} else if (has(e, REQ)) {
			printf("server: REQ private data \"%.*s\"\n", (int)strlen(REQ),
			       (const char *)e->param.conn.private_data);
			rdma_ack_cm_event(e);
			make_qp(id);
			struct rdma_conn_param c = { .private_data = REP,
				.private_data_len = sizeof REP, .responder_resources = 1,
				.initiator_depth = 1, .rnr_retry_count = 7 };
			CHECK(rdma_accept(id, &c) == 0, "rdma_accept");
			rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
			a = id;
		} else {
			CHECK(has(e, NO), "unexpected private data");
			rdma_ack_cm_event(e);
			CHECK(rdma_reject(id, GO, sizeof GO) == 0, "rdma_reject");
			rdma_destroy_id(id);
		}
	}
	/* The client's rdma_disconnect of the first, then its exit with the third open. */
	struct rdma_cm_event *d1 = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(d1->id == a, "first DISCONNECTED not the disconnected connection's");
	rdma_ack_cm_event(d1);
	struct rdma_cm_event *d2 = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(d2->id == b, "second DISCONNECTED not the left-open connection's");
	printf("server: DISCONNECTED for the connection the client left open at exit\n");
	rdma_ack_cm_event(d2);
	rdma_destroy_qp(a);
	rdma_destroy_id(a);
	rdma_destroy_qp(b);
	rdma_destroy_id(b);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	printf("RESULT ok\n");
	return 0;
}

static struct rdma_cm_id *dial(struct rdma_event_channel *ch, struct addrinfo *ai,
			       const char *pd)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) == 0, "rdma_resolve_addr");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs, "no device after address resolution");
	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	make_qp(id);
	struct rdma_conn_param c = { .private_data = pd, .private_data_len = strlen(pd) + 1,
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &c) == 0, "rdma_connect");
	return id;
}

static int client(const char *addr, const char *port)
{
	struct addrinfo h = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	CHECK(getaddrinfo(addr, port, &h, &ai) == 0, "getaddrinfo");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "rdma_create_event_channel");
	/* Before anything is in flight: nothing may make the channel readable yet. */
	struct rdma_cm_id *t;
	CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	refusals(ch, t);
	rdma_destroy_id(t);
	struct rdma_cm_id *id = dial(ch, ai, REQ);
	struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(has(e, REP), "REP private data missing");
	printf("client: REP private data \"%s\"\n", (const char *)e->param.conn.private_data);
	rdma_ack_cm_event(e);
	struct rdma_cm_id *no = dial(ch, ai, NO);
	e = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->id == no && e->status == 28, "REJECTED status %d, want 28 (consumer)", e->status);
	CHECK(has(e, GO), "REJ private data missing");
	printf("client: REJ status %d, private data \"%s\"\n", e->status,
	       (const char *)e->param.conn.private_data);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(no);
	rdma_destroy_id(no);
	struct rdma_cm_id *open = dial(ch, ai, OPEN);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");
	e = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(id);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, ack_later, e) == 0, "pthread_create");
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	CHECK(__atomic_load_n(&acked, __ATOMIC_SEQ_CST),
	      "rdma_destroy_id returned before its DISCONNECTED event was acknowledged");
	pthread_join(th, NULL);
	printf("client: rdma_destroy_id waited for the event another thread held\n");
	freeaddrinfo(ai);
	printf("RESULT ok\n");
	/* Exit with `open` connected (and its channel in use): the CM's exit sends its DREQ. */
	(void)open;
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3]);
	fprintf(stderr, "usage: cm_private server PORT | client ADDR PORT\n");
	return 2;
}
