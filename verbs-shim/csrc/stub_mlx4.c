/* Stub libmlx4.so.1 (rdma-core 44's MLX4_1.0): see stub.h. DPDK's mlx4 PMD links it. The int
 * calls return "0 on success or the value of errno on failure" (mlx4dv_init_obj.3,
 * mlx4dv_query_device.3, mlx4dv_set_context_attr.3); mlx4dv_create_qp returns NULL with errno
 * set. */
#include "stub.h"

#if defined(__has_include) && !defined(FERROCE_STUB_NO_HEADER)
#if __has_include(<infiniband/mlx4dv.h>)
#include <infiniband/mlx4dv.h>
#define FERROCE_STUB_HAVE_HEADER 1
#endif
#endif

#ifndef FERROCE_STUB_HAVE_HEADER
struct ibv_context; struct ibv_qp; struct ibv_qp_init_attr_ex; struct mlx4dv_context;
struct mlx4dv_obj; struct mlx4dv_qp_init_attr;
enum mlx4dv_set_ctx_attr_type { FERROCE_STUB_MLX4DV_SET_CTX_ATTR_TYPE };
#endif

STUB_PTR(MLX4_1.0, struct ibv_qp *, mlx4dv_create_qp, (struct ibv_context *context, struct ibv_qp_init_attr_ex *attr, struct mlx4dv_qp_init_attr *mlx4_qp_attr))
STUB_ERRNO(MLX4_1.0, int, mlx4dv_init_obj, (struct mlx4dv_obj *obj, uint64_t obj_type))
STUB_ERRNO(MLX4_1.0, int, mlx4dv_query_device, (struct ibv_context *ctx_in, struct mlx4dv_context *attrs_out))
STUB_ERRNO(MLX4_1.0, int, mlx4dv_set_context_attr, (struct ibv_context *context, enum mlx4dv_set_ctx_attr_type attr_type, void *attr))
