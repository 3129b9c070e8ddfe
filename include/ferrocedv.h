/* ferrocedv: ferroce's multiplane extension to verbs, beside the unchanged libibverbs API
 * (as mlx5dv extends it for mlx5). Exported by ferroce's libibverbs.so.1 (verbs-shim/) under
 * the symbol version FERROCEDV_1.0. See docs/ferrocedv.md.
 *
 * A native-mode ferroce RC QP is a stream of the one connection its engine keeps to the peer;
 * the connection, not the QP, has paths and planes (the engine's NIC ports). So every query
 * below describes, and ferrocedv_set_planes() restricts, the QP's connection: all QPs of this
 * process's engine to the same peer share it (a QP connected to this very host may be on the
 * accepted end of the host's connection to itself, a different connection).
 *
 * Every function returns 0 or a positive errno value (errno is not set):
 *   EINVAL      a null pointer, a size smaller than this header's structure, or a plane mask
 *               with no plane of the engine;
 *   EOPNOTSUPP  a QP with no ferroce connection: the RoCEv2 device (go-back-N, one path,
 *               no planes), UD, UC and XRC QPs;
 *   ENOTCONN    an RC QP not yet in RTR (no connection yet);
 *   ETIMEDOUT   the engine did not answer within 5 s;
 *   EIO         the engine no longer knows the connection (it closed or failed).
 * Nothing is made up: a field the engine cannot fill is left out of comp_mask. */
#ifndef FERROCEDV_H
#define FERROCEDV_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ferrocedv_conn_state {
	FERROCEDV_CONN_OPENING = 0, /* OPEN sent, no OPEN_ACK yet (no paths yet) */
	FERROCEDV_CONN_OPEN = 1,
	FERROCEDV_CONN_CLOSING = 2,
	FERROCEDV_CONN_CLOSED = 3,
	FERROCEDV_CONN_FAILED = 4,
};

/* spec/transport.md §4.4. A path that fails moves to the next plane and a new UDP source
 * port and is Probing until a probe is answered: "failed" is an event (counters.failures),
 * Probing the state it leaves the path in. */
enum ferrocedv_path_state {
	FERROCEDV_PATH_GOOD = 0,    /* carries new data */
	FERROCEDV_PATH_SUSPECT = 1, /* an RTO expired: no new data, probing */
	FERROCEDV_PATH_PROBING = 2, /* failed, re-routed, probing the new route */
};

/* Bits of ferrocedv_qp.comp_mask, set by the library for fields it filled. */
enum {
	FERROCEDV_QP_MASK_MTU = 1 << 0,
};

struct ferrocedv_qp {
	uint64_t comp_mask;  /* out: FERROCEDV_QP_MASK_* of the optional fields filled */
	uint64_t conn_id;    /* the engine's connection id */
	uint32_t peer_ipv4;  /* the peer's IPv4 address, network byte order */
	uint32_t state;      /* enum ferrocedv_conn_state */
	uint32_t num_paths;  /* paths of the connection (0 before it is open) */
	uint32_t num_planes; /* planes (NIC ports) of the engine */
	uint64_t plane_mask; /* planes the connection may send on (bit i: plane i) */
	uint32_t mtu;        /* payload bytes per packet agreed with the peer */
	uint32_t reserved;
};

/* Per-path counters since the path was created (spec/transport.md, counters). */
struct ferrocedv_path_counters {
	uint64_t tx_pkts;
	uint64_t tx_bytes;
	uint64_t retx_pkts;      /* packets carrying a chunk sent before */
	uint64_t acked_pkts;
	uint64_t sack_holes;     /* losses found by SACK */
	uint64_t time_losses;    /* losses found by time (RACK) */
	uint64_t tlps;           /* tail-loss probes */
	uint64_t rtos;
	uint64_t ecn_echoed;
	uint64_t cwnd_decreases;
	uint64_t probes_sent;
	uint64_t failures;       /* times the path failed */
	uint64_t reroutes;       /* new routes tried (source port and plane moved) */
};

/* Bits of ferrocedv_path.comp_mask. */
enum {
	FERROCEDV_PATH_MASK_SRTT = 1 << 0, /* srtt_ns and min_rtt_ns: an RTT sample exists */
};

struct ferrocedv_path {
	uint64_t comp_mask;   /* out: FERROCEDV_PATH_MASK_* */
	uint32_t index;
	uint32_t state;       /* enum ferrocedv_path_state */
	uint32_t plane;       /* current plane (NIC port) */
	uint32_t home_plane;  /* the plane it returns to after a move */
	uint16_t udp_sport;   /* current UDP source port (the ECMP entropy) */
	uint16_t reserved0;
	uint32_t generation;  /* re-routes so far (each picks a new source port) */
	uint64_t srtt_ns;
	uint64_t min_rtt_ns;
	uint64_t rto_ns;
	uint64_t cwnd_bytes;
	uint64_t inflight_bytes;
	struct ferrocedv_path_counters counters;
};

/* The QP's connection. attr_size: sizeof(struct ferrocedv_qp) as the caller knows it (at
 * least this header's; a larger, newer one has its tail left untouched). */
int ferrocedv_query_qp(struct ibv_qp *qp, struct ferrocedv_qp *attr, size_t attr_size);

/* The paths of the QP's connection, in index order: *num_paths in, the capacity of `paths`
 * (entries of path_size bytes each, path_size >= this header's sizeof(struct
 * ferrocedv_path)); out, the entries written (all of the connection's, if they fit: compare
 * with ferrocedv_qp.num_paths). */
int ferrocedv_query_paths(struct ibv_qp *qp, struct ferrocedv_path *paths, uint32_t *num_paths,
			  size_t path_size);

/* Restrict the QP's connection (every QP to that peer) to the planes of plane_mask (bit i:
 * plane i; bits beyond the engine's planes are ignored; UINT64_MAX lifts the restriction).
 * Paths on other planes move to an allowed one at once, re-routes stay within the mask, and
 * no packet of the connection leaves on another plane; the wire is unchanged. A mask with no
 * plane of the engine is EINVAL and changes nothing. */
int ferrocedv_set_planes(struct ibv_qp *qp, uint64_t plane_mask);

#ifdef __cplusplus
}
#endif

#endif /* FERROCEDV_H */
