//! The rxe VM image: a Debian kernel (from `linux-image-amd64`, downloaded with `apt-get
//! download` and unpacked, never installed on the host) and a small initramfs built from the
//! host's own packages (busybox-static, iproute2, rdma-core's rxe provider, ibverbs-utils,
//! perftest and their libraries). Both are cached under [`cache_root`], keyed by the package
//! versions they came from, so a second run builds nothing.

use crate::cpio::Cpio;
use crate::util::{cmd_output, log, run_bounded};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Bumped whenever the initramfs layout or its init script changes.
const FORMAT: &str = "rxe-vm-8";

/// Kernel modules the VM loads (their dependencies are added from each module's `.modinfo`).
/// rdma_rxe computes its ICRC through the crypto API's "crc32", hence crc32_generic;
/// rdma_ucm (with rdma_cm and ib_cm) is the kernel CM rping and `-R` programs use.
const WANT_MODULES: &[&str] = &[
    "crc32_generic",
    "virtio_pci",
    "virtio_net",
    "rdma_rxe",
    "rdma_ucm",
];

/// Programs copied into the VM's /usr/bin (the first existing host path of each).
const PROGRAMS: &[&[&str]] = &[
    &["/usr/sbin/ip", "/usr/bin/ip", "/sbin/ip", "/bin/ip"],
    &["/usr/bin/rdma", "/usr/sbin/rdma", "/sbin/rdma", "/bin/rdma"],
    &["/usr/bin/ibv_devinfo"],
    &["/usr/bin/ibv_devices"],
    &["/usr/bin/ibv_rc_pingpong"],
    &["/usr/bin/ibv_ud_pingpong"],
    &["/usr/bin/ib_write_bw"],
    &["/usr/bin/ib_send_bw"],
    &["/usr/bin/ib_read_bw"],
    &["/usr/bin/ib_atomic_bw"],
    &["/usr/bin/ib_write_lat"],
    &["/usr/bin/ib_send_lat"],
    &["/usr/bin/ib_read_lat"],
    &["/usr/bin/ib_atomic_lat"],
    &["/usr/bin/rping"],
    &["/usr/bin/udaddy"],
];

const MULTIARCH: &str = "x86_64-linux-gnu";

/// Host packages the harness needs, with a file that shows each is installed.
const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/bin/busybox"),
    ("iproute2", "/usr/bin/rdma"),
    ("ibverbs-utils", "/usr/bin/ibv_rc_pingpong"),
    ("perftest", "/usr/bin/ib_write_bw"),
    ("rdmacm-utils", "/usr/bin/rping"),
    // --rxe-loss and the bridge's RoCEv2 packet counts (wireloss.rs).
    ("nftables", "/usr/sbin/nft"),
    (
        "ibverbs-providers",
        "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so",
    ),
    // The wire check compares ferroce's RoCEv2 codec with tshark's InfiniBand dissector.
    ("tshark", "/usr/bin/tshark"),
];

/// The VM's init: loads the modules, configures eth0 from the kernel command line
/// (`fip=ADDR/LEN fmtu=MTU`), then serves commands read from the second serial port
/// (the harness's pipe) to a non-interactive shell whose output goes back the same way.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for m in $(cat /lib/ferroce/modules.order); do
    insmod /lib/ferroce/$m.ko || echo "init: insmod $m failed"
done
ip=; mtu=1500
for a in $(cat /proc/cmdline); do
    case "$a" in fip=*) ip="${a#fip=}";; fmtu=*) mtu="${a#fmtu=}";; esac
done
/usr/bin/ip link set lo up
/usr/bin/ip link set eth0 mtu "$mtu"
[ -n "$ip" ] && /usr/bin/ip addr add "$ip" dev eth0
/usr/bin/ip link set eth0 up
ulimit -l unlimited
# Keep ttyS1 open from here on (opening it resets the UART and its settings). Canonical
# input without echo: one command line per line (`stty raw` + `cat | sh` never ran a command).
exec </dev/ttyS1 >/dev/ttyS1 2>&1
stty -echo -isig -ixon -onlcr
echo "@@READY $(uname -r)"
while IFS= read -r line; do eval "$line"; done
echo "init: command loop ended" >/dev/console
poweroff -f
"#;

/// Where kernels and initramfs images are cached: `$FERROCE_RXE_CACHE`, else
/// `~/.cache/ferroce/rxe-vm`.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("FERROCE_RXE_CACHE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/ferroce/rxe-vm")
}

/// A bootable image.
#[derive(Clone, Debug)]
pub struct Image {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// `uname -r` of the kernel.
    pub release: String,
    /// What it was built from (kernel package and version, initramfs key).
    pub describe: String,
}

fn dpkg_version(pkg: &str) -> Option<String> {
    let out = cmd_output(
        Command::new("dpkg-query").args(["-W", "-f", "${Status}|${Version}", pkg]),
        Duration::from_secs(20),
    )
    .ok()?;
    let (status, ver) = out.trim().split_once('|')?;
    status.ends_with(" installed").then(|| ver.to_string())
}

