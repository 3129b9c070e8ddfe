//! The stub vendor provider libraries the build makes from `csrc/` (`libmlx5.so.1`,
//! `libefa.so.1`, `libmlx4.so.1`): every function they export answers "not supported" as its
//! header and man page define a failure, never a success (issue 14: the stub
//! `efadv_query_device` returned 0, libfabric's EFA provider took it for success and divided by
//! the zero attributes).
//!
//! For each library a C program built against the installed rdma-core header calls every
//! exported function through the header's own prototype (NULL/0 arguments, which a stub never
//! reads; a function the header does not declare fails the build), linked against the stub, and
//! prints the return value's C type, its value and errno. The test checks each against the
//! convention the function's man page gives for a failure, and where the man page is installed,
//! that its RETURN VALUE section names that convention. It also checks that each stub exports
//! every function (name and version) of the installed real library.
//!
//! Needs a C compiler and libibverbs-dev's headers; prints SKIPPED otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a function's documentation says it reports a failure.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Failure {
    /// Object-returning calls: "on error NULL will be returned and errno will be set".
    Null,
    /// "0 on success or the value of errno on failure" (mlx5dv_query_device.3,
    /// efadv_query_device.3, mlx4dv_init_obj.3, mlx5dv_devx_obj_create.3, ...).
    ErrnoValue,
    /// "-1 will be returned and errno was set" (mlx5dv_devx_get_event.3).
    MinusOne,
    /// "or -errno on error" (mlx5dv_qp_cancel_posted_send_wrs.3).
    NegErrno,
    /// `bool` predicates: "Returns true if device is implemented by mlx5 provider".
    False,
    /// `void` destroy/free calls: nothing to report.
    Void,
}

impl Failure {
    /// The words the man page's RETURN VALUE section uses for this convention.
    fn man_word(self) -> Option<&'static str> {
        match self {
            Failure::Null => Some("NULL"),
            Failure::ErrnoValue => Some("errno"),
            Failure::MinusOne => Some("-1"),
            Failure::NegErrno => Some("-errno"),
            Failure::False => Some("true"),
            Failure::Void => None,
        }
    }
}

/// The documented failure of `sym`, whose header declares it returning `ret`.
fn documented(sym: &str, ret: &str) -> Failure {
    match sym {
        "mlx5dv_devx_get_event" => Failure::MinusOne,
        // Returns a file descriptor; its man page names no failure value: -1 with errno is
        // what a caller of an fd-returning call checks for.
        "mlx5dv_vfio_get_events_fd" => Failure::MinusOne,
        "mlx5dv_qp_cancel_posted_send_wrs" => Failure::NegErrno,
        _ if ret.contains('*') => Failure::Null,
        _ if ret == "bool" || ret == "_Bool" => Failure::False,
        _ if ret == "void" => Failure::Void,
        _ => Failure::ErrnoValue,
    }
}

/// Functions whose man page documents no failure value (so it cannot be cross-checked).
const MAN_NAMES_NO_FAILURE: &[&str] = &["mlx5dv_vfio_get_events_fd"];

/// (library, version node prefix, header).
const LIBS: &[(&str, &str, &str)] = &[
    ("libmlx5.so.1", "MLX5_", "infiniband/mlx5dv.h"),
    ("libefa.so.1", "EFA_", "infiniband/efadv.h"),
    ("libmlx4.so.1", "MLX4_", "infiniband/mlx4dv.h"),
];

/// (name, version, default version?) of the functions a shared library defines.
fn exports(lib: &Path) -> Vec<(String, String, bool)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ver = *f.get(f.len().checked_sub(2)?)?;
            let hidden = ver.starts_with('(');
            let ver = ver.trim_matches(['(', ')']).to_string();
            Some((f[f.len() - 1].to_string(), ver, !hidden))
        })
        .collect()
}

