/* Stub libmlx5.so.1 (rdma-core 44's MLX5_1.0 … MLX5_1.24): see stub.h. perftest, UCX and
 * DPDK's mlx5 PMDs link it. Per the man pages (mlx5dv_query_device.3, mlx5dv_init_obj.3,
 * mlx5dv_devx_obj_create.3, mlx5dv_dr_flow.3, ...): object-returning calls return NULL and set
 * errno; int calls return "0 on success or the value of errno on failure"; the exceptions are
 * marked where they stand. */
#include "stub.h"

#if defined(__has_include) && !defined(FERROCE_STUB_NO_HEADER)
#if __has_include(<infiniband/mlx5dv.h>)
#include <infiniband/mlx5dv.h>
#define FERROCE_STUB_HAVE_HEADER 1
#endif
#endif

#ifndef FERROCE_STUB_HAVE_HEADER
typedef uint32_t __be32;
typedef uint64_t __be64;
struct ibv_ah; struct ibv_alloc_dm_attr; struct ibv_context; struct ibv_cq; struct ibv_cq_ex;
struct ibv_cq_init_attr_ex; struct ibv_device; struct ibv_dm; struct ibv_flow;
struct ibv_flow_action; struct ibv_flow_action_esp_attr; struct ibv_qp; struct ibv_qp_ex;
struct ibv_qp_init_attr_ex; struct ibv_rwq_ind_table; struct ibv_srq; struct ibv_wq;
struct ibv_wq_init_attr; struct mlx5dv_alloc_dm_attr; struct mlx5dv_clock_info;
struct mlx5dv_context; struct mlx5dv_context_attr; struct mlx5dv_cq_init_attr;
struct mlx5dv_crypto_login_attr; struct mlx5dv_crypto_login_attr_ex;
struct mlx5dv_crypto_login_obj; struct mlx5dv_crypto_login_query_attr; struct mlx5dv_dek;
struct mlx5dv_dek_attr; struct mlx5dv_dek_init_attr; struct mlx5dv_devx_async_cmd_hdr;
struct mlx5dv_devx_async_event_hdr; struct mlx5dv_devx_cmd_comp; struct mlx5dv_devx_eq;
struct mlx5dv_devx_event_channel; struct mlx5dv_devx_msi_vector; struct mlx5dv_devx_obj;
struct mlx5dv_devx_uar; struct mlx5dv_devx_umem; struct mlx5dv_devx_umem_in;
struct mlx5dv_dr_action; struct mlx5dv_dr_action_dest_attr; struct mlx5dv_dr_domain;
struct mlx5dv_dr_flow_meter_attr; struct mlx5dv_dr_flow_sampler_attr; struct mlx5dv_dr_matcher;
struct mlx5dv_dr_matcher_layout; struct mlx5dv_dr_rule; struct mlx5dv_dr_table;
struct mlx5dv_flow_action_attr; struct mlx5dv_flow_action_esp;
struct mlx5dv_flow_match_parameters; struct mlx5dv_flow_matcher;
struct mlx5dv_flow_matcher_attr; struct mlx5dv_mkey; struct mlx5dv_mkey_err;
struct mlx5dv_mkey_init_attr; struct mlx5dv_obj; struct mlx5dv_port; struct mlx5dv_pp;
struct mlx5dv_qp_ex; struct mlx5dv_qp_init_attr; struct mlx5dv_sched_attr;
struct mlx5dv_sched_leaf; struct mlx5dv_sched_node; struct mlx5dv_steering_anchor;
struct mlx5dv_steering_anchor_attr; struct mlx5dv_var; struct mlx5dv_vfio_context_attr;
struct mlx5dv_wq_init_attr;
enum mlx5dv_crypto_login_state { FERROCE_STUB_MLX5DV_CRYPTO_LOGIN_STATE };
enum mlx5dv_devx_create_event_channel_flags { FERROCE_STUB_MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS };
enum mlx5dv_dr_domain_type { FERROCE_STUB_MLX5DV_DR_DOMAIN_TYPE };
enum mlx5dv_flow_action_packet_reformat_type { FERROCE_STUB_MLX5DV_FLOW_ACTION_PACKET_REFORMAT_TYPE };
enum mlx5dv_flow_table_type { FERROCE_STUB_MLX5DV_FLOW_TABLE_TYPE };
enum mlx5dv_set_ctx_attr_type { FERROCE_STUB_MLX5DV_SET_CTX_ATTR_TYPE };
#endif

