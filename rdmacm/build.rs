//! Links the cdylib as `librdmacm.so.1` with rdma-core's version nodes (RDMACM_1.0 … 1.3;
//! `.symver` directives in `src/exports.rs` bind `rdma_*@@RDMACM_x` to them), against
//! `libibverbs.so.1` (the shim at run time), and generates the C layouts of
//! `rdma/rdma_cma.h` and `infiniband/verbs.h` with bindgen (librdmacm-dev, libibverbs-dev).

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    let map = "RDMACM_1.0 { };\nRDMACM_1.1 { } RDMACM_1.0;\nRDMACM_1.2 { } RDMACM_1.1;\n\
               RDMACM_1.3 { } RDMACM_1.2;\n";
    let map_path = out.join("rdmacm.map");
    std::fs::write(&map_path, map).expect("write rdmacm.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-link-lib=dylib=ibverbs");

    let header = "/usr/include/rdma/rdma_cma.h";
    println!("cargo:rerun-if-changed={header}");
    let b = bindgen::Builder::default()
        .header_contents(
            "wrap.h",
            "#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n",
        )
        .allowlist_type("rdma_.*")
        .allowlist_type("ibv_.*")
        .allowlist_var("RDMA_.*")
        .allowlist_var("RAI_.*")
        .allowlist_var("IBV_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .expect("bindgen over rdma/rdma_cma.h (install librdmacm-dev and libibverbs-dev)");
    b.write_to_file(out.join("sys.rs")).expect("write sys.rs");
}
