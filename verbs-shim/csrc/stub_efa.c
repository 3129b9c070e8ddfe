/* Stub libefa.so.1 (rdma-core 44's EFA_1.0 … EFA_1.2): see stub.h. efadv_query_device and
 * efadv_query_ah return "0 on success, or the value of errno on failure" (efadv_query_device.3,
 * efadv_query_ah.3); the create calls return NULL with errno set, as the real ones do for a
 * device that is not EFA. libfabric's EFA provider calls efadv_query_device for every device
 * and divides by the attributes it fills in on success: it must see the failure. */
#include "stub.h"

#if defined(__has_include) && !defined(FERROCE_STUB_NO_HEADER)
#if __has_include(<infiniband/efadv.h>)
#include <infiniband/efadv.h>
#define FERROCE_STUB_HAVE_HEADER 1
#endif
#endif

#ifndef FERROCE_STUB_HAVE_HEADER
struct efadv_ah_attr; struct efadv_cq; struct efadv_cq_init_attr; struct efadv_device_attr;
struct efadv_qp_init_attr; struct ibv_ah; struct ibv_context; struct ibv_cq_ex;
struct ibv_cq_init_attr_ex; struct ibv_pd; struct ibv_qp; struct ibv_qp_init_attr;
struct ibv_qp_init_attr_ex;
#endif

STUB_PTR(EFA_1.0, struct ibv_qp *, efadv_create_driver_qp, (struct ibv_pd *ibvpd, struct ibv_qp_init_attr *attr, uint32_t driver_qp_type))
STUB_PTR(EFA_1.1, struct ibv_qp *, efadv_create_qp_ex, (struct ibv_context *ibvctx, struct ibv_qp_init_attr_ex *attr_ex, struct efadv_qp_init_attr *efa_attr, uint32_t inlen))
STUB_ERRNO(EFA_1.1, int, efadv_query_device, (struct ibv_context *ibvctx, struct efadv_device_attr *attr, uint32_t inlen))
STUB_ERRNO(EFA_1.1, int, efadv_query_ah, (struct ibv_ah *ibvah, struct efadv_ah_attr *attr, uint32_t inlen))
STUB_PTR(EFA_1.2, struct ibv_cq_ex *, efadv_create_cq, (struct ibv_context *ibvctx, struct ibv_cq_init_attr_ex *attr_ex, struct efadv_cq_init_attr *efa_attr, uint32_t inlen))
/* A conversion that cannot fail in rdma-core (no EFA CQ exists here): NULL, errno set. */
STUB_PTR(EFA_1.2, struct efadv_cq *, efadv_cq_from_ibv_cq_ex, (struct ibv_cq_ex *ibvcqx))
