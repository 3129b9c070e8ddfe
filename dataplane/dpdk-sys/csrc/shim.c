/* See shim.h. Compiled with the raw `pkg-config --cflags libdpdk` (which includes
 * rte_config.h and sets -march), so the inline code matches the installed DPDK. */
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_errno.h>
#include <rte_cycles.h>
#include <rte_lcore.h>
#include "shim.h"

uint16_t ferroce_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t ferroce_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *ferroce_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int ferroce_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, n);
}

void ferroce_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void ferroce_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned n)
{
	rte_pktmbuf_free_bulk(mbufs, n);
}

uint8_t *ferroce_pktmbuf_data(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, uint8_t *);
}

uint16_t ferroce_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t ferroce_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

uint16_t ferroce_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

uint16_t ferroce_pktmbuf_room(const struct rte_mbuf *m)
{
	return (uint16_t)(m->buf_len - m->data_off);
}

void ferroce_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

int ferroce_errno(void)
{
	return rte_errno;
}

uint64_t ferroce_rdtsc(void)
{
	return rte_rdtsc();
}

uint64_t ferroce_tsc_hz(void)
{
	return rte_get_tsc_hz();
}

unsigned ferroce_lcore_id(void)
{
	return rte_lcore_id();
}

unsigned ferroce_mbuf_struct_size(void)
{
	return sizeof(struct rte_mbuf);
}

unsigned ferroce_pktmbuf_headroom(void)
{
	return RTE_PKTMBUF_HEADROOM;
}
