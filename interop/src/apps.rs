//! The verbs programs on both sides and the interop matrix.
//!
//! A [`Session`] is one lab (namespace, bridge, host veth, taps) with one or two rxe VMs at one
//! link MTU. On the host side the unmodified Debian program runs inside the lab namespace with
//! the ferroce verbs shim on `LD_LIBRARY_PATH` (device `ferroce0_rocev2`, the DPDK engine on
//! `net_af_packet` over [`crate::lab::HOST_IF`] with its own address [`FERROCE_IP`]); the
//! programs' TCP exchange uses the kernel's [`HOST_IP`]. In the VM the same program runs on
//! `rxe0`. Every run is bounded in time and checks exit status and output of both sides.

use crate::image::Image;
use crate::lab::{Lab, FERROCE_IP, HOST_IF, HOST_IP};
use crate::util::{log, Bounded};
use crate::vm::{Vm, VmOut, VmSpec};
use crate::wireloss::{WireCounts, WireLoss};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use crate::matrix::{csv, table};

/// The port the programs exchange QP information on.
pub const PORT: u16 = 18515;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    PingPong,
    Bw,
    Lat,
    /// rping: judged by its ping lines.
    Cm,
    /// udaddy (RDMA_PS_UDP: SIDR REQ/REP, then UD datagrams): judged by its "test complete".
    Sidr,
}

/// One program of the matrix with the arguments both sides get (besides `-d`, `-m`).
#[derive(Clone, Copy, Debug)]
pub struct Program {
    /// The matrix's name (`ib_write_bw-R` is `ib_write_bw` with `-R`).
    pub name: &'static str,
    /// The executable in /usr/bin.
    pub bin: &'static str,
    pub args: &'static str,
    pub kind: Kind,
    /// Connects through the CMs (ferroce's IBTA CM on QP1 of its RoCEv2 device over its
    /// librdmacm, the kernel's in the VM), no TCP exchange.
    pub cm: bool,
}

/// The matrix's programs. Iteration counts are small: rxe runs under software emulation.
pub const PROGRAMS: &[Program] = &[
    Program {
        name: "ibv_rc_pingpong",
        bin: "ibv_rc_pingpong",
        args: "-g 1 -c -n 100",
        kind: Kind::PingPong,
        cm: false,
    },
    // Plain IBTA UD (no CM): DETH with Q_Key and source QP, the GRH area on receive.
    Program {
        name: "ibv_ud_pingpong",
        bin: "ibv_ud_pingpong",
        args: "-g 1 -c -n 100",
        kind: Kind::PingPong,
        cm: false,
    },
    Program {
        name: "ib_send_bw",
        bin: "ib_send_bw",
        args: "-x 1 -F -n 200",
        kind: Kind::Bw,
        cm: false,
    },
    Program {
        name: "ib_write_bw",
        bin: "ib_write_bw",
        args: "-x 1 -F -n 200",
        kind: Kind::Bw,
        cm: false,
    },
    Program {
        name: "ib_read_bw",
        bin: "ib_read_bw",
        args: "-x 1 -F -n 200",
        kind: Kind::Bw,
        cm: false,
    },
    Program {
        name: "ib_atomic_bw",
        bin: "ib_atomic_bw",
        args: "-x 1 -F -n 200",
        kind: Kind::Bw,
        cm: false,
    },
    Program {
        name: "ib_write_lat",
        bin: "ib_write_lat",
        args: "-x 1 -F -n 200",
        kind: Kind::Lat,
        cm: false,
    },
    // rdma_cm: REQ/REP/RTU and DREQ/DREP as CM MADs on QP1, then RC SEND/READ/WRITE.
    Program {
        name: "rping",
        bin: "rping",
        args: "-v -C 20",
        kind: Kind::Cm,
        cm: true,
    },
    // Not in the CI set (rxe_vm.rs), for `ferroce interop rxe` / FERROCE_INTEROP_PROGRAMS:
    // perftest over rdma_cm (its QP found through REQ/REP/RTU instead of its TCP exchange).
    Program {
        name: "ib_write_bw-R",
        bin: "ib_write_bw",
        args: "-R -F -n 200",
        kind: Kind::Bw,
        cm: true,
    },
    // RDMA_PS_UDP: SIDR REQ/REP on QP1, then UD datagrams to the QP and Q_Key the reply named.
    Program {
        name: "udaddy",
        bin: "udaddy",
        args: "-c 1 -C 10",
        kind: Kind::Sidr,
        cm: true,
    },
];

