//! ABI checks of the shim against rdma-core 44 and the unmodified Debian binaries:
//! - struct sizes and field offsets of the committed bindgen output against the C compiler
//!   over the system `infiniband/verbs.h`;
//! - every versioned libibverbs symbol the target binaries (and librdmacm, libfabric, UCX's IB
//!   transports, DPDK's mlx drivers) import is exported with that version, and the stub provider
//!   libraries cover their mlx5dv_*/efadv_*/mlx4dv_* imports;
//! - `ibv_devices` and `ibv_devinfo -v` run against the shim (LD_LIBRARY_PATH) without "no
//!   version information" or symbol lookup errors.

use ibverbs::sys::*;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// (C expression, value the Rust bindings give it).
fn layout_table() -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = Vec::new();
    macro_rules! size {
        ($($t:ident)*) => { $( v.push((format!("sizeof(struct {})", stringify!($t)), size_of::<$t>())); )* };
    }
    macro_rules! off {
        ($t:ident : $($f:ident)*) => {
            $( v.push((format!("offsetof(struct {}, {})", stringify!($t), stringify!($f)), offset_of!($t, $f))); )*
        };
    }
    size!(ibv_device ibv_context ibv_context_ops verbs_context ibv_device_attr ibv_device_attr_ex
          ibv_port_attr ibv_gid_entry ibv_pd ibv_mr ibv_comp_channel ibv_cq ibv_qp ibv_qp_ex
          ibv_qp_init_attr ibv_qp_init_attr_ex ibv_qp_cap ibv_qp_attr ibv_ah_attr ibv_global_route
          ibv_ah ibv_send_wr ibv_recv_wr ibv_sge ibv_wc ibv_srq ibv_srq_init_attr ibv_async_event
          ibv_query_device_ex_input);
    v.push(("sizeof(union ibv_gid)".into(), size_of::<ibv_gid>()));
    off!(ibv_device: _ops node_type transport_type name dev_name dev_path ibdev_path);
    off!(ibv_context: device ops cmd_fd async_fd num_comp_vectors mutex abi_compat);
    off!(ibv_context_ops: poll_cq req_notify_cq post_srq_recv post_send post_recv);
    off!(verbs_context: query_port query_device_ex create_qp_ex sz context);
    v.push((
        "offsetof(struct verbs_context, priv)".into(),
        offset_of!(verbs_context, priv_),
    ));
    off!(ibv_device_attr: fw_ver node_guid sys_image_guid max_mr_size page_size_cap vendor_id
         vendor_part_id hw_ver max_qp max_qp_wr device_cap_flags max_sge max_cq max_cqe max_mr
         max_pd max_qp_rd_atom max_res_rd_atom max_qp_init_rd_atom atomic_cap max_ah max_srq
         max_pkeys local_ca_ack_delay phys_port_cnt);
    off!(ibv_device_attr_ex: orig_attr comp_mask phys_port_cnt_ex);
    off!(ibv_port_attr: state max_mtu active_mtu gid_tbl_len port_cap_flags max_msg_sz
         pkey_tbl_len lid sm_lid max_vl_num active_width active_speed phys_state link_layer
         flags port_cap_flags2);
    off!(ibv_gid_entry: gid gid_index port_num gid_type ndev_ifindex);
    off!(ibv_pd: context handle);
    off!(ibv_mr: context pd addr length handle lkey rkey);
    off!(ibv_comp_channel: context fd refcnt);
    off!(ibv_cq: context channel cq_context handle cqe mutex cond comp_events_completed
         async_events_completed);
    off!(ibv_qp: context qp_context pd send_cq recv_cq srq handle qp_num state qp_type mutex
         cond events_completed);
    off!(ibv_qp_init_attr: qp_context send_cq recv_cq srq cap qp_type sq_sig_all);
    off!(ibv_qp_init_attr_ex: qp_context send_cq recv_cq srq cap qp_type sq_sig_all comp_mask pd);
    off!(ibv_qp_cap: max_send_wr max_recv_wr max_send_sge max_recv_sge max_inline_data);
    off!(ibv_qp_attr: qp_state cur_qp_state path_mtu rq_psn sq_psn dest_qp_num qp_access_flags
         cap ah_attr pkey_index max_rd_atomic max_dest_rd_atomic min_rnr_timer port_num timeout
         retry_cnt rnr_retry);
    off!(ibv_ah_attr: grh dlid sl src_path_bits static_rate is_global port_num);
    off!(ibv_global_route: dgid flow_label sgid_index hop_limit traffic_class);
    off!(ibv_ah: context pd handle);
    off!(ibv_send_wr: wr_id next sg_list num_sge opcode send_flags wr);
    off!(ibv_recv_wr: wr_id next sg_list num_sge);
    off!(ibv_sge: addr length lkey);
    off!(ibv_wc: wr_id status opcode vendor_err byte_len qp_num src_qp wc_flags pkey_index slid
         sl dlid_path_bits);
    v.push((
        "offsetof(struct ibv_wc, imm_data)".into(),
        offset_of!(ibv_wc, __bindgen_anon_1),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, imm_data)".into(),
        offset_of!(ibv_send_wr, __bindgen_anon_1),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)".into(),
        offset_of!(ibv_send_wr, wr)
            + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_1, remote_addr),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.rdma.rkey)".into(),
        offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_1, rkey),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.atomic.compare_add)".into(),
        offset_of!(ibv_send_wr, wr)
            + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_2, compare_add),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.atomic.swap)".into(),
        offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_2, swap),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.atomic.rkey)".into(),
        offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_2, rkey),
    ));
    v.push(("IBV_WC_WITH_IMM".into(), IBV_WC_WITH_IMM as usize));
    v.push(("IBV_SEND_INLINE".into(), IBV_SEND_INLINE as usize));
    v.push((
        "IBV_WR_ATOMIC_FETCH_AND_ADD".into(),
        IBV_WR_ATOMIC_FETCH_AND_ADD as usize,
    ));
    v.push((
        "IBV_WC_RECV_RDMA_WITH_IMM".into(),
        IBV_WC_RECV_RDMA_WITH_IMM as usize,
    ));
    v.push((
        "IBV_WC_REM_ACCESS_ERR".into(),
        IBV_WC_REM_ACCESS_ERR as usize,
    ));
    v.push(("IBV_QP_DEST_QPN".into(), IBV_QP_DEST_QPN as usize));
    v
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroce-verbs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn struct_layouts_match_the_c_compiler() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIP: no /usr/include/infiniband/verbs.h (apt-get install libibverbs-dev)");
        return;
    }
    let table = layout_table();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (expr, _) in &table {
        c.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    let d = tmpdir("layout");
    std::fs::write(d.join("layout.c"), c).unwrap();
    let st = Command::new("cc")
        .arg("-o")
        .arg(d.join("layout"))
        .arg(d.join("layout.c"))
        .status()
        .expect("cc");
    assert!(st.success(), "the C layout program did not compile");
    let out = Command::new(d.join("layout")).output().unwrap();
    let vals: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(vals.len(), table.len());
    let mut bad = Vec::new();
    for ((expr, rust), c) in table.iter().zip(&vals) {
        if rust != c {
            bad.push(format!("{expr}: C {c}, Rust {rust}"));
        }
    }
    std::fs::remove_dir_all(&d).ok();
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    // The facts design.md §4 names.
    assert_eq!(size_of::<verbs_context>(), 648);
    assert_eq!(size_of::<ibv_context>(), 328);
    eprintln!(
        "{} sizes, offsets and constants match the C compiler",
        table.len()
    );
}

