//! rdma-core's symbol versions: each `ferroce_v_<name>` (exported by `verbs.rs`) is also
//! `<name>@@<version>`, the default version node applications were linked against. The nodes
//! themselves are defined by the version script `build.rs` passes to the linker.
//!
//! (rustc's own version script exports the functions unversioned; applications built
//! against rdma-core look names up with their version and, with BIND_NOW, fail to load when
//! one is missing.)

/// `export!(version: name, name, ...)`.
macro_rules! export {
    ($ver:literal : $($name:ident)*) => {
        $(
            // A tail-jump defined in this very object (`.symver` needs its target defined
            // where it is), bound to the versioned name.
            std::arch::global_asm!(concat!(
                ".pushsection .text.ferroce_sv_", stringify!($name), ",\"ax\",@progbits\n",
                ".globl ferroce_sv_", stringify!($name), "\n",
                ".type ferroce_sv_", stringify!($name), ",@function\n",
                ".p2align 4\n",
                "ferroce_sv_", stringify!($name), ":\n",
                "    jmp ferroce_v_", stringify!($name), "@PLT\n",
                ".size ferroce_sv_", stringify!($name), ", . - ferroce_sv_", stringify!($name), "\n",
                ".symver ferroce_sv_", stringify!($name), ", ", stringify!($name), "@@", $ver, "\n",
                ".popsection\n"
            ));
        )*
    };
}

