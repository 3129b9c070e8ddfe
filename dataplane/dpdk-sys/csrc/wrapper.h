/* What bindgen binds: the DPDK APIs ferroce uses, plus the shim. */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_dev.h>
#include <rte_bus_vdev.h>
#include <rte_eth_ring.h>
#include <rte_version.h>
#include "shim.h"