/// The directory holding target/<profile>/deps/libibverbs.so (the cdylib next to this test).
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for d in [deps, deps.parent().unwrap()] {
        let p = d.join("libibverbs.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libibverbs.so not found next to {}", exe.display());
}

/// Compile `tests/c/<name>.c` into `dir/<name>` against the system's verbs header and
/// `-libverbs` (the shim answers at run time through LD_LIBRARY_PATH); panics with cc's
/// errors if it does not build.
pub fn build_c(dir: &Path, name: &str) -> PathBuf {
    build_c_against(dir, name, &["-libverbs"])
}

/// As [`build_c`], linked against the shim in `dir` itself (its libibverbs.so.1, from
/// [`lib_dir`]): for programs that call ferroce's own exports (`ferrocedv_*`), which the
/// system's libibverbs lacks.
pub fn build_c_shim(dir: &Path, name: &str) -> PathBuf {
    let l = format!("-L{}", dir.display());
    build_c_against(
        dir,
        name,
        &[&l, "-l:libibverbs.so.1", "-Wl,--allow-shlib-undefined"],
    )
}

fn build_c_against(dir: &Path, name: &str, link: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let bin = dir.join(name);
    // include/: ferroce's own headers (ferrocedv.h).
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include");
    let cc = std::process::Command::new("cc")
        .args(["-O1", "-Wall", "-Werror"])
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .args(link)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc {name}.c -libverbs failed (libibverbs-dev installed?):\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    bin
}

