//! `ferroce bench loss --real --peer HOST:PORT` and `ferroce bench loss-peer --listen
//! IP:PORT`: the loss sweep on real packets across two hosts. A small control channel (TCP,
//! one JSON object a line) lets the host running the sweep (A) tell the other (B) each point's
//! settings; B runs the `ib_write_bw` server over the shim with its own engine, A the client,
//! and B reports its engine's counters when its server has exited.
//!
//! The exchange, A's lines first:
//! `hello {proto, ferroce}` → `hello {proto, ferroce}` (a different `proto` ends it with a
//! clear error on both sides); then per point `run {point}` → `ready` (B's server listens) or
//! `done` with an error, A runs its client, → `done {ok, error, counters}`; at the end `bye`.
//! Every read has a deadline: a dead or silent peer ends the sweep with an error, never a hang.

use ibverbs::bench::{mb_to_gbps, perftest_row, ShimLibs};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The control channel's protocol version: both ends must speak the same.
pub const PROTO: u32 = 1;
/// perftest's own TCP port (its default).
const PERFTEST_PORT: u16 = 18515;
/// The longest control line accepted (a peer sending garbage cannot fill memory).
const MAX_LINE: u64 = 64 * 1024;

/// One point's settings, as A sends them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPoint {
    /// `native` or `rocev2` (for B's log).
    pub mode: String,
    /// The verbs device (`ferroce0`, `ferroce0_rocev2`).
    pub dev: String,
    /// Loss probability on every transmit of B's engine.
    pub loss: f64,
    /// B's fault injector seed.
    pub seed: u64,
    pub size: u32,
    pub secs: u32,
    /// B's engine port and address (None: B's own `--local-pmd`, `--local-ip`).
    pub pmd: Option<String>,
    pub ip: Option<String>,
    pub perftest_port: u16,
}

/// What an engine did in one point (from its counters file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineFigures {
    /// Datagrams the engine received and sent.
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    /// Frames through its transmit fault injector and those it dropped.
    pub fault_frames: u64,
    pub fault_dropped: u64,
    /// Transport packets resent.
    pub retx_pkts: u64,
}

impl EngineFigures {
    fn from_counters(v: &Value) -> EngineFigures {
        let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        EngineFigures {
            rx_datagrams: n("/engine/rx_datagrams"),
            tx_datagrams: n("/engine/tx_datagrams"),
            fault_frames: n("/fault_tx/frames"),
            fault_dropped: n("/fault_tx/dropped_random") + n("/fault_tx/dropped_burst"),
            retx_pkts: n("/transport/retx_pkts"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
enum Msg {
    Hello {
        proto: u32,
        ferroce: String,
    },
    Run(RunPoint),
    Ready,
    Done {
        ok: bool,
        error: Option<String>,
        counters: Option<EngineFigures>,
    },
    Bye,
}

fn hello() -> Msg {
    Msg::Hello {
        proto: PROTO,
        ferroce: env!("CARGO_PKG_VERSION").into(),
    }
}

/// A stream the control channel runs over: TCP between hosts (a Unix socket pair in the
/// unit tests, which send nothing on any network).
trait Conn: Read + Write + Send {
    fn read_timeout(&self, d: Duration) -> std::io::Result<()>;
}

impl Conn for TcpStream {
    fn read_timeout(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))
    }
}

impl Conn for std::os::unix::net::UnixStream {
    fn read_timeout(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))
    }
}

/// One end of the control channel: lines out, lines in with a deadline each.
struct Channel {
    rd: BufReader<Box<dyn Conn>>,
    wr: Box<dyn Conn>,
    peer: String,
}

