//! librdmacm.so.1's ABI against rdma-core 44's: the same functions under the same default
//! version nodes, the SONAME, and every import of the programs that link librdmacm
//! (rdmacm-utils, perftest) resolving at load with BIND_NOW. (The C struct layouts are
//! bindgen's compile-time layout assertions in src/sys.rs.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEM: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

fn ours() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("librdmacm.so"))
        .find(|p| p.exists())
        .expect("librdmacm.so built next to the test")
}

/// (name, version, defined?) of every function symbol `objdump -T` lists.
fn dynsyms(path: &Path) -> Vec<(String, String, bool)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .expect("objdump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" DF "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ver = f.get(f.len().checked_sub(2)?)?;
            Some((
                f[f.len() - 1].to_string(),
                ver.trim_matches(|c| c == '(' || c == ')').to_string(),
                !l.contains("*UND*"),
            ))
        })
        .collect()
}

fn exported(path: &Path) -> BTreeSet<(String, String)> {
    dynsyms(path)
        .into_iter()
        .filter(|(_, v, def)| *def && v.starts_with("RDMACM_"))
        .map(|(n, v, _)| (n, v))
        .collect()
}

#[test]
fn exports_match_rdma_core_and_the_table() {
    let mine = exported(&ours());
    let table: BTreeSet<(String, String)> = rdmacm::exports::SYMBOLS
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(mine, table, "exports differ from exports::SYMBOLS");
    if !Path::new(SYSTEM).exists() {
        eprintln!("SKIP the comparison with rdma-core: no {SYSTEM} (apt-get install librdmacm1)");
        return;
    }
    let sys = exported(Path::new(SYSTEM));
    let missing: Vec<_> = sys.difference(&mine).collect();
    let extra: Vec<_> = mine.difference(&sys).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    let soname = Command::new("objdump")
        .arg("-p")
        .arg(ours())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&soname.stdout).contains("SONAME               librdmacm.so.1"));
}

const PROGRAMS: &[&str] = &[
    "rping",
    "ucmatose",
    "udaddy",
    "mckey",
    "rdma_server",
    "rdma_client",
    "rdma_xserver",
    "rdma_xclient",
    "cmtime",
    "rstream",
    "riostream",
    "ib_write_bw",
    "ib_write_lat",
    "ib_send_bw",
    "ib_send_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
];

#[test]
fn every_program_import_resolves_with_bind_now() {
    let lib = ours();
    let dir = std::env::temp_dir().join(format!("cm-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("librdmacm.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    let mine = exported(&lib);
    let mut checked = 0;
    let mut failures = Vec::new();
    for p in PROGRAMS {
        let bin = Path::new("/usr/bin").join(p);
        if !bin.exists() {
            continue;
        }
        for (n, v, def) in dynsyms(&bin) {
            if !def && v.starts_with("RDMACM_") && !mine.contains(&(n.clone(), v.clone())) {
                failures.push(format!("{p}: {n}@{v} not exported"));
            }
        }
        // The loader's own view: every symbol bound at load (libibverbs is the system's
        // here; its imports are the shim's business, checked by verbs-shim's tests).
        let out = Command::new("ldd")
            .arg("-r")
            .arg(&bin)
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .output()
            .expect("ldd");
        let t = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        if !t.contains(&format!("librdmacm.so.1 => {}", link.display())) {
            failures.push(format!("{p}: ldd does not load ours:\n{t}"));
        }
        if t.contains("undefined symbol") || t.contains("not found") {
            failures.push(format!("{p}:\n{t}"));
        }
        checked += 1;
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if checked == 0 {
        eprintln!("SKIP: none of {PROGRAMS:?} installed (rdmacm-utils, perftest)");
    }
}

/// The shim's private CM interface is declared twice, once on each side of `dlsym`
/// (`verbs-shim/src/cm.rs`, `rdmacm/src/shim.rs`): librdmacm cannot link the shim it loads.
/// The two declarations must agree field by field, offset by offset, or events arrive garbled.
#[test]
fn the_private_cm_interface_matches_the_shims() {
    use ibverbs::cm as s;
    use rdmacm::shim as r;
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(r::ABI, s::ABI);
    for (a, b) in [
        (r::CONNECT_REQUEST, s::kind::CONNECT_REQUEST),
        (r::CONNECT_RESPONSE, s::kind::CONNECT_RESPONSE),
        (r::ESTABLISHED, s::kind::ESTABLISHED),
        (r::REJECTED, s::kind::REJECTED),
        (r::UNREACHABLE, s::kind::UNREACHABLE),
        (r::DISCONNECTED, s::kind::DISCONNECTED),
        (r::SIDR_RESPONSE, s::kind::SIDR_RESPONSE),
    ] {
        assert_eq!(a, b);
    }
    macro_rules! same {
        ($t:ident: $($f:ident),+) => {
            assert_eq!(size_of::<r::$t>(), size_of::<s::$t>(), stringify!($t));
            assert_eq!(align_of::<r::$t>(), align_of::<s::$t>(), stringify!($t));
            $(assert_eq!(
                offset_of!(r::$t, $f),
                offset_of!(s::$t, $f),
                concat!(stringify!($t), ".", stringify!($f))
            );)+
        };
    }
    same!(FfiQp: qpn, start_psn, responder_resources, initiator_depth, retry_count,
        rnr_retry_count);
    same!(FfiEvent: kind, id, peer, local_addr, port_space, port, peer_port, reason, qp,
        pd_len, pd, mtu, qkey);
}
