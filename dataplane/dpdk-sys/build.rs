//! Generates the DPDK bindings and compiles the C shim.
//!
//! The flags come from the raw output of `pkg-config --cflags libdpdk`, not from the
//! pkg-config crate: that crate drops `-include rte_config.h -march=corei7`, and without them
//! the headers neither compile the same way nor match the installed libraries.

use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "ferroce-dpdk-sys: cannot run pkg-config ({e}).\n  Install DPDK's development \
                 files: apt-get install libdpdk-dev dpdk pkg-config clang libclang-dev\n  \
                 (scripts/setup.sh does this)"
            )
        });
    if !out.status.success() {
        panic!(
            "ferroce-dpdk-sys: `pkg-config {} libdpdk` failed: {}\n  DPDK (22.11) is not \
             installed. Install it: apt-get install libdpdk-dev dpdk pkg-config clang \
             libclang-dev\n  (scripts/setup.sh does this)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // Split on whitespace, keeping "-include X" as two tokens (bindgen and cc take them so).
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let cflags = pkg_config(&["--cflags"]);
    let libs = pkg_config(&["--libs"]);

    // The C shim, built with exactly DPDK's flags.
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").include("csrc").opt_level(2);
    for f in &cflags {
        build.flag(f);
    }
    build.flag_if_supported("-Wno-unused-parameter");
    build.compile("ferroce_dpdk_shim");

    // Libraries: what pkg-config lists, plus the two driver libraries whose API we call
    // directly (the vdev bus and net_ring's rte_eth_from_rings). Every other PMD is a plugin
    // EAL loads itself from the system driver folder.
    for l in &libs {
        if let Some(dir) = l.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(name) = l.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={name}");
        }
    }
    println!("cargo:rustc-link-lib=dylib=rte_bus_vdev");
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");

    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_args(cflags.iter())
        .clang_arg("-Icsrc")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_mempool_avail_count")
        .allowlist_function("rte_mempool_in_use_count")
        .allowlist_function("rte_ring_create")
        .allowlist_function("rte_ring_free")
        .allowlist_function("rte_vdev_init")
        .allowlist_function("rte_vdev_uninit")
        .allowlist_function("rte_dev_probe")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_lcore_count")
        .allowlist_function("rte_get_next_lcore")
        .allowlist_function("rte_get_main_lcore")
        .allowlist_function("rte_version")
        .allowlist_function("ferroce_.*")
        .allowlist_var("RTE_ETH_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("RTE_MAX_ETHPORTS")
        .allowlist_var("RTE_MBUF_DEFAULT_BUF_SIZE")
        .allowlist_var("RTE_ETHER_.*")
        // Packed-and-aligned structs bindgen cannot lay out in Rust; we never look inside.
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .opaque_type("rte_mbuf")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .expect("ferroce-dpdk-sys: bindgen failed on the DPDK headers");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