/// A directory for LD_LIBRARY_PATH: libibverbs.so.1 (the shim) and the stub providers.
pub fn lib_dir(tag: &str) -> PathBuf {
    let d = tmpdir(tag);
    let link = |src: &Path, name: &str| {
        let dst = d.join(name);
        let _ = std::fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst).unwrap();
    };
    link(&cdylib(), "libibverbs.so.1");
    for l in ["libmlx5.so.1", "libefa.so.1", "libmlx4.so.1"] {
        let p = Path::new(ibverbs::STUB_DIR).join(l);
        if p.exists() {
            link(&p, l);
        }
    }
    d
}

fn dynsyms(path: &Path) -> Vec<(String, String, bool)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .expect("objdump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 || !l.contains(" DF ") {
                return None;
            }
            let ver = f[f.len() - 2]
                .trim_matches(|c| c == '(' || c == ')')
                .to_string();
            Some((f[f.len() - 1].to_string(), ver, l.contains("*UND*")))
        })
        .collect()
}

const BINARIES: &[&str] = &[
    "ibv_devices",
    "ibv_devinfo",
    "ibv_rc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
    "ibv_uc_pingpong",
    "ib_send_bw",
    "ib_write_bw",
    "ib_read_bw",
    "ib_atomic_bw",
    "ib_send_lat",
    "ib_write_lat",
    "ib_read_lat",
    "ib_atomic_lat",
];

fn find_bin(b: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(b))
        .find(|p| p.exists())
}

