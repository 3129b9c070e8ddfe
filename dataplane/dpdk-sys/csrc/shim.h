/* ferroce-dpdk-sys: exported, non-inline wrappers for DPDK's static-inline functions and
 * macros (rx/tx burst, mbuf alloc/free/data pointer, errno, TSC). Rust cannot call a
 * `static inline` function, so each gets a tiny real function here. */
#ifndef FERROCE_DPDK_SHIM_H
#define FERROCE_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

uint16_t ferroce_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t ferroce_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

struct rte_mbuf *ferroce_pktmbuf_alloc(struct rte_mempool *mp);
int ferroce_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n);
void ferroce_pktmbuf_free(struct rte_mbuf *m);
void ferroce_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned n);

/* rte_pktmbuf_mtod(m, void *) */
uint8_t *ferroce_pktmbuf_data(struct rte_mbuf *m);
uint16_t ferroce_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t ferroce_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t ferroce_pktmbuf_nb_segs(const struct rte_mbuf *m);
/* Bytes available from the data pointer to the end of the buffer. */
uint16_t ferroce_pktmbuf_room(const struct rte_mbuf *m);
/* Make a single-segment mbuf `len` bytes long (data_len = pkt_len = len); len <= room. */
void ferroce_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);

int ferroce_errno(void);
uint64_t ferroce_rdtsc(void);
uint64_t ferroce_tsc_hz(void);
unsigned ferroce_lcore_id(void);
/* sizeof(struct rte_mbuf) and RTE_PKTMBUF_HEADROOM, for sizing pools. */
unsigned ferroce_mbuf_struct_size(void);
unsigned ferroce_pktmbuf_headroom(void);

#endif
