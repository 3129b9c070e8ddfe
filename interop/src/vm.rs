//! One rxe VM: qemu (software emulation) booting the cached kernel and initramfs, its NIC on a
//! tap of the [`Lab`], its console (kernel log) in a file, and a command channel on its second
//! serial port (qemu's stdin/stdout here). Every step is bounded in time; the VM is powered
//! off and its qemu process (the one this harness started, by pid) killed on drop.

use crate::image::Image;
use crate::lab::{Lab, PREFIX_LEN};
use crate::util::{kill_group, own_group};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How to boot one VM.
#[derive(Clone, Debug)]
pub struct VmSpec {
    /// Index: tap `ftap<k>`, address [`crate::lab::vm_ip`]`(k)`.
    pub index: usize,
    /// Link MTU of eth0 (1500 → rxe active MTU 1024; 9000 → 4096).
    pub mtu: u32,
    /// Write a pcap of everything on the VM's NIC here (qemu's filter-dump).
    pub pcap: Option<PathBuf>,
    pub mem_mb: u32,
}

impl VmSpec {
    pub fn new(index: usize) -> Self {
        VmSpec {
            index,
            mtu: 1500,
            pcap: None,
            mem_mb: 512,
        }
    }
}

/// Output and exit status of a command run in the VM.
#[derive(Clone, Debug)]
pub struct VmOut {
    pub code: i32,
    pub text: String,
    pub elapsed: Duration,
}

/// A command started in the VM's background.
#[derive(Clone, Copy, Debug)]
pub struct Job(u64, u64);

pub struct Vm {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    pub console: PathBuf,
    pub ip: Ipv4Addr,
    pub index: usize,
    seq: u64,
    /// False once a command overran its deadline (the channel is then out of step).
    healthy: bool,
    pub boot_time: Option<Duration>,
    pub kernel_release: String,
}

fn mac(k: usize) -> String {
    format!("52:54:00:18:00:{:02x}", 0x10 + k)
}