STUB_ERRNO(MLX5_1.0, int, mlx5dv_query_device, (struct ibv_context *ctx_in, struct mlx5dv_context *attrs_out))
STUB_PTR(MLX5_1.1, struct ibv_cq_ex *, mlx5dv_create_cq, (struct ibv_context *context, struct ibv_cq_init_attr_ex *cq_attr, struct mlx5dv_cq_init_attr *mlx5_cq_attr))
/* rdma-core exports mlx5dv_init_obj twice: @@MLX5_1.2 (the default) and @MLX5_1.0. */
STUB_ERRNO_AT(MLX5_1.0, int, mlx5dv_init_obj, 1_0, "@", (struct mlx5dv_obj *obj, uint64_t obj_type))
STUB_ERRNO_AT(MLX5_1.2, int, mlx5dv_init_obj, 1_2, "@@", (struct mlx5dv_obj *obj, uint64_t obj_type))
STUB_ERRNO(MLX5_1.2, int, mlx5dv_set_context_attr, (struct ibv_context *context, enum mlx5dv_set_ctx_attr_type type, void *attr))
STUB_PTR(MLX5_1.3, struct ibv_wq *, mlx5dv_create_wq, (struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr, struct mlx5dv_wq_init_attr *mlx5_wq_attr))
STUB_PTR(MLX5_1.3, struct ibv_qp *, mlx5dv_create_qp, (struct ibv_context *context, struct ibv_qp_init_attr_ex *qp_attr, struct mlx5dv_qp_init_attr *mlx5_qp_attr))
STUB_ERRNO(MLX5_1.4, int, mlx5dv_get_clock_info, (struct ibv_context *context, struct mlx5dv_clock_info *clock_info))
STUB_PTR(MLX5_1.5, struct ibv_flow_action *, mlx5dv_create_flow_action_esp, (struct ibv_context *ctx, struct ibv_flow_action_esp_attr *esp, struct mlx5dv_flow_action_esp *mlx5_attr))
STUB_ERRNO(MLX5_1.6, int, mlx5dv_destroy_flow_matcher, (struct mlx5dv_flow_matcher *matcher))
STUB_PTR(MLX5_1.6, struct mlx5dv_flow_matcher *, mlx5dv_create_flow_matcher, (struct ibv_context *context, struct mlx5dv_flow_matcher_attr *matcher_attr))
STUB_PTR(MLX5_1.6, struct ibv_flow *, mlx5dv_create_flow, (struct mlx5dv_flow_matcher *matcher, struct mlx5dv_flow_match_parameters *match_value, size_t num_actions, struct mlx5dv_flow_action_attr *actions_attr))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_query_eqn, (struct ibv_context *context, uint32_t vector, uint32_t *eqn))
STUB_PTR(MLX5_1.7, struct ibv_context *, mlx5dv_open_device, (struct ibv_device *device, struct mlx5dv_context_attr *attr))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_obj_destroy, (struct mlx5dv_devx_obj *obj))
STUB_VOID(MLX5_1.7, void, mlx5dv_devx_free_uar, (struct mlx5dv_devx_uar *devx_uar))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_general_cmd, (struct ibv_context *context, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_obj_query, (struct mlx5dv_devx_obj *obj, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_obj_modify, (struct mlx5dv_devx_obj *obj, const void *in, size_t inlen, void *out, size_t outlen))
STUB_PTR(MLX5_1.7, struct mlx5dv_devx_obj *, mlx5dv_devx_obj_create, (struct ibv_context *context, const void *in, size_t inlen, void *out, size_t outlen))
STUB_PTR(MLX5_1.7, struct mlx5dv_devx_umem *, mlx5dv_devx_umem_reg, (struct ibv_context *ctx, void *addr, size_t size, uint32_t access))
STUB_PTR(MLX5_1.7, struct mlx5dv_devx_uar *, mlx5dv_devx_alloc_uar, (struct ibv_context *context, uint32_t flags))
STUB_ERRNO(MLX5_1.7, int, mlx5dv_devx_umem_dereg, (struct mlx5dv_devx_umem *umem))
STUB_PTR(MLX5_1.7, struct ibv_flow_action *, mlx5dv_create_flow_action_modify_header, (struct ibv_context *ctx, size_t actions_sz, uint64_t actions[], enum mlx5dv_flow_table_type ft_type))
STUB_PTR(MLX5_1.7, struct ibv_flow_action *, mlx5dv_create_flow_action_packet_reformat, (struct ibv_context *ctx, size_t data_sz, void *data, enum mlx5dv_flow_action_packet_reformat_type reformat_type, enum mlx5dv_flow_table_type ft_type))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_qp_query, (struct ibv_qp *qp, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_wq_query, (struct ibv_wq *wq, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_ind_tbl_query, (struct ibv_rwq_ind_table *ind_tbl, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_cq_query, (struct ibv_cq *cq, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_wq_modify, (struct ibv_wq *wq, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_qp_modify, (struct ibv_qp *qp, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_srq_modify, (struct ibv_srq *srq, const void *in, size_t inlen, void *out, size_t outlen))
/* "Returns true if device is implemented by mlx5 provider": never here. */
STUB_FALSE(MLX5_1.8, bool, mlx5dv_is_supported, (struct ibv_device *device))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_cq_modify, (struct ibv_cq *cq, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_ind_tbl_modify, (struct ibv_rwq_ind_table *ind_tbl, const void *in, size_t inlen, void *out, size_t outlen))
STUB_ERRNO(MLX5_1.8, int, mlx5dv_devx_srq_query, (struct ibv_srq *srq, const void *in, size_t inlen, void *out, size_t outlen))
STUB_PTR(MLX5_1.9, struct mlx5dv_devx_cmd_comp *, mlx5dv_devx_create_cmd_comp, (struct ibv_context *context))
STUB_VOID(MLX5_1.9, void, mlx5dv_devx_destroy_cmd_comp, (struct mlx5dv_devx_cmd_comp *cmd_comp))
STUB_ERRNO(MLX5_1.9, int, mlx5dv_devx_get_async_cmd_comp, (struct mlx5dv_devx_cmd_comp *cmd_comp, struct mlx5dv_devx_async_cmd_hdr *cmd_resp, size_t cmd_resp_len))
STUB_ERRNO(MLX5_1.9, int, mlx5dv_devx_obj_query_async, (struct mlx5dv_devx_obj *obj, const void *in, size_t inlen, size_t outlen, uint64_t wr_id, struct mlx5dv_devx_cmd_comp *cmd_comp))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_vport, (struct mlx5dv_dr_domain *domain, uint32_t vport))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_flow_counter, (struct mlx5dv_devx_obj *devx_obj, uint32_t offset))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_action_destroy, (struct mlx5dv_dr_action *action))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_rule *, mlx5dv_dr_rule_create, (struct mlx5dv_dr_matcher *matcher, struct mlx5dv_flow_match_parameters *value, size_t num_actions, struct mlx5dv_dr_action *actions[]))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_packet_reformat, (struct mlx5dv_dr_domain *domain, uint32_t flags, enum mlx5dv_flow_action_packet_reformat_type reformat_type, size_t data_sz, void *data))
/* A conversion that cannot fail in rdma-core (no mlx5 QP exists here): NULL, errno set. */
STUB_PTR(MLX5_1.10, struct mlx5dv_qp_ex *, mlx5dv_qp_ex_from_ibv_qp_ex, (struct ibv_qp_ex *qp))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_destroy_mkey, (struct mlx5dv_mkey *mkey))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_table *, mlx5dv_dr_table_create, (struct mlx5dv_dr_domain *domain, uint32_t level))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_rule_destroy, (struct mlx5dv_dr_rule *rule))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_domain *, mlx5dv_dr_domain_create, (struct ibv_context *ctx, enum mlx5dv_dr_domain_type type))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_modify_header, (struct mlx5dv_dr_domain *domain, uint32_t flags, size_t actions_sz, __be64 actions[]))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_tag, (uint32_t tag_value))
STUB_PTR(MLX5_1.10, struct ibv_dm *, mlx5dv_alloc_dm, (struct ibv_context *context, struct ibv_alloc_dm_attr *dm_attr, struct mlx5dv_alloc_dm_attr *mlx5_dm_attr))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_ibv_qp, (struct ibv_qp *ibqp))
STUB_PTR(MLX5_1.10, struct mlx5dv_mkey *, mlx5dv_create_mkey, (struct mlx5dv_mkey_init_attr *mkey_init_attr))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_matcher_destroy, (struct mlx5dv_dr_matcher *matcher))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_table, (struct mlx5dv_dr_table *table))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_table_destroy, (struct mlx5dv_dr_table *table))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_domain_sync, (struct mlx5dv_dr_domain *domain, uint32_t flags))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_matcher *, mlx5dv_dr_matcher_create, (struct mlx5dv_dr_table *table, uint16_t priority, uint8_t match_criteria_enable, struct mlx5dv_flow_match_parameters *mask))
STUB_ERRNO(MLX5_1.10, int, mlx5dv_dr_domain_destroy, (struct mlx5dv_dr_domain *domain))
STUB_PTR(MLX5_1.10, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_drop, (void))
STUB_VOID(MLX5_1.11, void, mlx5dv_devx_destroy_event_channel, (struct mlx5dv_devx_event_channel *event_channel))
STUB_PTR(MLX5_1.11, struct mlx5dv_devx_event_channel *, mlx5dv_devx_create_event_channel, (struct ibv_context *context, enum mlx5dv_devx_create_event_channel_flags flags))
STUB_ERRNO(MLX5_1.11, int, mlx5dv_devx_subscribe_devx_event_fd, (struct mlx5dv_devx_event_channel *event_channel, int fd, struct mlx5dv_devx_obj *obj, uint16_t event_num))
/* mlx5dv.h: "upon success number of bytes read, otherwise -1 and errno was set". */
STUB_NEG1(MLX5_1.11, ssize_t, mlx5dv_devx_get_event, (struct mlx5dv_devx_event_channel *event_channel, struct mlx5dv_devx_async_event_hdr *event_data, size_t event_resp_len))
STUB_ERRNO(MLX5_1.11, int, mlx5dv_devx_subscribe_devx_event, (struct mlx5dv_devx_event_channel *event_channel, struct mlx5dv_devx_obj *obj, uint16_t events_sz, uint16_t events_num[], uint64_t cookie))
STUB_ERRNO(MLX5_1.12, int, mlx5dv_dr_action_modify_flow_meter, (struct mlx5dv_dr_action *action, struct mlx5dv_dr_flow_meter_attr *attr, __be64 modify_field_select))
STUB_VOID(MLX5_1.12, void, mlx5dv_free_var, (struct mlx5dv_var *dv_var))
STUB_ERRNO(MLX5_1.12, int, mlx5dv_dump_dr_domain, (FILE *fout, struct mlx5dv_dr_domain *domain))
STUB_ERRNO(MLX5_1.12, int, mlx5dv_dump_dr_table, (FILE *fout, struct mlx5dv_dr_table *table))
STUB_PTR(MLX5_1.12, struct mlx5dv_var *, mlx5dv_alloc_var, (struct ibv_context *context, uint32_t flags))
STUB_ERRNO(MLX5_1.12, int, mlx5dv_dump_dr_rule, (FILE *fout, struct mlx5dv_dr_rule *rule))
STUB_PTR(MLX5_1.12, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_flow_meter, (struct mlx5dv_dr_flow_meter_attr *attr))
STUB_ERRNO(MLX5_1.12, int, mlx5dv_dump_dr_matcher, (FILE *fout, struct mlx5dv_dr_matcher *matcher))
STUB_VOID(MLX5_1.13, void, mlx5dv_pp_free, (struct mlx5dv_pp *pp))
STUB_PTR(MLX5_1.13, struct mlx5dv_pp *, mlx5dv_pp_alloc, (struct ibv_context *context, size_t pp_context_sz, const void *pp_context, uint32_t flags))
STUB_VOID(MLX5_1.14, void, mlx5dv_dr_domain_set_reclaim_device_memory, (struct mlx5dv_dr_domain *dmn, bool enable))
STUB_ERRNO(MLX5_1.14, int, mlx5dv_query_qp_lag_port, (struct ibv_qp *qp, uint8_t *port_num, uint8_t *active_port_num))
STUB_PTR(MLX5_1.14, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_default_miss, (void))
STUB_ERRNO(MLX5_1.14, int, mlx5dv_modify_qp_lag_port, (struct ibv_qp *qp, uint8_t port_num))
STUB_PTR(MLX5_1.15, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_devx_tir, (struct mlx5dv_devx_obj *devx_obj))
STUB_PTR(MLX5_1.16, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_flow_sampler, (struct mlx5dv_dr_flow_sampler_attr *attr))
STUB_PTR(MLX5_1.16, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_array, (struct mlx5dv_dr_domain *domain, size_t num_dest, struct mlx5dv_dr_action_dest_attr *dests[]))
STUB_PTR(MLX5_1.17, struct mlx5dv_sched_node *, mlx5dv_sched_node_create, (struct ibv_context *context, const struct mlx5dv_sched_attr *sched_attr))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_modify_qp_udp_sport, (struct ibv_qp *qp, uint16_t udp_sport))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_modify_qp_sched_elem, (struct ibv_qp *qp, const struct mlx5dv_sched_leaf *requestor, const struct mlx5dv_sched_leaf *responder))
STUB_PTR(MLX5_1.17, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_aso, (struct mlx5dv_dr_domain *domain, struct mlx5dv_devx_obj *devx_obj, uint32_t offset, uint32_t flags, uint8_t return_reg_c))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_dr_action_modify_aso, (struct mlx5dv_dr_action *action, uint32_t offset, uint32_t flags, uint8_t return_reg_c))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_sched_node_destroy, (struct mlx5dv_sched_node *node))
STUB_PTR(MLX5_1.17, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_push_vlan, (struct mlx5dv_dr_domain *domain, __be32 vlan_hdr))
STUB_PTR(MLX5_1.17, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_pop_vlan, (void))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_sched_leaf_modify, (struct mlx5dv_sched_leaf *leaf, const struct mlx5dv_sched_attr *sched_attr))
STUB_PTR(MLX5_1.17, struct mlx5dv_sched_leaf *, mlx5dv_sched_leaf_create, (struct ibv_context *context, const struct mlx5dv_sched_attr *sched_attr))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_sched_leaf_destroy, (struct mlx5dv_sched_leaf *leaf))
STUB_ERRNO(MLX5_1.17, int, mlx5dv_sched_node_modify, (struct mlx5dv_sched_node *node, const struct mlx5dv_sched_attr *sched_attr))
STUB_ERRNO(MLX5_1.18, int, mlx5dv_reserved_qpn_dealloc, (struct ibv_context *ctx, uint32_t qpn))
STUB_ERRNO(MLX5_1.18, int, mlx5dv_reserved_qpn_alloc, (struct ibv_context *ctx, uint32_t *qpn))
STUB_ERRNO(MLX5_1.19, int, _mlx5dv_query_port, (struct ibv_context *context, uint32_t port_num, struct mlx5dv_port *info, size_t info_len))
STUB_PTR(MLX5_1.19, void *, mlx5dv_dm_map_op_addr, (struct ibv_dm *dm, uint8_t op))
STUB_PTR(MLX5_1.19, struct mlx5dv_devx_umem *, mlx5dv_devx_umem_reg_ex, (struct ibv_context *ctx, struct mlx5dv_devx_umem_in *umem_in))
STUB_ERRNO(MLX5_1.20, int, _mlx5dv_mkey_check, (struct mlx5dv_mkey *mkey, struct mlx5dv_mkey_err *err_info, size_t err_info_size))
STUB_VOID(MLX5_1.20, void, mlx5dv_dr_domain_allow_duplicate_rules, (struct mlx5dv_dr_domain *domain, bool allow))
/* "Number of work requests that were canceled, or -errno on error." */
STUB_NEGERRNO(MLX5_1.20, int, mlx5dv_qp_cancel_posted_send_wrs, (struct mlx5dv_qp_ex *mqp, uint64_t wr_id))
STUB_ERRNO(MLX5_1.20, int, mlx5dv_map_ah_to_qp, (struct ibv_ah *ah, uint32_t qp_num))
STUB_PTR(MLX5_1.21, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_ib_port, (struct mlx5dv_dr_domain *domain, uint32_t ib_port))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_dek_query, (struct mlx5dv_dek *dek, struct mlx5dv_dek_attr *attr))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_crypto_login, (struct ibv_context *context, struct mlx5dv_crypto_login_attr *login_attr))
STUB_PTR(MLX5_1.21, struct ibv_device **, mlx5dv_get_vfio_device_list, (struct mlx5dv_vfio_context_attr *attr))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_vfio_process_events, (struct ibv_context *context))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_dr_matcher_set_layout, (struct mlx5dv_dr_matcher *matcher, struct mlx5dv_dr_matcher_layout *layout))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_dci_stream_id_reset, (struct ibv_qp *qp, uint16_t stream_id))
STUB_PTR(MLX5_1.21, struct mlx5dv_dek *, mlx5dv_dek_create, (struct ibv_context *context, struct mlx5dv_dek_init_attr *init_attr))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_dek_destroy, (struct mlx5dv_dek *dek))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_crypto_logout, (struct ibv_context *context))
STUB_ERRNO(MLX5_1.21, int, mlx5dv_crypto_login_query_state, (struct ibv_context *context, enum mlx5dv_crypto_login_state *state))
/* Returns a file descriptor (mlx5dv_vfio_get_events_fd.3 names no failure): -1, errno set. */
STUB_NEG1(MLX5_1.21, int, mlx5dv_vfio_get_events_fd, (struct ibv_context *ibctx))
STUB_ERRNO(MLX5_1.22, int, mlx5dv_dr_aso_other_domain_link, (struct mlx5dv_devx_obj *devx_obj, struct mlx5dv_dr_domain *peer_dmn, struct mlx5dv_dr_domain *dmn, uint32_t flags, uint8_t return_reg_c))
STUB_ERRNO(MLX5_1.22, int, mlx5dv_dr_aso_other_domain_unlink, (struct mlx5dv_devx_obj *devx_obj, struct mlx5dv_dr_domain *dmn))
STUB_PTR(MLX5_1.23, struct mlx5dv_devx_eq *, mlx5dv_devx_create_eq, (struct ibv_context *ibctx, const void *in, size_t inlen, void *out, size_t outlen))
STUB_PTR(MLX5_1.23, struct mlx5dv_devx_msi_vector *, mlx5dv_devx_alloc_msi_vector, (struct ibv_context *ibctx))
STUB_ERRNO(MLX5_1.23, int, mlx5dv_devx_destroy_eq, (struct mlx5dv_devx_eq *eq))
STUB_ERRNO(MLX5_1.23, int, mlx5dv_devx_free_msi_vector, (struct mlx5dv_devx_msi_vector *msi))
STUB_PTR(MLX5_1.24, struct mlx5dv_steering_anchor *, mlx5dv_create_steering_anchor, (struct ibv_context *context, struct mlx5dv_steering_anchor_attr *attr))
STUB_ERRNO(MLX5_1.24, int, mlx5dv_destroy_steering_anchor, (struct mlx5dv_steering_anchor *sa))
STUB_PTR(MLX5_1.24, struct mlx5dv_dr_action *, mlx5dv_dr_action_create_dest_root_table, (struct mlx5dv_dr_table *table, uint16_t priority))
STUB_PTR(MLX5_1.24, struct mlx5dv_crypto_login_obj *, mlx5dv_crypto_login_create, (struct ibv_context *context, struct mlx5dv_crypto_login_attr_ex *login_attr))
STUB_ERRNO(MLX5_1.24, int, mlx5dv_crypto_login_destroy, (struct mlx5dv_crypto_login_obj *crypto_login))
STUB_ERRNO(MLX5_1.24, int, mlx5dv_crypto_login_query, (struct mlx5dv_crypto_login_obj *crypto_login, struct mlx5dv_crypto_login_query_attr *query_attr))