/// The header without comments and preprocessor lines, whitespace collapsed.
fn flatten(header: &str) -> String {
    let mut text = String::new();
    let mut rest = header;
    while let Some(i) = rest.find("/*") {
        text.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    text.push_str(rest);
    let text: Vec<&str> = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    text.join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// (return type, number of parameters) of the function `sym` the flattened header declares.
fn declaration(text: &str, sym: &str) -> Option<(String, usize)> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = text[from..].find(sym).map(|i| i + from) {
        from = i + sym.len();
        let after = text[from..].trim_start();
        if text[..i].ends_with(ident) || !after.starts_with('(') {
            continue;
        }
        let start = text[..i].rfind([';', '}', '{']).map_or(0, |j| j + 1);
        let ret = text[start..i].trim().trim_start_matches("extern ").trim();
        if ret.is_empty() || ret.contains("static") || ret.contains("typedef") {
            continue;
        }
        let params = &after[1..after.find(')')?];
        let n = match params.trim() {
            "" | "void" => 0,
            p => p.matches(',').count() + 1,
        };
        return Some((ret.to_string(), n));
    }
    None
}

/// The RETURN VALUE section of `sym`'s installed man page (following a `.so` redirect).
fn man_return_value(sym: &str) -> Option<String> {
    let mut page = PathBuf::from(format!("/usr/share/man/man3/{sym}.3.gz"));
    for _ in 0..2 {
        if !page.exists() {
            return None;
        }
        let out = Command::new("zcat").arg(&page).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(target) = text.trim().strip_prefix(".so ") {
            page = Path::new("/usr/share/man").join(format!("{}.gz", target.trim()));
            continue;
        }
        let start = text.find(".SH RETURN VALUE")?;
        let body = &text[start + 16..];
        let end = body.find("\n.SH").unwrap_or(body.len());
        return Some(body[..end].replace("\\-", "-").replace("\\f[B]", ""));
    }
    None
}

#[test]
fn every_stub_entry_point_fails_as_documented() {
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler (cc)");
        return;
    }
    let stub_dir = Path::new(ibverbs::STUB_DIR);
    let work = std::env::temp_dir().join(format!("ferroce-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let eopnotsupp = libc::EOPNOTSUPP as i64;
    let mut bad = Vec::new();
    let (mut called, mut man_checked, mut libs_checked) = (0, 0, 0);
    for (lib, prefix, header) in LIBS {
        let hdr = Path::new("/usr/include").join(header);
        let Ok(hdr_text) = std::fs::read_to_string(&hdr) else {
            eprintln!(
                "{lib}: SKIPPED: no {} (apt-get install libibverbs-dev)",
                hdr.display()
            );
            continue;
        };
        let flat = flatten(&hdr_text);
        let stub = stub_dir.join(lib);
        let syms = exports(&stub);
        assert!(!syms.is_empty(), "{} exports nothing", stub.display());

        // The stub exports every function of the installed library, same version.
        let ours: BTreeSet<(String, String)> = syms
            .iter()
            .map(|(n, v, _)| (n.clone(), v.clone()))
            .collect();
        let real = Path::new("/usr/lib/x86_64-linux-gnu").join(lib);
        if real.exists() {
            for (n, v, _) in exports(&real) {
                if v.starts_with(prefix) && !ours.contains(&(n.clone(), v.clone())) {
                    bad.push(format!(
                        "{lib}: the stub lacks {n}@{v} of {}",
                        real.display()
                    ));
                }
            }
        }

        // One call per exported function (and per extra version of one, through dlvsym).
        let mut c = format!(
            "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <errno.h>\n#include <stdint.h>\n\
             #include <stdio.h>\n#include <{header}>\n\
             #define CLS(x) _Generic((x), _Bool: 'b', int: 'i', long: 'l', default: 'p')\n\
             #define SHOW(name, call) do {{ errno = 0; __typeof__(call) r_ = (call); int e_ = errno; \\\n\
             \tprintf(\"%s %c %lld %d\\n\", name, CLS(r_), (long long)(intptr_t)r_, e_); }} while (0)\n\
             #define SHOW_VOID(name, call) do {{ errno = 0; call; printf(\"%s v 0 %d\\n\", name, errno); }} while (0)\n\
             int main(void) {{\n"
        );
        let mut want = Vec::new();
        for (sym, ver, default) in &syms {
            let Some((ret, n)) = declaration(&flat, sym) else {
                bad.push(format!("{lib}: {sym} is not declared in {header}"));
                continue;
            };
            let args = vec!["0"; n].join(", ");
            let label = if *default {
                sym.clone()
            } else {
                format!("{sym}@{ver}")
            };
            let call = if *default {
                format!("{sym}({args})")
            } else {
                c.push_str(&format!(
                    "  __typeof__(&{sym}) p_{ver_id} = (__typeof__(&{sym}))dlvsym(RTLD_DEFAULT, \"{sym}\", \"{ver}\");\n\
                     \x20 if (!p_{ver_id}) {{ printf(\"{label} missing\\n\"); return 1; }}\n",
                    ver_id = ver.replace('.', "_"),
                ));
                format!("p_{}({args})", ver.replace('.', "_"))
            };
            let doc = documented(sym, &ret);
            if doc == Failure::Void {
                c.push_str(&format!("  SHOW_VOID(\"{label}\", {call});\n"));
            } else {
                c.push_str(&format!("  SHOW(\"{label}\", {call});\n"));
            }
            want.push((label, sym.clone(), doc));
        }
        c.push_str("  return 0;\n}\n");
        let stem = lib.trim_end_matches(".so.1");
        let src = work.join(format!("{stem}.c"));
        let bin = work.join(stem);
        std::fs::write(&src, &c).unwrap();
        let out = Command::new("cc")
            .args(["-O0", "-Wall", "-Werror", "-o"])
            .arg(&bin)
            .arg(&src)
            .arg(format!("-L{}", stub_dir.display()))
            .arg(format!("-l:{lib}"))
            .arg(format!("-Wl,-rpath,{}", stub_dir.display()))
            .arg("-ldl")
            .output()
            .expect("cc");
        assert!(
            out.status.success(),
            "{lib}: the calling program did not build:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = Command::new(&bin).output().unwrap();
        let text = String::from_utf8_lossy(&run.stdout).to_string();
        assert!(run.status.success(), "{lib}: {:?}\n{text}", run.status);
        for (label, sym, doc) in want {
            let Some(line) = text.lines().find(|l| l.split(' ').next() == Some(&label)) else {
                bad.push(format!("{lib}: {label}: no result"));
                continue;
            };
            let f: Vec<&str> = line.split(' ').collect();
            let (cls, val, err) = (
                f[1],
                f[2].parse::<i64>().unwrap(),
                f[3].parse::<i64>().unwrap(),
            );
            let ok = match doc {
                Failure::Null => cls == "p" && val == 0 && err == eopnotsupp,
                Failure::ErrnoValue => cls == "i" && val == eopnotsupp,
                Failure::MinusOne => (cls == "i" || cls == "l") && val == -1 && err == eopnotsupp,
                Failure::NegErrno => cls == "i" && val == -eopnotsupp,
                Failure::False => cls == "b" && val == 0,
                Failure::Void => cls == "v",
            };
            if !ok {
                bad.push(format!(
                    "{lib}: {label}: want {doc:?}, got type {cls} value {val} errno {err}"
                ));
            }
            called += 1;
            // The man page's RETURN VALUE section names the convention checked.
            if let (Some(word), Some(rv)) = (doc.man_word(), man_return_value(&sym)) {
                if !MAN_NAMES_NO_FAILURE.contains(&sym.as_str()) {
                    man_checked += 1;
                    if !rv.contains(word) {
                        bad.push(format!(
                            "{lib}: {sym}: its man page's RETURN VALUE does not say {word:?}: {}",
                            rv.split_whitespace().collect::<Vec<_>>().join(" ")
                        ));
                    }
                }
            }
        }
        libs_checked += 1;
    }
    std::fs::remove_dir_all(&work).ok();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    if libs_checked == 0 {
        eprintln!("SKIPPED: no rdma-core provider headers (apt-get install libibverbs-dev)");
        return;
    }
    eprintln!(
        "{called} stub entry points of {libs_checked} libraries fail as documented \
         ({man_checked} cross-checked against their man pages)"
    );
}