/// Pings of the `rping` entry (its `-C`).
const RPING_COUNT: usize = 20;

pub fn program(name: &str) -> Option<Program> {
    PROGRAMS.iter().copied().find(|p| p.name == name)
}

/// Which side ferroce plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// `ibv_rc_pingpong -m` and perftest `-m` spell the MTU the same way; `ibv_ud_pingpong` has
/// no path MTU (UD uses the port's): its messages are `-s` bytes, the MTU itself (the most a
/// UD message may carry).
fn mtu_args(p: &Program, mtu: u32) -> String {
    if p.name == "ibv_ud_pingpong" {
        format!("{} -s {mtu}", p.args)
    } else if matches!(p.kind, Kind::Cm | Kind::Sidr) {
        // The path MTU is the initiator's port's: the link MTU sets it on both sides (udaddy's
        // datagrams are its default -S, under any MTU).
        p.args.to_string()
    } else {
        format!("{} -m {mtu}", p.args)
    }
}

/// Outcome of one run.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub program: &'static str,
    /// `"server"`/`"client"`, or `"rxe-rxe"` for the harness proof.
    pub role: &'static str,
    pub mtu: u32,
    pub loss_pct: f64,
    /// Whose transmissions were dropped: `ferroce` (its injector), `rxe` (the bridge's nftables
    /// rule on vm0's packets), `both` or `none`.
    pub loss_side: &'static str,
    /// RoCEv2 packets on the bridge during the run (when nftables counted them).
    pub wire: Option<WireCounts>,
    /// Bytes the program moved (perftest's #bytes × #iterations), for packets per MB.
    pub bytes: Option<u64>,
    pub ok: bool,
    pub figure: String,
    pub secs: f64,
    /// Both sides' exit status and output.
    pub detail: String,
}

/// Judge both sides' output: exit 0, the program's success lines, no data errors; and the figure
/// (pingpong: usec/iter; bw: MB/s average; lat: typical usec), taken from `figure_from`.
pub fn judge(
    p: &Program,
    a: (&str, Option<i32>),
    b: (&str, Option<i32>),
    figure_from: &str,
) -> (bool, String) {
    let mut ok = a.1 == Some(0) && b.1 == Some(0);
    for t in [a.0, b.0] {
        for bad in [
            "invalid data",
            "not as expected",
            "Failed status",
            "symbol lookup",
            "Couldn't",
            "Unable",
        ] {
            if t.contains(bad) {
                ok = false;
            }
        }
    }
    let mut figure = "-".to_string();
    match p.kind {
        Kind::Cm => {
            // rping -v: the client prints "ping data: rdma-ping-N: ...", the server "server
            // ping data: ...", once per ping, in order.
            let count = |t: &str, prefix: &str| {
                t.lines()
                    .filter(|l| l.starts_with(prefix) && l.contains("rdma-ping-"))
                    .count()
            };
            let pings =
                [a.0, b.0].map(|t| count(t, "ping data: ") + count(t, "server ping data: "));
            ok &= pings.iter().all(|&n| n == RPING_COUNT);
            figure = format!("{}+{} pings", pings[0], pings[1]);
        }
        Kind::Sidr => {
            // udaddy: each side reports its transfers done and exits with "return status 0".
            let done =
                |t: &str| t.contains("data transfers complete") && t.contains("return status 0");
            ok &= done(a.0) && done(b.0);
            figure = if ok { "SIDR + UD".into() } else { "-".into() };
        }
        Kind::PingPong => {
            ok &= a.0.contains("iters in") && b.0.contains("iters in");
            if let Some(l) = figure_from.lines().find(|l| l.contains("usec/iter")) {
                figure = format!(
                    "{} us/iter",
                    l.split('=')
                        .nth(1)
                        .unwrap_or("")
                        .trim()
                        .trim_end_matches(" usec/iter")
                );
            }
        }
        Kind::Bw | Kind::Lat => {
            let row = figure_from
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| {
                    f.len() >= 5 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok()
                });
            match row {
                Some(f) if p.kind == Kind::Bw => {
                    let mbs: f64 = f[3].parse().unwrap_or(0.0);
                    figure = format!("{mbs:.2} MB/s");
                }
                Some(f) => figure = format!("{} us typ", f[4]),
                None => ok = false,
            }
        }
    }
    (ok, figure)
}

