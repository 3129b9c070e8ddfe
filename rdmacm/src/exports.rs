//! rdma-core's symbol versions: each `frdmacm_v_<name>` (defined in the other modules) is also
//! `<name>@@<version>`, the default version node applications were linked against; the nodes
//! are defined by the version script build.rs passes to the linker (as in the verbs shim's
//! `exports.rs`).

macro_rules! export {
    ($ver:literal : $($name:ident)*) => {
        $(
            // A tail-jump defined in this very object (`.symver` needs its target defined
            // where it is), bound to the versioned name.
            std::arch::global_asm!(concat!(
                ".pushsection .text.frdmacm_sv_", stringify!($name), ",\"ax\",@progbits\n",
                ".globl frdmacm_sv_", stringify!($name), "\n",
                ".type frdmacm_sv_", stringify!($name), ",@function\n",
                ".p2align 4\n",
                "frdmacm_sv_", stringify!($name), ":\n",
                "    jmp frdmacm_v_", stringify!($name), "@PLT\n",
                ".size frdmacm_sv_", stringify!($name), ", . - frdmacm_sv_", stringify!($name), "\n",
                ".symver frdmacm_sv_", stringify!($name), ", ", stringify!($name), "@@", $ver, "\n",
                ".popsection\n"
            ));
        )*
    };
}

/// Every exported name and its version, as rdma-core 44's librdmacm.so.1 (tests compare).
pub const SYMBOLS: &[(&str, &str)] = &[
    ("raccept", "RDMACM_1.0"),
    ("rbind", "RDMACM_1.0"),
    ("rclose", "RDMACM_1.0"),
    ("rconnect", "RDMACM_1.0"),
    ("rdma_accept", "RDMACM_1.0"),
    ("rdma_ack_cm_event", "RDMACM_1.0"),
    ("rdma_bind_addr", "RDMACM_1.0"),
    ("rdma_connect", "RDMACM_1.0"),
    ("rdma_create_ep", "RDMACM_1.0"),
    ("rdma_create_event_channel", "RDMACM_1.0"),
    ("rdma_create_id", "RDMACM_1.0"),
    ("rdma_create_qp", "RDMACM_1.0"),
    ("rdma_create_qp_ex", "RDMACM_1.0"),
    ("rdma_create_srq", "RDMACM_1.0"),
    ("rdma_create_srq_ex", "RDMACM_1.0"),
    ("rdma_destroy_ep", "RDMACM_1.0"),
    ("rdma_destroy_event_channel", "RDMACM_1.0"),
    ("rdma_destroy_id", "RDMACM_1.0"),
    ("rdma_destroy_qp", "RDMACM_1.0"),
    ("rdma_destroy_srq", "RDMACM_1.0"),
    ("rdma_disconnect", "RDMACM_1.0"),
    ("rdma_event_str", "RDMACM_1.0"),
    ("rdma_free_devices", "RDMACM_1.0"),
    ("rdma_freeaddrinfo", "RDMACM_1.0"),
    ("rdma_get_cm_event", "RDMACM_1.0"),
    ("rdma_get_devices", "RDMACM_1.0"),
    ("rdma_get_dst_port", "RDMACM_1.0"),
    ("rdma_get_request", "RDMACM_1.0"),
    ("rdma_get_src_port", "RDMACM_1.0"),
    ("rdma_getaddrinfo", "RDMACM_1.0"),
    ("rdma_join_multicast", "RDMACM_1.0"),
    ("rdma_leave_multicast", "RDMACM_1.0"),
    ("rdma_listen", "RDMACM_1.0"),
    ("rdma_migrate_id", "RDMACM_1.0"),
    ("rdma_notify", "RDMACM_1.0"),
    ("rdma_reject", "RDMACM_1.0"),
    ("rdma_resolve_addr", "RDMACM_1.0"),
    ("rdma_resolve_route", "RDMACM_1.0"),
    ("rdma_set_option", "RDMACM_1.0"),
    ("rfcntl", "RDMACM_1.0"),
    ("rgetpeername", "RDMACM_1.0"),
    ("rgetsockname", "RDMACM_1.0"),
    ("rgetsockopt", "RDMACM_1.0"),
    ("riomap", "RDMACM_1.0"),
    ("riounmap", "RDMACM_1.0"),
    ("riowrite", "RDMACM_1.0"),
    ("rlisten", "RDMACM_1.0"),
    ("rpoll", "RDMACM_1.0"),
    ("rread", "RDMACM_1.0"),
    ("rreadv", "RDMACM_1.0"),
    ("rrecv", "RDMACM_1.0"),
    ("rrecvfrom", "RDMACM_1.0"),
    ("rrecvmsg", "RDMACM_1.0"),
    ("rselect", "RDMACM_1.0"),
    ("rsend", "RDMACM_1.0"),
    ("rsendmsg", "RDMACM_1.0"),
    ("rsendto", "RDMACM_1.0"),
    ("rsetsockopt", "RDMACM_1.0"),
    ("rshutdown", "RDMACM_1.0"),
    ("rsocket", "RDMACM_1.0"),
    ("rwrite", "RDMACM_1.0"),
    ("rwritev", "RDMACM_1.0"),
    ("rdma_join_multicast_ex", "RDMACM_1.1"),
    ("rdma_establish", "RDMACM_1.2"),
    ("rdma_init_qp_attr", "RDMACM_1.2"),
    ("rdma_get_remote_ece", "RDMACM_1.3"),
    ("rdma_reject_ece", "RDMACM_1.3"),
    ("rdma_set_local_ece", "RDMACM_1.3"),
];

export!("RDMACM_1.0": raccept rbind rclose rconnect rdma_accept rdma_ack_cm_event rdma_bind_addr rdma_connect rdma_create_ep rdma_create_event_channel rdma_create_id rdma_create_qp rdma_create_qp_ex rdma_create_srq rdma_create_srq_ex rdma_destroy_ep rdma_destroy_event_channel rdma_destroy_id rdma_destroy_qp rdma_destroy_srq rdma_disconnect rdma_event_str rdma_free_devices rdma_freeaddrinfo rdma_get_cm_event rdma_get_devices rdma_get_dst_port rdma_get_request rdma_get_src_port rdma_getaddrinfo rdma_join_multicast rdma_leave_multicast rdma_listen rdma_migrate_id rdma_notify rdma_reject rdma_resolve_addr rdma_resolve_route rdma_set_option rfcntl rgetpeername rgetsockname rgetsockopt riomap riounmap riowrite rlisten rpoll rread rreadv rrecv rrecvfrom rrecvmsg rselect rsend rsendmsg rsendto rsetsockopt rshutdown rsocket rwrite rwritev);
export!("RDMACM_1.1": rdma_join_multicast_ex);
export!("RDMACM_1.2": rdma_establish rdma_init_qp_attr);
export!("RDMACM_1.3": rdma_get_remote_ece rdma_reject_ece rdma_set_local_ece);
