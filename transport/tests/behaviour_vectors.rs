//! Behavioural vectors (spec/vectors/behaviour/*.vec, format in its README.md): scripted packet
//! exchanges with the responses a conforming endpoint gives, replayed against a real
//! `Endpoint` (the implementation under test) by a scripted peer.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::script::{
    self, access_bits, describe_sent, matches, num, Fields, Step, Values,
};
use ferroce_transport::wire::Packet;
use ferroce_transport::*;
use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The scripted peer's address; the endpoint under test's id is learnt from its OPEN_ACK.
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Time between two steps of a script: 1 µs.
const STEP_NS: u64 = 1_000;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors/behaviour")
}

/// The replay of one script: the endpoint under test, its memory, the connection ids.
struct Replay {
    ep: Endpoint,
    mem: Regions,
    now: u64,
    /// The endpoint's own id of the connection (learnt from OPEN_ACK), 0 before.
    conn: u32,
    /// Region keys in registration order (`R0`, `R1`, ...).
    keys: Vec<u32>,
    /// Address of the next region.
    next_addr: u64,
    buf: Vec<u8>,
    /// Opcodes the script does not want to see (e.g. hint requests).
    ignore: Vec<String>,
}

impl Values for Replay {
    fn conn(&self) -> u32 {
        self.conn
    }

    fn value(&self, k: &str, v: &str) -> Result<u64, String> {
        match v {
            "CONN" => Ok(self.conn as u64),
            _ if k == "rkey" && v.starts_with('R') => {
                let i = num(&v[1..])? as usize;
                self.keys
                    .get(i)
                    .map(|k| *k as u64)
                    .ok_or_else(|| format!("no region {v}"))
            }
            _ => num(v),
        }
    }
}

impl Replay {
    /// The endpoint's packets until it has nothing more to send, described as fields.
    fn drain(&mut self) -> Vec<Fields> {
        let mut out = Vec::new();
        while let Some(t) = self
            .ep
            .poll_transmit(self.now, &mut self.buf, &mut self.mem)
        {
            let Ok(p) = Packet::parse(&self.buf[..t.len]) else {
                out.push(("UNPARSEABLE".into(), BTreeMap::new()));
                continue;
            };
            let (op, m) = describe_sent(&p, t.src_port);
            if op == "OPEN_ACK" && self.conn == 0 {
                self.conn = num(&m["src_conn"]).unwrap_or(0) as u32;
                self.on_connected();
            }
            if !self.ignore.contains(&op) {
                out.push((op, m));
            }
        }
        out
    }

    fn on_connected(&mut self) {
        // One stream, id 1 at both ends, protection domain 1.
        self.ep
            .create_stream(ConnId(self.conn), 1, 1, 1)
            .expect("create stream 1");
    }
}

/// Replay one script; `Err` says which line failed and why.
fn replay(text: &str) -> Result<(), String> {
    let script = script::parse(text)?;
    let mut cfg = EndpointConfig {
        seed: 7,
        ..EndpointConfig::default()
    };
    cfg.conn.paths = 1;
    cfg.conn.mtu = 64;
    let mut r = Replay {
        ep: Endpoint::new(cfg),
        mem: Regions::new(),
        now: 1_000_000,
        conn: 0,
        keys: Vec::new(),
        next_addr: 0x10_000,
        buf: vec![0; 4096],
        ignore: Vec::new(),
    };
    let mut pending: Vec<Fields> = Vec::new();
    for (n, step) in &script.steps {
        let at = |e: String| format!("line {n}: {e}");
        match step {
            Step::Name(_) => {}
            Step::Ignore(ops) => r.ignore = ops.clone(),
            Step::Region(f) => {
                let len = num(f.get("len").map(String::as_str).unwrap_or("64")).map_err(at)?;
                let acc =
                    access_bits(f.get("access").map(String::as_str).unwrap_or("")).map_err(at)?;
                let addr = f
                    .get("addr")
                    .map(|a| num(a))
                    .transpose()
                    .map_err(at)?
                    .unwrap_or(r.next_addr);
                r.next_addr = (addr + len + 0xfff) & !0xfff;
                let k = r.mem.register(1, addr, len as usize, acc);
                r.keys.push(k);
            }
            Step::Recv(len) => {
                let len = *len;
                let addr = r.next_addr;
                r.next_addr = (addr + len + 0xfff) & !0xfff;
                let lkey = r.mem.register(1, addr, len as usize, access::LOCAL_WRITE);
                let wr = RecvWr {
                    wr_id: addr,
                    sgl: [Sge {
                        lkey,
                        addr,
                        len: len as u32,
                    }]
                    .into_iter()
                    .collect(),
                };
                r.ep.post_recv(ConnId(r.conn), 1, wr)
                    .map_err(|e| at(format!("post_recv: {e:?}")))?;
            }
            Step::Send(line) => {
                if !pending.is_empty() {
                    return Err(at(format!(
                        "unexpected output before this send: {pending:?}"
                    )));
                }
                let (d, sport) = script::packet(&r, line).map_err(at)?;
                r.ep.handle_datagram(r.now, PEER, sport, false, &d, &mut r.mem);
                pending = r.drain();
                r.now += STEP_NS;
            }
            Step::Wait(ns) => {
                let until = r.now + ns;
                while let Some(t) = r.ep.poll_timeout().filter(|t| *t <= until) {
                    r.now = t.max(r.now);
                    r.ep.handle_timeout(r.now);
                    pending.extend(r.drain());
                }
                r.now = until;
            }
            Step::Expect(None) => {
                if !pending.is_empty() {
                    return Err(at(format!("want nothing, got {pending:?}")));
                }
            }
            Step::Expect(Some(want)) => {
                if pending.is_empty() {
                    return Err(at(format!("want {}, got nothing", want.0)));
                }
                let got = pending.remove(0);
                matches(&r, want, &got).map_err(|e| at(format!("{e}; got {got:?}")))?;
            }
        }
    }
    if !pending.is_empty() {
        return Err(format!("output left unexpected at the end: {pending:?}"));
    }
    Ok(())
}

// checks: [VEC-3]
#[test]
fn behaviour_vectors() {
    let mut files: Vec<PathBuf> = fs::read_dir(dir())
        .expect("spec/vectors/behaviour")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 14,
        "only {} behavioural vectors",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        if !text.lines().any(|l| l.trim() == format!("name: {name}")) {
            failures.push(format!("{name}: its name: line is not the file name"));
        }
        if let Err(e) = replay(&text) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The runner itself: a script whose expectation is wrong must fail.
#[test]
fn a_wrong_expectation_fails() {
    let good =
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: OPEN_ACK dst_conn=0x0a0a0a0a paths=1\n";
    replay(good).unwrap();
    for bad in [
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: OPEN_ACK paths=2\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: nothing\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: CLOSE_ACK\n",
    ] {
        assert!(replay(bad).is_err(), "passed: {bad}");
    }
}