/// Every exported name and its version (tests compare this with the binaries' imports).
pub const SYMBOLS: &[(&str, &str)] = &[
    ("ibv_create_comp_channel", "IBVERBS_1.0"),
    ("ibv_destroy_comp_channel", "IBVERBS_1.0"),
    ("ibv_get_sysfs_path", "IBVERBS_1.0"),
    ("ibv_rate_to_mult", "IBVERBS_1.0"),
    ("mult_to_ibv_rate", "IBVERBS_1.0"),
    ("ibv_read_sysfs_file", "IBVERBS_1.0"),
    ("ibv_copy_path_rec_from_kern", "IBVERBS_1.0"),
    ("ibv_copy_path_rec_to_kern", "IBVERBS_1.0"),
    ("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0"),
    ("ibv_ack_async_event", "IBVERBS_1.1"),
    ("ibv_ack_cq_events", "IBVERBS_1.1"),
    ("ibv_alloc_pd", "IBVERBS_1.1"),
    ("ibv_attach_mcast", "IBVERBS_1.1"),
    ("ibv_close_device", "IBVERBS_1.1"),
    ("ibv_copy_ah_attr_from_kern", "IBVERBS_1.1"),
    ("ibv_create_ah", "IBVERBS_1.1"),
    ("ibv_create_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_create_cq", "IBVERBS_1.1"),
    ("ibv_create_qp", "IBVERBS_1.1"),
    ("ibv_create_srq", "IBVERBS_1.1"),
    ("ibv_dealloc_pd", "IBVERBS_1.1"),
    ("ibv_dereg_mr", "IBVERBS_1.1"),
    ("ibv_destroy_ah", "IBVERBS_1.1"),
    ("ibv_destroy_cq", "IBVERBS_1.1"),
    ("ibv_destroy_qp", "IBVERBS_1.1"),
    ("ibv_destroy_srq", "IBVERBS_1.1"),
    ("ibv_detach_mcast", "IBVERBS_1.1"),
    ("ibv_dofork_range", "IBVERBS_1.1"),
    ("ibv_dontfork_range", "IBVERBS_1.1"),
    ("ibv_event_type_str", "IBVERBS_1.1"),
    ("ibv_fork_init", "IBVERBS_1.1"),
    ("ibv_free_device_list", "IBVERBS_1.1"),
    ("ibv_get_async_event", "IBVERBS_1.1"),
    ("ibv_get_cq_event", "IBVERBS_1.1"),
    ("ibv_get_device_guid", "IBVERBS_1.1"),
    ("ibv_get_device_list", "IBVERBS_1.1"),
    ("ibv_get_device_name", "IBVERBS_1.1"),
    ("ibv_init_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_modify_qp", "IBVERBS_1.1"),
    ("ibv_modify_srq", "IBVERBS_1.1"),
    ("ibv_node_type_str", "IBVERBS_1.1"),
    ("ibv_open_device", "IBVERBS_1.1"),
    ("ibv_port_state_str", "IBVERBS_1.1"),
    ("ibv_query_device", "IBVERBS_1.1"),
    ("ibv_query_gid", "IBVERBS_1.1"),
    ("ibv_query_pkey", "IBVERBS_1.1"),
    ("ibv_query_port", "IBVERBS_1.1"),
    ("ibv_query_qp", "IBVERBS_1.1"),
    ("ibv_query_srq", "IBVERBS_1.1"),
    ("ibv_rate_to_mbps", "IBVERBS_1.1"),
    ("ibv_reg_mr", "IBVERBS_1.1"),
    ("ibv_rereg_mr", "IBVERBS_1.1"),
    ("ibv_resize_cq", "IBVERBS_1.1"),
    ("ibv_resolve_eth_l2_from_gid", "IBVERBS_1.1"),
    ("ibv_wc_status_str", "IBVERBS_1.1"),
    ("mbps_to_ibv_rate", "IBVERBS_1.1"),
    ("ibv_register_driver", "IBVERBS_1.1"),
    ("ibv_get_pkey_index", "IBVERBS_1.5"),
    ("ibv_qp_to_qp_ex", "IBVERBS_1.6"),
    ("ibv_reg_mr_iova", "IBVERBS_1.7"),
    ("ibv_reg_mr_iova2", "IBVERBS_1.8"),
    ("ibv_get_device_index", "IBVERBS_1.9"),
    ("ibv_import_device", "IBVERBS_1.10"),
    ("ibv_import_mr", "IBVERBS_1.10"),
    ("ibv_import_pd", "IBVERBS_1.10"),
    ("ibv_query_ece", "IBVERBS_1.10"),
    ("ibv_set_ece", "IBVERBS_1.10"),
    ("ibv_unimport_mr", "IBVERBS_1.10"),
    ("ibv_unimport_pd", "IBVERBS_1.10"),
    ("_ibv_query_gid_ex", "IBVERBS_1.11"),
    ("_ibv_query_gid_table", "IBVERBS_1.11"),
    ("ibv_reg_dmabuf_mr", "IBVERBS_1.12"),
    ("ibv_import_dm", "IBVERBS_1.13"),
    ("ibv_is_fork_initialized", "IBVERBS_1.13"),
    ("ibv_unimport_dm", "IBVERBS_1.13"),
    ("ibv_query_qp_data_in_order", "IBVERBS_1.14"),
    ("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
    // ferroce's own extension (include/ferrocedv.h).
    ("ferrocedv_query_qp", "FERROCEDV_1.0"),
    ("ferrocedv_query_paths", "FERROCEDV_1.0"),
    ("ferrocedv_set_planes", "FERROCEDV_1.0"),
];

export!("IBVERBS_1.0": ibv_create_comp_channel ibv_destroy_comp_channel ibv_get_sysfs_path ibv_rate_to_mult mult_to_ibv_rate ibv_read_sysfs_file ibv_copy_path_rec_from_kern ibv_copy_path_rec_to_kern ibv_copy_qp_attr_from_kern);
export!("IBVERBS_1.1": ibv_ack_async_event ibv_ack_cq_events ibv_alloc_pd ibv_attach_mcast ibv_close_device ibv_copy_ah_attr_from_kern ibv_create_ah ibv_create_ah_from_wc ibv_create_cq ibv_create_qp ibv_create_srq ibv_dealloc_pd ibv_dereg_mr ibv_destroy_ah ibv_destroy_cq ibv_destroy_qp ibv_destroy_srq ibv_detach_mcast ibv_dofork_range ibv_dontfork_range ibv_event_type_str ibv_fork_init ibv_free_device_list ibv_get_async_event ibv_get_cq_event ibv_get_device_guid ibv_get_device_list ibv_get_device_name ibv_init_ah_from_wc ibv_modify_qp ibv_modify_srq ibv_node_type_str ibv_open_device ibv_port_state_str ibv_query_device ibv_query_gid ibv_query_pkey ibv_query_port ibv_query_qp ibv_query_srq ibv_rate_to_mbps ibv_reg_mr ibv_rereg_mr ibv_resize_cq ibv_resolve_eth_l2_from_gid ibv_wc_status_str mbps_to_ibv_rate ibv_register_driver);
export!("IBVERBS_1.5": ibv_get_pkey_index);
export!("IBVERBS_1.6": ibv_qp_to_qp_ex);
export!("IBVERBS_1.7": ibv_reg_mr_iova);
export!("IBVERBS_1.8": ibv_reg_mr_iova2);
export!("IBVERBS_1.9": ibv_get_device_index);
export!("IBVERBS_1.10": ibv_import_device ibv_import_mr ibv_import_pd ibv_query_ece ibv_set_ece ibv_unimport_mr ibv_unimport_pd);
export!("IBVERBS_1.11": _ibv_query_gid_ex _ibv_query_gid_table);
export!("IBVERBS_1.12": ibv_reg_dmabuf_mr);
export!("IBVERBS_1.13": ibv_import_dm ibv_is_fork_initialized ibv_unimport_dm);
export!("IBVERBS_1.14": ibv_query_qp_data_in_order);
export!("IBVERBS_PRIVATE_34": ibv_query_gid_type);
export!("FERROCEDV_1.0": ferrocedv_query_qp ferrocedv_query_paths ferrocedv_set_planes);