/// The directory to put on `LD_LIBRARY_PATH`: `libibverbs.so.1` (the shim) and the stub
/// providers perftest loads. The shim is `$FERROCE_VERBS_LIB` (a file or a directory holding
/// `libibverbs.so`), else the `libibverbs.so` cargo built beside this executable.
pub fn shim_lib_dir(dir: &Path) -> Result<PathBuf, String> {
    let mut cands: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("FERROCE_VERBS_LIB") {
        let p = PathBuf::from(v);
        cands.push(if p.is_dir() {
            p.join("libibverbs.so")
        } else {
            p
        });
    }
    if let Ok(exe) = std::env::current_exe() {
        let mut d = exe.parent().map(Path::to_path_buf);
        for _ in 0..3 {
            let Some(x) = d else { break };
            cands.push(x.join("libibverbs.so"));
            cands.push(x.join("deps/libibverbs.so"));
            d = x.parent().map(Path::to_path_buf);
        }
    }
    // An explicit $FERROCE_VERBS_LIB wins; else the newest build: `cargo build --tests`
    // refreshes only deps/, so target/release/libibverbs.so (and the librdmacm.so beside it)
    // may be an older one.
    let explicit = std::env::var_os("FERROCE_VERBS_LIB").is_some();
    let mtime = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let existing = cands.into_iter().filter(|p| p.exists());
    let lib = if explicit {
        existing.take(1).next()
    } else {
        existing.max_by_key(mtime)
    };
    let lib = lib
        .ok_or("the ferroce verbs shim (libibverbs.so) is not built: cargo build --release -p ferroce-verbs, or set FERROCE_VERBS_LIB")?;
    let out = dir.join("shim");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let link = |src: &Path, name: &str| -> Result<(), String> {
        let dst = out.join(name);
        let _ = std::fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst).map_err(|e| format!("{}: {e}", dst.display()))
    };
    link(&lib, "libibverbs.so.1")?;
    // ferroce's librdmacm, built beside the shim (for rdma_cm programs).
    if let Some(cm) = lib
        .parent()
        .map(|d| d.join("librdmacm.so"))
        .filter(|p| p.exists())
    {
        link(&cm, "librdmacm.so.1")?;
    }
    for l in ["libmlx5.so.1", "libefa.so.1", "libmlx4.so.1"] {
        let p = Path::new(ibverbs::STUB_DIR).join(l);
        if p.exists() {
            link(&p, l)?;
        }
    }
    Ok(out)
}

/// What a ferroce-vs-rxe run needs besides root.
pub fn prerequisites() -> Result<(), String> {
    crate::can_run()?;
    if ferroce_dataplane::config::pmd_dir().is_none() {
        return Err("DPDK PMDs not installed (scripts/setup.sh)".into());
    }
    Ok(())
}

/// One lab with its VMs at one link MTU (1500 → rxe active MTU 1024, 9000 → 4096).
pub struct Session {
    // Field order matters: the VMs go before the lab that holds their taps.
    pub vms: Vec<Vm>,
    /// The bridge's RoCEv2 counters and rxe-side loss (vm0's transmissions), when installed.
    pub wire: Option<WireLoss>,
    pub lab: Lab,
    pub dir: PathBuf,
    pub link_mtu: u32,
    pub shim: Option<PathBuf>,
    /// Kept until the end of the session (removed on drop unless FERROCE_INTEROP_KEEP is set).
    keep_dir: bool,
}

