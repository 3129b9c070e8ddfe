/* Stub libmlx5.so.1 for the ferroce verbs shim: perftest links against mlx5dv_* but only
 * calls them for mlx5 devices (vendor id 0x02c9), which ferroce never reports. Every entry
 * fails cleanly (NULL / EOPNOTSUPP); nothing here touches libibverbs. */
#include <errno.h>
#include <stddef.h>

#define STUB_PTR(name) void *name(void) { errno = EOPNOTSUPP; return NULL; }
#define STUB_INT(name) int name(void) { return EOPNOTSUPP; }

STUB_PTR(mlx5dv_create_qp)
STUB_PTR(mlx5dv_open_device)
STUB_INT(mlx5dv_devx_general_cmd)
STUB_PTR(mlx5dv_create_mkey)
STUB_INT(mlx5dv_destroy_mkey)
STUB_PTR(mlx5dv_qp_ex_from_ibv_qp_ex)
STUB_INT(mlx5dv_crypto_login)
STUB_PTR(mlx5dv_dek_create)
STUB_INT(mlx5dv_dek_destroy)
int mlx5dv_is_supported(void *device) { (void)device; return 0; }