#[test]
fn every_imported_versioned_symbol_resolves() {
    let ours = dynsyms(&cdylib());
    let exported: std::collections::HashSet<(String, String)> = ours
        .iter()
        .filter(|s| !s.2)
        .map(|s| (s.0.clone(), s.1.clone()))
        .collect();
    let mut targets: Vec<PathBuf> = BINARIES.iter().filter_map(|b| find_bin(b)).collect();
    // Libraries that link libibverbs and the vendor providers: librdmacm, libfabric (EFA and
    // verbs providers), UCX's IB transports, DPDK's mlx4/mlx5 drivers.
    let lib = Path::new("/usr/lib/x86_64-linux-gnu");
    for l in [
        "librdmacm.so.1",
        "libfabric.so.1",
        "ucx/libuct_ib.so.0",
        "ucx/libuct_rdmacm.so.0",
    ] {
        if lib.join(l).exists() {
            targets.push(lib.join(l));
        }
    }
    let mut dpdk_mlx: Vec<PathBuf> = std::fs::read_dir(lib)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dpdk_mlx.retain(|p| {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.starts_with("librte_")
            && n.contains("mlx")
            && n.rsplit_once(".so.")
                .is_some_and(|(_, v)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    });
    dpdk_mlx.sort();
    targets.extend(dpdk_mlx);
    if targets.is_empty() {
        eprintln!("SKIP: ibverbs-utils/perftest not installed");
        return;
    }
    let mut missing = Vec::new();
    let mut checked = std::collections::BTreeSet::new();
    for t in &targets {
        for (name, ver, und) in dynsyms(t) {
            if und && ver.starts_with("IBVERBS_") {
                checked.insert((name.clone(), ver.clone()));
                if !exported.contains(&(name.clone(), ver.clone())) {
                    missing.push(format!("{} needs {name}@{ver}", t.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "unresolved:\n{}", missing.join("\n"));
    // The stub providers cover their mlx5dv_*/efadv_*/mlx4dv_* imports.
    let mut stub_missing = Vec::new();
    for (lib, prefix) in [
        ("libmlx5.so.1", "MLX5_"),
        ("libefa.so.1", "EFA_"),
        ("libmlx4.so.1", "MLX4_"),
    ] {
        let stub: std::collections::HashSet<(String, String)> =
            dynsyms(&Path::new(ibverbs::STUB_DIR).join(lib))
                .into_iter()
                .filter(|s| !s.2)
                .map(|s| (s.0, s.1))
                .collect();
        for t in &targets {
            for (name, ver, und) in dynsyms(t) {
                if und && ver.starts_with(prefix) && !stub.contains(&(name.clone(), ver.clone())) {
                    stub_missing.push(format!("{} needs {name}@{ver} from {lib}", t.display()));
                }
            }
        }
    }
    assert!(stub_missing.is_empty(), "{}", stub_missing.join("\n"));
    // The shim's own table agrees with what the linker exported.
    for (n, v) in ibverbs::exports::SYMBOLS {
        assert!(
            exported.contains(&(n.to_string(), v.to_string())),
            "{n}@{v} not exported"
        );
    }
    eprintln!(
        "{} versioned imports of {} binaries/libraries resolve",
        checked.len(),
        targets.len()
    );
}

#[test]
fn debian_tools_load_and_list_the_devices() {
    let (Some(devices), Some(devinfo)) = (find_bin("ibv_devices"), find_bin("ibv_devinfo")) else {
        eprintln!("SKIP: ibverbs-utils not installed");
        return;
    };
    let d = lib_dir("tools");
    let run = |bin: &Path, args: &[&str]| {
        let out = Command::new("timeout")
            .arg("20")
            .arg(bin)
            .args(args)
            .env("LD_LIBRARY_PATH", &d)
            .env("FERROCE_IP", "198.18.0.11")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{} failed: {text}", bin.display());
        for bad in [
            "no version information",
            "symbol lookup error",
            "undefined symbol",
        ] {
            assert!(!text.contains(bad), "{}: {bad}: {text}", bin.display());
        }
        text
    };
    let t = run(&devices, &[]);
    assert!(
        t.contains("ferroce0") && t.contains("ferroce0_rocev2"),
        "{t}"
    );
    let t = run(&devinfo, &["-v"]);
    for want in [
        "hca_id:\tferroce0",
        "PORT_ACTIVE",
        "link_layer:\t\tEthernet",
        "GID[  1]:\t\t::ffff:198.18.0.11, RoCE v2",
        "vendor_id:\t\t\t0xfe0ce0",
    ] {
        assert!(t.contains(want), "ibv_devinfo -v lacks {want:?}:\n{t}");
    }
    // perftest binaries load (BIND_NOW: libmlx5/libefa stubs, every symbol) and print usage.
    for b in ["ib_write_bw", "ib_send_lat"] {
        if let Some(p) = find_bin(b) {
            let out = Command::new(&p)
                .arg("-h")
                .env("LD_LIBRARY_PATH", &d)
                .output()
                .unwrap();
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(
                !e.contains("symbol lookup error") && !e.contains("error while loading"),
                "{b}: {e}"
            );
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

/// Reflect every frame arriving on `ifname` in namespace `ns` back out of it (a hairpin);
/// false (with the reason printed) if tc cannot.
pub fn hairpin(ns: &str, ifname: &str) -> bool {
    let tc = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", ns, "tc"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())
            .and_then(|o| {
                if o.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
                }
            })
    };
    let r = tc(&["qdisc", "add", "dev", ifname, "ingress"]).and_then(|_| {
        tc(&[
            "filter", "add", "dev", ifname, "parent", "ffff:", "protocol", "all", "u32", "match",
            "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifname,
        ])
    });
    if let Err(e) = &r {
        eprintln!("NOTE: no hairpin ({e}): tests of two QPs of one process are left out");
    }
    r.is_ok()
}