/// Quote for `sh -c '...'`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Vm {
    /// Start qemu (returns at once; see [`Vm::wait_ready`]).
    pub fn spawn(lab: &Lab, image: &Image, spec: &VmSpec, dir: &Path) -> Result<Vm, String> {
        let tap = lab
            .taps
            .get(spec.index)
            .ok_or(format!("lab has no tap {}", spec.index))?;
        let ip = crate::lab::vm_ip(spec.index);
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let console = dir.join(format!("vm{}-console.log", spec.index));
        let _ = std::fs::remove_file(&console);
        let mut c = lab.command("qemu-system-x86_64");
        c.args([
            "-accel",
            "tcg",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
        ])
        .args(["-no-reboot", "-smp", "1", "-m", &spec.mem_mb.to_string()])
        .arg("-kernel")
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initrd)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init fip={ip}/{PREFIX_LEN} fmtu={}",
            spec.mtu
        ))
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .args(["-serial", "stdio", "-monitor", "none"])
        .arg("-netdev")
        .arg(format!(
            "tap,id=n0,ifname={tap},script=no,downscript=no,vnet_hdr=off"
        ))
        .arg("-device")
        .arg(format!(
            "virtio-net-pci,netdev=n0,mac={},romfile=",
            mac(spec.index)
        ));
        if let Some(p) = &spec.pcap {
            let _ = std::fs::remove_file(p);
            c.arg("-object").arg(format!(
                "filter-dump,id=d0,netdev=n0,file={},maxlen=65535",
                p.display()
            ));
        }
        own_group(&mut c)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join(format!("vm{}-qemu.err", spec.index)))
                    .map_err(|e| e.to_string())?,
            ));
        let mut child = c.spawn().map_err(|e| format!("qemu: {e}"))?;
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut line = Vec::new();
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        for &b in &buf[..n] {
                            if b == b'\n' {
                                let s = String::from_utf8_lossy(&line)
                                    .trim_end_matches('\r')
                                    .to_string();
                                line.clear();
                                if tx.send(s).is_err() {
                                    return;
                                }
                            } else {
                                line.push(b);
                            }
                        }
                    }
                }
            }
            if !line.is_empty() {
                let _ = tx.send(String::from_utf8_lossy(&line).to_string());
            }
        });
        Ok(Vm {
            child,
            stdin,
            lines: rx,
            console,
            ip,
            index: spec.index,
            seq: 0,
            healthy: true,
            boot_time: None,
            kernel_release: String::new(),
        })
    }

    /// Wait for the init's ready line.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<Duration, String> {
        let t0 = Instant::now();
        loop {
            let left = limit.saturating_sub(t0.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(r) = l.strip_prefix("@@READY ") {
                        self.kernel_release = r.trim().to_string();
                        let d = t0.elapsed();
                        self.boot_time = Some(d);
                        return Ok(d);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.healthy = false;
                    return Err(format!(
                        "vm{} not ready after {:.0} s; console:\n{}",
                        self.index,
                        limit.as_secs_f64(),
                        self.console_tail(30)
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.healthy = false;
                    return Err(format!(
                        "vm{}: qemu exited during boot; console:\n{}",
                        self.index,
                        self.console_tail(30)
                    ));
                }
            }
        }
    }

    /// Spawn and wait for readiness.
    pub fn boot(
        lab: &Lab,
        image: &Image,
        spec: &VmSpec,
        dir: &Path,
        limit: Duration,
    ) -> Result<Vm, String> {
        let mut vm = Vm::spawn(lab, image, spec, dir)?;
        vm.wait_ready(limit)?;
        Ok(vm)
    }

    /// The last `n` lines of the kernel console.
    pub fn console_tail(&self, n: usize) -> String {
        let t = std::fs::read_to_string(&self.console).unwrap_or_default();
        let v: Vec<&str> = t.lines().collect();
        v[v.len().saturating_sub(n)..].join("\n")
    }

    /// Run `cmd` with `sh -c` in the VM, killed there after `limit`; its output (stdout and
    /// stderr) and exit status. An error when the VM does not answer in time.
    pub fn run(&mut self, cmd: &str, limit: Duration) -> Result<VmOut, String> {
        if !self.healthy {
            return Err(format!("vm{}: command channel is out of step", self.index));
        }
        self.seq += 1;
        let n = self.seq;
        let secs = limit.as_secs().max(1);
        let line = format!(
            "echo @@B{n}; timeout -s KILL {secs} sh -c {} </dev/null 2>&1; echo \"@@E{n} $?\"\n",
            sh_quote(cmd)
        );
        let t0 = Instant::now();
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("vm{}: write: {e}", self.index))?;
        let deadline = t0 + limit + Duration::from_secs(15);
        let (mut text, mut begun) = (String::new(), false);
        let (b, e) = (format!("@@B{n}"), format!("@@E{n} "));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == b => begun = true,
                Ok(l) if l.starts_with(&e) => {
                    let code = l[e.len()..].trim().parse().unwrap_or(-1);
                    return Ok(VmOut {
                        code,
                        text,
                        elapsed: t0.elapsed(),
                    });
                }
                Ok(l) => {
                    if begun {
                        text.push_str(&l);
                        text.push('\n');
                    }
                }
                Err(err) => {
                    self.healthy = false;
                    return Err(format!(
                        "vm{}: `{cmd}` did not finish in {:.0} s ({err:?}); output so far:\n{text}\nconsole:\n{}",
                        self.index,
                        limit.as_secs_f64(),
                        self.console_tail(20)
                    ));
                }
            }
        }
    }

    /// Run `cmd` and fail unless it exits 0.
    pub fn run_ok(&mut self, cmd: &str, limit: Duration) -> Result<String, String> {
        let o = self.run(cmd, limit)?;
        if o.code == 0 {
            Ok(o.text)
        } else {
            Err(format!(
                "vm{}: `{cmd}` exited {}:\n{}",
                self.index, o.code, o.text
            ))
        }
    }

    /// Start `cmd` in the VM's background (killed there after `limit`).
    pub fn start(&mut self, cmd: &str, limit: Duration) -> Result<Job, String> {
        self.seq += 1;
        let n = self.seq;
        let secs = limit.as_secs().max(1);
        let bg = format!(
            "( timeout -s KILL {secs} sh -c {} </dev/null >/tmp/j{n}.out 2>&1; echo $? >/tmp/j{n}.t; mv /tmp/j{n}.t /tmp/j{n}.rc ) >/dev/null 2>&1 &",
            sh_quote(cmd)
        );
        self.run_ok(&bg, Duration::from_secs(10))?;
        Ok(Job(n, secs))
    }

    /// Wait for a background command; its output and exit status.
    pub fn wait_job(&mut self, job: Job) -> Result<VmOut, String> {
        let n = job.0;
        let o = self.run(
            &format!(
                "while [ ! -f /tmp/j{n}.rc ]; do sleep 0.2; done; cat /tmp/j{n}.out; exit $(cat /tmp/j{n}.rc)"
            ),
            Duration::from_secs(job.1 + 10),
        )?;
        Ok(o)
    }

    /// Wait until a TCP socket listens on `port` in the VM.
    pub fn wait_listening(&mut self, port: u16, limit: Duration) -> Result<(), String> {
        let tries = (limit.as_millis() / 200).max(1);
        self.run_ok(
            &format!(
                "i=0; while [ $i -lt {tries} ]; do netstat -ltn 2>/dev/null | grep -q ':{port} ' && exit 0; i=$((i+1)); sleep 0.2; done; exit 1"
            ),
            limit + Duration::from_secs(5),
        )
        .map(|_| ())
        .map_err(|e| format!("nothing listens on port {port} in vm{}: {e}", self.index))
    }

    /// `rdma link add rxe0 type rxe netdev eth0` and wait for the port to be active.
    pub fn add_rxe(&mut self) -> Result<String, String> {
        self.run_ok(
            "rdma link add rxe0 type rxe netdev eth0 && i=0; while [ $i -lt 50 ]; do ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE && break; i=$((i+1)); sleep 0.2; done; ibv_devinfo -d rxe0",
            Duration::from_secs(30),
        )
    }

    /// Power off and end qemu (the process this harness started).
    pub fn shutdown(&mut self) {
        if self.healthy {
            let _ = self.stdin.write_all(b"poweroff -f\n");
            let _ = self.stdin.flush();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.healthy = false;
        kill_group(&mut self.child);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.shutdown();
    }
}