impl Channel {
    fn new(s: TcpStream) -> Result<Channel, String> {
        let peer = s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        let wr = s.try_clone().map_err(|e| format!("control channel: {e}"))?;
        wr.set_write_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| format!("control channel: {e}"))?;
        Ok(Channel {
            rd: BufReader::new(Box::new(s)),
            wr: Box::new(wr),
            peer,
        })
    }

    fn send(&mut self, m: &Msg) -> Result<(), String> {
        let mut line = serde_json::to_string(m).map_err(|e| e.to_string())?;
        line.push('\n');
        self.wr
            .write_all(line.as_bytes())
            .map_err(|e| format!("control channel to {}: {e}", self.peer))
    }

    /// The next message, within `wait` (`what`: the step, for the error).
    fn recv(&mut self, wait: Duration, what: &str) -> Result<Msg, String> {
        self.rd
            .get_ref()
            .read_timeout(wait.max(Duration::from_millis(1)))
            .map_err(|e| format!("control channel: {e}"))?;
        let mut line = String::new();
        match (&mut self.rd).take(MAX_LINE).read_line(&mut line) {
            Ok(0) => Err(format!(
                "control channel: {} closed the connection ({what})",
                self.peer
            )),
            Ok(_) if !line.ends_with('\n') => Err(format!(
                "control channel: {} sent a line longer than {MAX_LINE} bytes ({what})",
                self.peer
            )),
            Ok(_) => serde_json::from_str(line.trim()).map_err(|e| {
                format!(
                    "control channel: {} sent {:?}, not a control message ({e}; {what})",
                    self.peer,
                    line.trim()
                )
            }),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(format!(
                    "control channel: {} did not answer within {:.0} s ({what})",
                    self.peer,
                    wait.as_secs_f64()
                ))
            }
            Err(e) => Err(format!("control channel from {}: {e} ({what})", self.peer)),
        }
    }
}

/// Check the other end's hello.
fn check_hello(m: Msg, peer: &str) -> Result<(), String> {
    match m {
        Msg::Hello { proto, .. } if proto == PROTO => Ok(()),
        Msg::Hello { proto, ferroce } => Err(format!(
            "version mismatch: {peer} runs ferroce {ferroce} with loss-peer control protocol \
             v{proto}, this is ferroce {} with v{PROTO}: run the same ferroce on both hosts",
            env!("CARGO_PKG_VERSION")
        )),
        m => Err(format!(
            "{peer} is not a ferroce bench loss-peer (it began with {m:?})"
        )),
    }
}

/// Timeouts of the control channel's steps (shorter in tests).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub connect: Duration,
    pub hello: Duration,
    /// From `run` to `ready` (B's server started and listening).
    pub ready: Duration,
    /// Beyond the run's own seconds: for the programs to finish and B to report.
    pub slack: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            hello: Duration::from_secs(10),
            ready: Duration::from_secs(30),
            slack: Duration::from_secs(60),
        }
    }
}

/// Environment of one engine's perftest program.
fn engine_env(
    libs: &Path,
    pmd: &str,
    ip: &str,
    loss: f64,
    seed: u64,
    counters: &Path,
) -> Vec<(String, String)> {
    [
        ("LD_LIBRARY_PATH", libs.display().to_string()),
        ("FERROCE_PMD", pmd.to_string()),
        ("FERROCE_IP", ip.to_string()),
        ("FERROCE_LOSS", format!("{loss}")),
        ("FERROCE_DP__FAULT__TX__SEED", format!("{seed}")),
        ("FERROCE_DP__COUNTERS__JSON", counters.display().to_string()),
        ("FERROCE_DP__COUNTERS__INTERVAL_MS", "50".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `ib_write_bw` (server when `server_host` is None) under `timeout`, output piped.
fn spawn_write_bw(
    p: &RunPoint,
    server_host: Option<&str>,
    env: &[(String, String)],
) -> Result<Child, String> {
    let limit = p.secs as u64 + 60;
    let mut c = Command::new("timeout");
    c.args(["-k", "5", &limit.to_string(), "/usr/bin/ib_write_bw"])
        .args(["-d", &p.dev, "-x", "1", "-F"])
        .args(["-s", &p.size.to_string(), "-D", &p.secs.max(1).to_string()])
        .args(["-p", &p.perftest_port.to_string()])
        .args(server_host)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().map_err(|e| format!("ib_write_bw: {e}"))
}

/// Wait for `c` until `deadline` (then kill it, by its pid); its exit and output.
fn finish(mut c: Child, deadline: Instant) -> (Option<i32>, String) {
    // Drain the pipes on threads: a chatty program must not block on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(c.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let err = drain(c.stderr.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let code = loop {
        match c.try_wait() {
            Ok(Some(s)) => break s.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
        }
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    (code, text)
}

/// Whether a TCP socket listens on `port` in this network namespace.
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && format!("{} ", f[1]).ends_with(&hex) && f[3] == "0A"
            })
        })
    })
}

fn read_figures(path: &Path) -> Option<EngineFigures> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some(EngineFigures::from_counters(&v))
}

fn tmp_path(what: &str, n: u32) -> PathBuf {
    std::env::temp_dir().join(format!(
        "ferroce-loss-peer-{}-{what}-{n}.json",
        std::process::id()
    ))
}

// ---------------------------------------------------------------------------------------
// B: the peer.