impl Session {
    /// Boot `n_vms` VMs (in parallel: qemu starts at once, then each is awaited) with rxe0 up.
    pub fn start(img: &Image, n_vms: usize, link_mtu: u32, tag: &str) -> Result<Session, String> {
        Session::start_with(img, n_vms, link_mtu, tag, false)
    }

    /// The capture of VM `k`'s NIC (when started with `capture`).
    pub fn pcap(&self, k: usize) -> PathBuf {
        self.dir.join(format!("vm{k}.pcap"))
    }

    /// As [`Session::start`]; with `capture`, qemu writes each VM's traffic to [`Session::pcap`].
    pub fn start_with(
        img: &Image,
        n_vms: usize,
        link_mtu: u32,
        tag: &str,
        capture: bool,
    ) -> Result<Session, String> {
        let dir =
            std::env::temp_dir().join(format!("ferroce-interop-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let lab = Lab::create(n_vms, link_mtu)?;
        let mut s = Session {
            vms: Vec::new(),
            wire: None,
            lab,
            dir: dir.clone(),
            link_mtu,
            shim: None,
            keep_dir: std::env::var_os("FERROCE_INTEROP_KEEP").is_some(),
        };
        for k in 0..n_vms {
            let mut spec = VmSpec::new(k);
            spec.mtu = link_mtu;
            if capture {
                spec.pcap = Some(dir.join(format!("vm{k}.pcap")));
            }
            s.vms.push(Vm::spawn(&s.lab, img, &spec, &dir)?);
        }
        for vm in s.vms.iter_mut() {
            let t = vm.wait_ready(Duration::from_secs(120))?;
            log(&format!("vm{} ready in {:.1} s", vm.index, t.as_secs_f64()));
        }
        for vm in s.vms.iter_mut() {
            vm.add_rxe()?;
        }
        Ok(s)
    }

    /// Drop `pct` % of vm0's RoCEv2 transmissions on the bridge (0: count packets only).
    pub fn set_rxe_loss(&mut self, pct: f64) -> Result<(), String> {
        self.wire = None;
        self.wire = Some(WireLoss::install(&self.lab, self.vms[0].ip, pct)?);
        Ok(())
    }

    fn rxe_loss_pct(&self) -> f64 {
        self.wire.as_ref().map_or(0.0, |w| w.pct)
    }

    fn wire_counts(&self) -> Option<WireCounts> {
        self.wire.as_ref().and_then(|w| w.counts().ok())
    }

    /// A host-side program in the lab namespace over the shim (ferroce's RoCEv2 device).
    fn ferroce_cmd(
        &mut self,
        p: &Program,
        args: &str,
        loss: f64,
        limit: Duration,
    ) -> Result<Command, String> {
        if self.shim.is_none() {
            self.shim = Some(shim_lib_dir(&self.dir)?);
        }
        let mut c = self.lab.command("timeout");
        c.args(["-k", "3", &limit.as_secs().to_string()])
            .arg(Path::new("/usr/bin").join(p.bin));
        if p.cm {
            // librdmacm picks no device by name: it uses the RoCEv2 one's CM.
            if !self.shim.as_ref().unwrap().join("librdmacm.so.1").exists() {
                return Err(
                    "ferroce's librdmacm.so is not built: cargo build --release -p ferroce-rdmacm"
                        .into(),
                );
            }
            c.env("FERROCE_CM_DEVICE", "ferroce0_rocev2");
        }
        if has_device_arg(p) {
            c.args(["-d", "ferroce0_rocev2"]);
        }
        c.args(args.split_whitespace())
            .env("LD_LIBRARY_PATH", self.shim.as_ref().unwrap())
            .env("FERROCE_IP", FERROCE_IP.to_string())
            .env("FERROCE_PMD", pmd_devargs(self.link_mtu))
            .env("FERROCE_LOSS", format!("{loss}"));
        if self.link_mtu > 1500 {
            // Jumbo frames: the engine's port MTU sizes its mbufs.
            c.env("FERROCE_DP__PORT__MTU", self.link_mtu.to_string());
        }
        if std::env::var_os("FERROCE_VERBS_DEBUG").is_some() {
            c.env("FERROCE_VERBS_DEBUG", "1");
        }
        Ok(c)
    }

    /// rxe in vm0 against rxe in vm1 (vm0 serves): the harness proof.
    pub fn rxe_vs_rxe(
        &mut self,
        p: &Program,
        mtu: u32,
        limit: Duration,
    ) -> Result<RunResult, String> {
        self.rxe_vs_rxe_as(p, Role::Client, mtu, limit)
    }

    /// rxe in vm1 standing in for ferroce (playing `role`) against rxe in vm0, whose
    /// transmissions [`Session::set_rxe_loss`] drops: the baseline of the ferroce runs.
    pub fn rxe_vs_rxe_as(
        &mut self,
        p: &Program,
        role: Role,
        mtu: u32,
        limit: Duration,
    ) -> Result<RunResult, String> {
        if self.vms.len() < 2 {
            return Err("rxe_vs_rxe needs two VMs".into());
        }
        if p.cm {
            // The rxe-rxe baseline waits for a TCP listener; the CM programs have none.
            return Err(format!("{}: no rxe-rxe run for rdma_cm programs", p.name));
        }
        let t0 = Instant::now();
        let before = self.wire_counts();
        let args = mtu_args(p, mtu);
        let (srv, cli) = match role {
            Role::Client => (0, 1),
            Role::Server => (1, 0),
        };
        let server_ip = self.vms[srv].ip;
        let job = self.vms[srv].start(&format!("{} -d rxe0 {args}", p.bin), limit)?;
        self.vms[srv].wait_listening(PORT, Duration::from_secs(20))?;
        let c = self.vms[cli].run(&format!("{} -d rxe0 {args} {server_ip}", p.bin), limit)?;
        let s = self.vms[srv].wait_job(job)?;
        let (ok, figure) = judge(p, (&c.text, Some(c.code)), (&s.text, Some(s.code)), &c.text);
        let rxe = self.rxe_loss_pct();
        Ok(RunResult {
            program: p.name,
            role: match role {
                Role::Client => "rxe-rxe",
                Role::Server => "rxe-rxe-server",
            },
            mtu,
            loss_pct: rxe,
            loss_side: if rxe > 0.0 { "rxe" } else { "none" },
            wire: self.wire_counts().zip(before).map(|(a, b)| a.since(b)),
            bytes: moved_bytes(&c.text),
            ok,
            figure,
            secs: t0.elapsed().as_secs_f64(),
            detail: format!(
                "client vm{cli} (exit {}):\n{}\nserver vm{srv} (exit {}):\n{}",
                c.code, c.text, s.code, s.text
            ),
        })
    }

    /// ferroce (host, shim + DPDK engine) against rxe in vm0, ferroce playing `role`.
    pub fn ferroce_vs_rxe(
        &mut self,
        p: &Program,
        role: Role,
        mtu: u32,
        loss: f64,
        limit: Duration,
    ) -> Result<RunResult, String> {
        if p.cm {
            return self.cm_vs_rxe(p, role, mtu, loss, limit);
        }
        let t0 = Instant::now();
        let before = self.wire_counts();
        let args = mtu_args(p, mtu);
        let vm_ip = self.vms[0].ip;
        let (host, vm): ((String, Option<i32>), VmOut) = match role {
            Role::Server => {
                let mut c = self.ferroce_cmd(p, &args, loss, limit)?;
                let h = Bounded::spawn(&mut c, limit + Duration::from_secs(10))?;
                let t = Instant::now();
                while !self.lab.tcp_listening(PORT) {
                    if t.elapsed() > Duration::from_secs(20) {
                        let o = h.wait();
                        return Err(format!("ferroce server never listened:\n{}", o.text()));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let v = self.vms[0].run(&format!("{} -d rxe0 {args} {HOST_IP}", p.bin), limit);
                let o = h.wait();
                ((o.text(), o.code), v?)
            }
            Role::Client => {
                let job = self.vms[0].start(&format!("{} -d rxe0 {args}", p.bin), limit)?;
                self.vms[0].wait_listening(PORT, Duration::from_secs(20))?;
                let mut c = self.ferroce_cmd(p, &format!("{args} {vm_ip}"), loss, limit)?;
                let o = Bounded::spawn(&mut c, limit + Duration::from_secs(10))?.wait();
                let v = self.vms[0].wait_job(job)?;
                ((o.text(), o.code), v)
            }
        };
        // The figure from the client side (perftest prints the result there; the server too for bw).
        let client_text = match role {
            Role::Server => vm.text.clone(),
            Role::Client => host.0.clone(),
        };
        let (ok, figure) = judge(
            p,
            (&host.0, host.1),
            (&vm.text, Some(vm.code)),
            &client_text,
        );
        Ok(RunResult {
            program: p.name,
            role: role.as_str(),
            mtu,
            loss_pct: loss * 100.0 + self.rxe_loss_pct(),
            loss_side: loss_side(loss, self.rxe_loss_pct()),
            wire: self.wire_counts().zip(before).map(|(a, b)| a.since(b)),
            bytes: moved_bytes(&client_text),
            ok,
            figure,
            secs: t0.elapsed().as_secs_f64(),
            detail: format!(
                "ferroce {} (exit {:?}):\n{}\nrxe vm0 (exit {}):\n{}",
                role.as_str(),
                host.1,
                host.0,
                vm.code,
                vm.text
            ),
        })
    }
}

impl Session {
    /// An rdma_cm program (rping, udaddy, perftest -R) between ferroce and rxe: no TCP port to wait for, so the
    /// server is given time to listen (the VM's: until `rdma res` shows its listening id;
    /// ferroce's: a few seconds, and its CM's listen grace covers a REQ that comes early).
    fn cm_vs_rxe(
        &mut self,
        p: &Program,
        role: Role,
        mtu: u32,
        loss: f64,
        limit: Duration,
    ) -> Result<RunResult, String> {
        let t0 = Instant::now();
        let before = self.wire_counts();
        let args = mtu_args(p, mtu);
        let vm_ip = self.vms[0].ip;
        let (host, vm): ((String, Option<i32>), VmOut) = match role {
            Role::Server => {
                let a = cm_args(p, &args, Role::Server, FERROCE_IP);
                let mut c = self.ferroce_cmd(p, &a, loss, limit)?;
                let h = Bounded::spawn(&mut c, limit + Duration::from_secs(10))?;
                std::thread::sleep(Duration::from_secs(4));
                let a = cm_args(p, &args, Role::Client, FERROCE_IP);
                let v = self.vms[0].run(&format!("{} {}{a}", p.bin, vm_dev(p)), limit);
                let o = h.wait();
                ((o.text(), o.code), v?)
            }
            Role::Client => {
                let a = cm_args(p, &args, Role::Server, vm_ip);
                let job = self.vms[0].start(&format!("{} {}{a}", p.bin, vm_dev(p)), limit)?;
                let t = Instant::now();
                loop {
                    let o = self.vms[0].run("rdma res show cm_id", Duration::from_secs(10))?;
                    if o.text.contains("LISTEN") {
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(20) {
                        return Err(format!("{} in the VM never listened:\n{}", p.bin, o.text));
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
                let a = cm_args(p, &args, Role::Client, vm_ip);
                let mut c = self.ferroce_cmd(p, &a, loss, limit)?;
                let o = Bounded::spawn(&mut c, limit + Duration::from_secs(10))?.wait();
                let v = self.vms[0].wait_job(job)?;
                ((o.text(), o.code), v)
            }
        };
        // perftest prints its result on the client.
        let client_text = match role {
            Role::Server => vm.text.clone(),
            Role::Client => host.0.clone(),
        };
        let (ok, figure) = judge(
            p,
            (&host.0, host.1),
            (&vm.text, Some(vm.code)),
            &client_text,
        );
        Ok(RunResult {
            program: p.name,
            role: role.as_str(),
            mtu,
            loss_pct: loss * 100.0 + self.rxe_loss_pct(),
            loss_side: loss_side(loss, self.rxe_loss_pct()),
            wire: self.wire_counts().zip(before).map(|(a, b)| a.since(b)),
            bytes: moved_bytes(&client_text),
            ok,
            figure,
            secs: t0.elapsed().as_secs_f64(),
            detail: format!(
                "ferroce {} (exit {:?}):\n{}\nrxe vm0 (exit {}):\n{}",
                role.as_str(),
                host.1,
                host.0,
                vm.code,
                vm.text
            ),
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for vm in self.vms.iter_mut() {
            vm.shutdown();
        }
        self.vms.clear();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether the program takes `-d DEVICE` (perftest and the pingpongs; the rdmacm-utils
/// programs find the device from the address).
fn has_device_arg(p: &Program) -> bool {
    !matches!(p.kind, Kind::Cm | Kind::Sidr)
}

/// `-d rxe0 ` for the VM's side of a CM program that takes a device.
fn vm_dev(p: &Program) -> &'static str {
    if has_device_arg(p) {
        "-d rxe0 "
    } else {
        ""
    }
}

/// The arguments of a CM program's `side` with `addr` the server's address (the one it binds
/// to, the one the client connects to).
fn cm_args(p: &Program, args: &str, side: Role, addr: std::net::Ipv4Addr) -> String {
    match (p.kind, side) {
        (Kind::Cm, Role::Server) => format!("-s {args} -a {addr}"),
        (Kind::Cm, Role::Client) => format!("-c {args} -a {addr}"),
        (Kind::Sidr, Role::Server) => format!("{args} -b {addr}"),
        (Kind::Sidr, Role::Client) => format!("{args} -s {addr}"),
        // perftest -R: the server binds the wildcard on its port, the client names the server.
        (_, Role::Server) => args.to_string(),
        (_, Role::Client) => format!("{args} {addr}"),
    }
}

/// Which side's transmissions a run lost: ferroce's injector (`loss`, a fraction) or the
/// bridge's rule on rxe's (`rxe_pct`, a percentage).
pub fn loss_side(loss: f64, rxe_pct: f64) -> &'static str {
    match (loss > 0.0, rxe_pct > 0.0) {
        (true, true) => "both",
        (true, false) => "ferroce",
        (false, true) => "rxe",
        (false, false) => "none",
    }
}

/// perftest's #bytes × #iterations from its result row.
pub fn moved_bytes(text: &str) -> Option<u64> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 5 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok())
        .map(|f| f[0].parse::<u64>().unwrap_or(0) * f[1].parse::<u64>().unwrap_or(0))
}

/// The link MTU that gives rxe the active MTU `mtu`.
/// The DPDK af_packet port on the lab's host side: its frames must hold a whole jumbo frame
/// RoCEv2 packet at MTU 4096 (the default frame is 2048 bytes) and fit the engine's mbufs.
fn pmd_devargs(link_mtu: u32) -> String {
    if link_mtu > 1500 {
        format!("net_af_packet0,iface={HOST_IF},framecnt=4096,framesz=8192,blocksz=8192")
    } else {
        format!("net_af_packet0,iface={HOST_IF},framecnt=8192")
    }
}

pub fn link_mtu_for(mtu: u32) -> u32 {
    if mtu > 1024 {
        9000
    } else {
        1500
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_pingpong_and_perftest_output() {
        let p = program("ibv_rc_pingpong").unwrap();
        let t = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x1, GID ::ffff:198.18.0.2\n8192000 bytes in 0.50 seconds = 131.07 Mbit/sec\n1000 iters in 0.50 seconds = 500.00 usec/iter\n";
        assert_eq!(
            judge(&p, (t, Some(0)), (t, Some(0)), t),
            (true, "500.00 us/iter".into())
        );
        assert!(!judge(&p, (t, Some(1)), (t, Some(0)), t).0);
        let p = program("ib_write_bw").unwrap();
        let t = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      200            12.34              11.50                0.000184\n";
        assert_eq!(
            judge(&p, (t, Some(0)), ("", Some(0)), t),
            (true, "11.50 MB/s".into())
        );
        let p = program("ib_write_lat").unwrap();
        let t = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n 2       200          100.1          300.2        150.3            160.0\n";
        assert_eq!(
            judge(&p, (t, Some(0)), ("", Some(0)), t),
            (true, "150.3 us typ".into())
        );
    }

    #[test]
    fn judges_rping_by_its_ping_lines() {
        let p = program("rping").unwrap();
        let lines = |prefix: &str, n: usize| -> String {
            (0..n)
                .map(|i| format!("{prefix}rdma-ping-{i}: ABCDEF\n"))
                .collect()
        };
        let c = lines("ping data: ", RPING_COUNT);
        let s = lines("server ping data: ", RPING_COUNT);
        assert_eq!(
            judge(&p, (&c, Some(0)), (&s, Some(0)), ""),
            (true, "20+20 pings".into())
        );
        let short = lines("ping data: ", RPING_COUNT - 1);
        assert!(!judge(&p, (&short, Some(0)), (&s, Some(0)), "").0);
        assert!(!judge(&p, (&c, Some(0)), (&s, Some(1)), "").0);
        assert_eq!(mtu_args(&p, 4096), "-v -C 20");
    }

    #[test]
    fn judges_udaddy_by_both_sides_completing() {
        let p = program("udaddy").unwrap();
        let c = "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n";
        let s = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n";
        assert_eq!(
            judge(&p, (c, Some(0)), (s, Some(0)), ""),
            (true, "SIDR + UD".into())
        );
        // A client that never got its SIDR reply.
        let bad = "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: -110\ntest complete\nreturn status -110\n";
        assert!(!judge(&p, (bad, Some(146)), (s, Some(0)), "").0);
        assert!(!judge(&p, (c, Some(0)), (s, Some(1)), "").0);
        assert_eq!(mtu_args(&p, 1024), "-c 1 -C 10");
        let ip = std::net::Ipv4Addr::new(198, 18, 0, 11);
        assert_eq!(cm_args(&p, "-c 1", Role::Server, ip), "-c 1 -b 198.18.0.11");
        assert_eq!(cm_args(&p, "-c 1", Role::Client, ip), "-c 1 -s 198.18.0.11");
        assert_eq!(vm_dev(&p), "");
    }

    #[test]
    fn perftest_over_rdma_cm_takes_its_device_and_the_server_address() {
        let p = program("ib_write_bw-R").unwrap();
        assert_eq!((p.bin, p.cm), ("ib_write_bw", true));
        let a = mtu_args(&p, 1024);
        assert_eq!(a, "-R -F -n 200 -m 1024");
        let ip = std::net::Ipv4Addr::new(198, 18, 0, 2);
        assert_eq!(cm_args(&p, &a, Role::Server, ip), a);
        assert_eq!(
            cm_args(&p, &a, Role::Client, ip),
            "-R -F -n 200 -m 1024 198.18.0.2"
        );
        assert_eq!(vm_dev(&p), "-d rxe0 ");
        let p = program("rping").unwrap();
        assert_eq!(cm_args(&p, "-v", Role::Server, ip), "-s -v -a 198.18.0.2");
        assert_eq!(vm_dev(&p), "");
    }

    #[test]
    fn ud_pingpong_gets_the_mtu_as_its_message_size() {
        let p = program("ibv_ud_pingpong").unwrap();
        assert_eq!(mtu_args(&p, 4096), "-g 1 -c -n 100 -s 4096");
        let p = program("ibv_rc_pingpong").unwrap();
        assert_eq!(mtu_args(&p, 1024), "-g 1 -c -n 100 -m 1024");
    }
}