fn apt_update() -> Result<(), String> {
    log("apt-get update");
    run_bounded(
        Command::new("apt-get").args(["update", "-qq"]),
        Duration::from_secs(300),
    )
}

/// Install what the harness needs from Debian's packages, only what is missing.
pub fn ensure_host_packages() -> Result<(), String> {
    let mut missing: Vec<&str> = Vec::new();
    for (pkg, file) in HOST_PACKAGES {
        if !Path::new(file).exists() || dpkg_version(pkg).is_none() {
            missing.push(pkg);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !crate::util::is_root() {
        return Err(format!(
            "missing packages (need root to install): {}",
            missing.join(" ")
        ));
    }
    apt_update()?;
    log(&format!("apt-get install {}", missing.join(" ")));
    // --no-install-recommends: recommends pull qemu-utils, whose backported 10.x conflicts
    // with bookworm's qemu 7.2.
    run_bounded(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        Duration::from_secs(900),
    )
}

/// The kernel package `linux-image-amd64` depends on, and its candidate version.
fn kernel_package() -> Option<(String, String)> {
    let find = || -> Option<(String, String)> {
        let deps = cmd_output(
            Command::new("apt-cache").args(["depends", "linux-image-amd64"]),
            Duration::from_secs(30),
        )
        .ok()?;
        let pkg = deps
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with("linux-image-"))?
            .trim()
            .to_string();
        let pol = cmd_output(
            Command::new("apt-cache").args(["policy", &pkg]),
            Duration::from_secs(30),
        )
        .ok()?;
        let ver = pol
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Candidate: "))
            .next()?
            .trim()
            .to_string();
        (ver != "(none)").then_some((pkg, ver))
    };
    find().or_else(|| {
        apt_update().ok()?;
        find()
    })
}

/// The `depends=` list in a module's `.modinfo` section.
fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"\0depends=";
    let Some(i) = ko.windows(key.len()).position(|w| w == key) else {
        return Vec::new();
    };
    let rest = &ko[i + key.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    let want = format!("{name}.ko");
    let alt = format!("{}.ko", name.replace('_', "-"));
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(f) = p.file_name().and_then(|f| f.to_str()) {
                if f == want || f == alt {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// Download and unpack the kernel into `dir` (vmlinuz, release, modules/*.ko, modules.order).
fn fetch_kernel(pkg: &str, dir: &Path) -> Result<(), String> {
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    log(&format!("apt-get download {pkg}"));
    run_bounded(
        Command::new("apt-get")
            .args(["download", "-qq", pkg])
            .current_dir(&tmp),
        Duration::from_secs(600),
    )?;
    let deb = std::fs::read_dir(&tmp)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    let x = tmp.join("x");
    run_bounded(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x),
        Duration::from_secs(300),
    )?;
    let mods_root = x.join("lib/modules");
    let release = std::fs::read_dir(&mods_root)
        .map_err(|e| format!("{}: {e}", mods_root.display()))?
        .flatten()
        .next()
        .ok_or("no lib/modules/<release> in the kernel package")?
        .file_name()
        .to_string_lossy()
        .to_string();
    let mdir = mods_root.join(&release);
    let out = tmp.join("out");
    std::fs::create_dir_all(out.join("modules")).map_err(|e| e.to_string())?;
    std::fs::copy(
        x.join(format!("boot/vmlinuz-{release}")),
        out.join("vmlinuz"),
    )
    .map_err(|e| format!("vmlinuz-{release}: {e}"))?;
    // Resolve dependencies depth-first so each module follows what it needs.
    let mut order: Vec<String> = Vec::new();
    fn visit(
        name: &str,
        mdir: &Path,
        out: &Path,
        order: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> Result<(), String> {
        if !seen.insert(name.to_string()) {
            return Ok(());
        }
        let path = find_module(mdir, name).ok_or(format!("module {name} not in the package"))?;
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        for d in module_depends(&bytes) {
            visit(&d, mdir, out, order, seen)?;
        }
        std::fs::write(out.join(format!("modules/{name}.ko")), &bytes)
            .map_err(|e| e.to_string())?;
        order.push(name.to_string());
        Ok(())
    }
    let mut seen = BTreeSet::new();
    for m in WANT_MODULES {
        visit(m, &mdir, &out, &mut order, &mut seen)?;
    }
    std::fs::write(out.join("modules.order"), order.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("release"), &release).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&out, dir).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

fn fnv64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The shared libraries a program needs (per `ldd`), as the paths it names.
fn libs_of(bin: &Path) -> Result<Vec<String>, String> {
    let out = cmd_output(Command::new("ldd").arg(bin), Duration::from_secs(30))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(str::to_string)
        })
        .collect())
}

fn add_parents(c: &mut Cpio, dirs: &mut BTreeSet<String>, path: &str) {
    let mut acc = String::new();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for p in &parts[..parts.len().saturating_sub(1)] {
        acc.push('/');
        acc.push_str(p);
        if dirs.insert(acc.clone()) {
            c.dir(&acc);
        }
    }
}

fn build_initrd(kdir: &Path, out: &Path) -> Result<(), String> {
    let mut c = Cpio::new();
    let mut dirs = BTreeSet::new();
    for d in [
        "/bin", "/dev", "/proc", "/sys", "/tmp", "/root", "/etc", "/lib", "/usr", "/usr/bin",
    ] {
        dirs.insert(d.to_string());
        c.dir(d);
    }
    let rd = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    c.file("/init", INIT.as_bytes(), true);
    c.file("/bin/busybox", &rd(Path::new("/bin/busybox"))?, true);
    // Kernel modules.
    add_parents(&mut c, &mut dirs, "/lib/ferroce/x");
    let order = std::fs::read_to_string(kdir.join("modules.order")).map_err(|e| e.to_string())?;
    c.file("/lib/ferroce/modules.order", order.as_bytes(), false);
    for m in order.lines().filter(|l| !l.is_empty()) {
        c.file(
            &format!("/lib/ferroce/{m}.ko"),
            &rd(&kdir.join(format!("modules/{m}.ko")))?,
            false,
        );
    }
    // Programs, the rxe provider, their libraries.
    let mut libs = BTreeSet::new();
    for cands in PROGRAMS {
        let host = cands
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
            .ok_or(format!("{} not installed", cands[0]))?;
        let name = host.file_name().unwrap().to_string_lossy();
        c.file(&format!("/usr/bin/{name}"), &rd(host)?, true);
        libs.extend(libs_of(host)?);
    }
    let provider = format!("/usr/lib/{MULTIARCH}/libibverbs/librxe-rdmav34.so");
    libs.extend(libs_of(Path::new(&provider))?);
    libs.insert(provider);
    // glibc dlopens libgcc_s for pthread_exit/pthread_cancel (rping's threads end so): no
    // program names it, so ldd does not list it.
    let gcc_s = format!("/lib/{MULTIARCH}/libgcc_s.so.1");
    if Path::new(&gcc_s).exists() {
        libs.insert(gcc_s);
    }
    for l in &libs {
        add_parents(&mut c, &mut dirs, l);
        c.file(l, &rd(Path::new(l))?, true);
    }
    add_parents(&mut c, &mut dirs, "/etc/libibverbs.d/x");
    c.file("/etc/libibverbs.d/rxe.driver", b"driver rxe\n", false);
    c.file("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", false);
    c.file("/etc/hosts", b"127.0.0.1 localhost\n", false);
    let tmp = out.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    c.finish(&mut f).map_err(|e| e.to_string())?;
    drop(f);
    std::fs::rename(&tmp, out).map_err(|e| e.to_string())
}

/// Make sure the image exists (installing packages, downloading the kernel and building the
/// initramfs as needed) and return it.
pub fn prepare() -> Result<Image, String> {
    ensure_host_packages()?;
    let root = cache_root();
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    // The kernel: the newest candidate if apt knows one, else any cached one.
    let kdir = match kernel_package() {
        Some((pkg, ver)) => {
            let d = root.join(format!("kernel-{pkg}_{ver}"));
            // A cached kernel from before a module was added lacks it: unpack again.
            let complete = WANT_MODULES
                .iter()
                .all(|m| d.join(format!("modules/{m}.ko")).exists());
            if !d.join("release").exists() || !complete {
                fetch_kernel(&pkg, &d)?;
            }
            d
        }
        None => std::fs::read_dir(&root)
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("kernel-"))
                    && p.join("release").exists()
            })
            .max()
            .ok_or("cannot find linux-image-amd64 in apt and no kernel is cached")?,
    };
    let release = std::fs::read_to_string(kdir.join("release")).map_err(|e| e.to_string())?;
    // The programs copied in are part of the image: adding one must not reuse an old image.
    let progs: Vec<&str> = PROGRAMS.iter().map(|c| c[0]).collect();
    let mut key = format!("{FORMAT}|{}|{INIT}|{}", kdir.display(), progs.join(","));
    for p in [
        "busybox-static",
        "iproute2",
        "ibverbs-utils",
        "perftest",
        "rdmacm-utils",
        "ibverbs-providers",
        "libibverbs1",
        "librdmacm1",
        "libc6",
    ] {
        key.push_str(&format!("|{p}={}", dpkg_version(p).unwrap_or_default()));
    }
    let initrd = root.join(format!("initrd-{:016x}.cpio", fnv64(&key)));
    if !initrd.exists() {
        let t = std::time::Instant::now();
        build_initrd(&kdir, &initrd)?;
        log(&format!(
            "built {} in {:.1} s",
            initrd.display(),
            t.elapsed().as_secs_f64()
        ));
    }
    Ok(Image {
        kernel: kdir.join("vmlinuz"),
        initrd,
        release: release.trim().to_string(),
        describe: format!(
            "{} + {}",
            kdir.file_name().unwrap().to_string_lossy(),
            key.rsplit('|').take(8).collect::<Vec<_>>().join(" ")
        ),
    })
}