/// `ferroce bench loss-peer --listen IP:PORT`: serve sweeps (one with `--once`).
pub fn serve(a: &crate::args::BenchArgs) -> Result<(), String> {
    let listen = a
        .listen
        .as_deref()
        .ok_or("bench loss-peer needs --listen IP:PORT (the control channel's address)")?;
    let libs = ShimLibs::new(a.lib.as_deref())?;
    let l = TcpListener::bind(listen).map_err(|e| format!("--listen {listen}: {e}"))?;
    println!(
        "ferroce bench loss-peer: listening on {} (control protocol v{PROTO}, ferroce {})",
        l.local_addr().map_or(listen.to_string(), |a| a.to_string()),
        env!("CARGO_PKG_VERSION")
    );
    let defaults = (a.local_pmd.clone(), a.local_ip.clone());
    let mut runs = 0;
    loop {
        let (s, from) = l.accept().map_err(|e| format!("accept: {e}"))?;
        println!("sweep from {from}");
        match session(s, &libs.0, &defaults, &mut runs) {
            Ok(()) => println!("sweep from {from} done"),
            Err(e) => eprintln!("sweep from {from} ended: {e}"),
        }
        if a.once {
            return Ok(());
        }
    }
}

fn session(
    s: TcpStream,
    libs: &Path,
    defaults: &(Option<String>, Option<String>),
    runs: &mut u32,
) -> Result<(), String> {
    let mut ch = Channel::new(s)?;
    let first = ch.recv(Duration::from_secs(10), "hello")?;
    ch.send(&hello())?;
    check_hello(first, &ch.peer)?;
    loop {
        // A runs its simulator figures only after the last point; between points it waits
        // for nothing, so a long silence means it is gone.
        match ch.recv(Duration::from_secs(600), "waiting for the next point")? {
            Msg::Run(p) => {
                *runs += 1;
                let done = run_server(&mut ch, libs, defaults, &p, *runs)?;
                ch.send(&done)?;
            }
            Msg::Bye => return Ok(()),
            m => return Err(format!("unexpected {m:?}")),
        }
    }
}

/// One point on B: start the server, say `ready`, wait for it; the `done` to send.
fn run_server(
    ch: &mut Channel,
    libs: &Path,
    defaults: &(Option<String>, Option<String>),
    p: &RunPoint,
    n: u32,
) -> Result<Msg, String> {
    let fail = |e: String| Msg::Done {
        ok: false,
        error: Some(e),
        counters: None,
    };
    let (Some(pmd), Some(ip)) = (
        p.pmd.clone().or_else(|| defaults.0.clone()),
        p.ip.clone().or_else(|| defaults.1.clone()),
    ) else {
        return Ok(fail(
            "the peer has no engine port or address: start it with --local-pmd and \
             --local-ip, or pass --peer-pmd and --peer-ip to the sweep"
                .into(),
        ));
    };
    println!(
        "point {n}: {} loss {:.2} % size {} for {} s on {pmd} as {ip}",
        p.mode,
        p.loss * 100.0,
        p.size,
        p.secs
    );
    let counters = tmp_path("counters", n);
    let _ = std::fs::remove_file(&counters);
    let env = engine_env(libs, &pmd, &ip, p.loss, p.seed, &counters);
    let mut child = match spawn_write_bw(p, None, &env) {
        Ok(c) => c,
        Err(e) => return Ok(fail(e)),
    };
    let t0 = Instant::now();
    while !listening(p.perftest_port) {
        if t0.elapsed() > Duration::from_secs(20) || child.try_wait().ok().flatten().is_some() {
            let (code, text) = finish(child, Instant::now());
            return Ok(fail(format!(
                "the ib_write_bw server did not start listening on port {} (exit {code:?}):\n{text}",
                p.perftest_port
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(e) = ch.send(&Msg::Ready) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let (code, text) = finish(
        child,
        Instant::now() + Duration::from_secs(p.secs as u64 + 60),
    );
    let figures = read_figures(&counters);
    let _ = std::fs::remove_file(&counters);
    let ok = code == Some(0) && perftest_row(&text).is_some();
    println!("point {n}: server exit {code:?}, engine {figures:?}");
    Ok(Msg::Done {
        ok,
        error: (!ok).then(|| format!("ib_write_bw server exit {code:?}:\n{text}")),
        counters: figures,
    })
}

// ---------------------------------------------------------------------------------------
// A: the sweep's end.

/// A's settings for the remote sweep.
pub struct Remote {
    ch: Option<Channel>,
    host: String,
    libs: ShimLibs,
    pmd: String,
    ip: String,
    peer_pmd: Option<String>,
    peer_ip: Option<String>,
    seed: u64,
    t: Timeouts,
    runs: u32,
}

/// One point's outcome on both hosts.
pub struct RemoteRun {
    pub gbps: Result<f64, String>,
    pub local: Option<EngineFigures>,
    pub peer: Option<EngineFigures>,
}

/// Connect to `peer` (HOST:PORT) and exchange hellos.
fn connect(peer: &str, t: Timeouts) -> Result<Channel, String> {
    let addrs: Vec<_> = peer
        .to_socket_addrs()
        .map_err(|e| format!("--peer {peer}: {e} (expected HOST:PORT)"))?
        .collect();
    let a = addrs
        .first()
        .ok_or_else(|| format!("--peer {peer}: no address"))?;
    let s = TcpStream::connect_timeout(a, t.connect).map_err(|e| {
        format!("--peer {peer}: {e} (is `ferroce bench loss-peer --listen` running there?)")
    })?;
    greet(Channel::new(s)?, t)
}

/// A's side of the hello exchange.
fn greet(mut ch: Channel, t: Timeouts) -> Result<Channel, String> {
    ch.send(&hello())?;
    let m = ch.recv(t.hello, "hello")?;
    let peer = ch.peer.clone();
    check_hello(m, &peer)?;
    Ok(ch)
}

impl Remote {
    pub fn new(a: &crate::args::BenchArgs, peer: &str, t: Timeouts) -> Result<Remote, String> {
        let (Some(pmd), Some(ip)) = (a.local_pmd.clone(), a.local_ip.clone()) else {
            return Err(
                "--peer needs --local-pmd VDEV and --local-ip IP (this host's engine \
                        port and address)"
                    .into(),
            );
        };
        let host = peer
            .rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
            .ok_or_else(|| format!("--peer {peer}: expected HOST:PORT"))?;
        let libs = ShimLibs::new(a.lib.as_deref())?;
        let ch = connect(peer, t)?;
        Ok(Remote {
            ch: Some(ch),
            host,
            libs,
            pmd,
            ip,
            peer_pmd: a.peer_pmd.clone(),
            peer_ip: a.peer_ip.clone(),
            seed: a.seed,
            t,
            runs: 0,
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "this host's engine on {} as {}, the peer's at {} ({})",
            self.pmd,
            self.ip,
            self.host,
            match (&self.peer_pmd, &self.peer_ip) {
                (Some(p), Some(i)) => format!("on {p} as {i}"),
                _ => "its own port and address".into(),
            }
        )
    }

    /// One point: B's server, then A's client. A lost control channel fails this point and
    /// every later one at once.
    pub fn run(&mut self, mode: &str, dev: &str, size: u32, secs: u32, loss: f64) -> RemoteRun {
        self.runs += 1;
        let p = RunPoint {
            mode: mode.into(),
            dev: dev.into(),
            loss,
            // Different fault sequences at the two ends, both from --seed.
            seed: self
                .seed
                .wrapping_mul(2)
                .wrapping_add(self.runs as u64 * 16 + 1),
            size,
            secs,
            pmd: self.peer_pmd.clone(),
            ip: self.peer_ip.clone(),
            perftest_port: PERFTEST_PORT,
        };
        let r = self.point(&p);
        if r.is_err() {
            self.ch = None;
        }
        match r {
            Ok(x) => x,
            Err(e) => RemoteRun {
                gbps: Err(e),
                local: None,
                peer: None,
            },
        }
    }

    /// Err: the control channel failed (the run cannot go on); Ok: the point's outcome.
    fn point(&mut self, p: &RunPoint) -> Result<RemoteRun, String> {
        let t = self.t;
        let ch = self
            .ch
            .as_mut()
            .ok_or("the control channel was lost in an earlier point")?;
        ch.send(&Msg::Run(p.clone()))?;
        match ch.recv(t.ready, "waiting for the peer's server")? {
            Msg::Ready => {}
            Msg::Done { error, .. } => {
                return Ok(RemoteRun {
                    gbps: Err(format!(
                        "the peer could not start: {}",
                        error.unwrap_or_default()
                    )),
                    local: None,
                    peer: None,
                })
            }
            m => return Err(format!("the peer sent {m:?}, not ready")),
        }
        let counters = tmp_path("local", self.runs);
        let _ = std::fs::remove_file(&counters);
        let env = engine_env(
            &self.libs.0,
            &self.pmd,
            &self.ip,
            p.loss,
            p.seed + 8,
            &counters,
        );
        let run_end = Instant::now() + Duration::from_secs(p.secs as u64) + t.slack;
        let client = spawn_write_bw(p, Some(&self.host), &env);
        let local_result = match client {
            Ok(c) => {
                let (code, text) = finish(c, run_end);
                match perftest_row(&text) {
                    Some(r) if code == Some(0) => r[3]
                        .parse::<f64>()
                        .map(mb_to_gbps)
                        .map_err(|_| format!("ib_write_bw printed {r:?}")),
                    _ => Err(format!("ib_write_bw client exit {code:?}:\n{text}")),
                }
            }
            Err(e) => Err(e),
        };
        let local = read_figures(&counters);
        let _ = std::fs::remove_file(&counters);
        // B's server ends when the client does (or at its own limit): its report follows.
        let wait = run_end.saturating_duration_since(Instant::now()) + Duration::from_secs(10);
        let (peer_ok, peer_err, peer) = match ch.recv(wait, "waiting for the peer's report")? {
            Msg::Done {
                ok,
                error,
                counters,
            } => (ok, error, counters),
            m => return Err(format!("the peer sent {m:?}, not its report")),
        };
        let gbps = match local_result {
            Ok(_) if !peer_ok => Err(format!(
                "the peer's server failed: {}",
                peer_err.unwrap_or_default()
            )),
            r => r,
        };
        Ok(RemoteRun { gbps, local, peer })
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(ch) = self.ch.as_mut() {
            let _ = ch.send(&Msg::Bye);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(300),
            hello: Duration::from_millis(300),
            ready: Duration::from_millis(300),
            slack: Duration::from_millis(300),
        }
    }

    /// A "peer" at the other end of a Unix socket pair that answers the hello with `answer`
    /// (None: stays silent); A's end of the channel.
    fn fake_peer(answer: Option<&'static str>) -> (Channel, std::thread::JoinHandle<()>) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ch = Channel {
            rd: BufReader::new(Box::new(a.try_clone().unwrap())),
            wr: Box::new(a),
            peer: "fake".into(),
        };
        let h = std::thread::spawn(move || {
            let mut r = BufReader::new(b.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            if let Some(a) = answer {
                let _ = (&b).write_all(a.as_bytes());
            }
            std::thread::sleep(Duration::from_millis(800));
        });
        (ch, h)
    }

    #[test]
    fn a_peer_of_another_protocol_version_is_refused_by_name() {
        let (ch, h) = fake_peer(Some(
            "{\"msg\":\"hello\",\"proto\":99,\"ferroce\":\"9.9.9\"}\n",
        ));
        let e = greet(ch, quick()).err().expect("refused");
        assert!(
            e.contains("version mismatch") && e.contains("v99") && e.contains("9.9.9"),
            "{e}"
        );
        h.join().unwrap();
    }

    #[test]
    fn a_silent_peer_times_out_instead_of_hanging() {
        let (ch, h) = fake_peer(None);
        let t0 = Instant::now();
        let e = greet(ch, quick()).err().expect("timed out");
        assert!(e.contains("did not answer"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }

    #[test]
    fn something_else_on_the_port_is_named_as_such() {
        let (ch, h) = fake_peer(Some("SSH-2.0-OpenSSH_9.6\n"));
        let e = greet(ch, quick()).err().expect("refused");
        assert!(e.contains("not a control message"), "{e}");
        h.join().unwrap();
    }

    #[test]
    fn messages_round_trip_as_one_line_each() {
        let p = RunPoint {
            mode: "native".into(),
            dev: "ferroce0".into(),
            loss: 0.01,
            seed: 3,
            size: 65536,
            secs: 2,
            pmd: None,
            ip: Some("198.18.0.2".into()),
            perftest_port: PERFTEST_PORT,
        };
        let s = serde_json::to_string(&Msg::Run(p.clone())).unwrap();
        assert!(!s.contains('\n') && s.contains("\"msg\":\"run\""), "{s}");
        assert_eq!(serde_json::from_str::<Msg>(&s).unwrap(), Msg::Run(p));
    }

    #[test]
    fn counters_give_the_figures() {
        let v: Value = serde_json::json!({
            "engine": {"rx_datagrams": 10, "tx_datagrams": 20},
            "fault_tx": {"frames": 21, "dropped_random": 1, "dropped_burst": 0},
            "transport": {"retx_pkts": 2},
        });
        let f = EngineFigures::from_counters(&v);
        assert_eq!(
            (
                f.rx_datagrams,
                f.tx_datagrams,
                f.fault_frames,
                f.fault_dropped,
                f.retx_pkts
            ),
            (10, 20, 21, 1, 2)
        );
    }
}
