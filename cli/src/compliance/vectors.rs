//! `ferroce compliance --vectors DIR`: the behavioural vectors (spec/vectors/behaviour/)
//! replayed over UDP against a target serving the compliance profile, each reported with the
//! requirements of its `# checks:` line.
//!
//! A vector's endpoint is set up by the script (its regions, receives, `mtu` 64, timers to the
//! nanosecond); a remote target is set up by the profile. So a vector replays when the
//! profile can stand in for what it declares, and is not applicable otherwise, with the reason:
//! - each `region:` is mapped to a distinct profile region with at least its access rights and
//!   length (`R0` → that region's key, `raddr` rebased onto it);
//! - `recv:` is not applicable (the profile keeps its own receives posted, so `rsn`s differ),
//!   nor is `wait:` (ns timers: the suite cannot time them, spec/compliance.md §3), nor an
//!   `expect:` naming `mtu` (the endpoint's own, 64 in a vector);
//! - the script's connection id (its first OPEN's `src_conn`) is replaced by a fresh one, so
//!   vectors and cases never share a connection on the target.
//!
//! The target's own PROBEs (path probing, hint requests) and resent copies are not compared:
//! the spec lets a target send them at any time. Answers are attributed by `dst_conn`.

use super::peer::Rx;
use super::{CaseReport, Env, Fail, Peer};
use ferroce_transport::script::{self, Fields, Script, Step, Values};
use ferroce_transport::wire::Opcode;
use ferroce_workload::compliance as profile;
use std::path::Path;
use std::time::{Duration, Instant};

/// A declared region mapped onto a profile region.
struct Mapped {
    decl_addr: u64,
    len: u64,
    key: u32,
    addr: u64,
}

/// What the script's symbols stand for against this target.
struct Vals {
    /// The script's own connection id and the fresh one standing in for it.
    script_conn: u32,
    me: u32,
    /// The target's id (from its OPEN_ACK).
    them: u32,
    regions: Vec<Mapped>,
}

impl Values for Vals {
    fn conn(&self) -> u32 {
        self.them
    }

    fn value(&self, k: &str, v: &str) -> Result<u64, String> {
        if v == "CONN" {
            return Ok(self.them as u64);
        }
        if k == "rkey" && v.starts_with('R') {
            let i = script::num(&v[1..])? as usize;
            return self
                .regions
                .get(i)
                .map(|r| r.key as u64)
                .ok_or_else(|| format!("no region {v}"));
        }
        let n = script::num(v)?;
        Ok(match k {
            "src_conn" | "dst_conn" if n == self.script_conn as u64 => self.me as u64,
            "raddr" => self
                .regions
                .iter()
                .find(|r| n >= r.decl_addr && n <= r.decl_addr + r.len)
                .map_or(n, |r| r.addr + (n - r.decl_addr)),
            _ => n,
        })
    }
}

fn key_of(keys: &profile::ProfileKeys, name: &str) -> u32 {
    match name {
        "write" => keys.write,
        "read" => keys.read,
        "atomic" => keys.atomic,
        _ => keys.recv,
    }
}

/// Why the vector cannot replay against a profile target, or its region mapping.
fn plan(s: &Script, keys: &profile::ProfileKeys) -> Result<Vec<Mapped>, String> {
    let mut regions = Vec::new();
    let mut used: Vec<&str> = Vec::new();
    let mut next_addr = 0x10_000u64;
    for (n, step) in &s.steps {
        match step {
            Step::Recv(_) => {
                return Err(format!(
                    "posts its own receives (line {n}); the profile keeps {} of {} B posted",
                    profile::RECVS,
                    profile::RECV_LEN
                ))
            }
            Step::Wait(_) => {
                return Err(format!(
                    "times the target's timers in ns (wait:, line {n}); a peer on kernel \
                     sockets cannot (spec/compliance.md §3)"
                ))
            }
            Step::Expect(Some((_, f))) if f.contains_key("mtu") => {
                return Err(format!(
                    "expects the endpoint's own mtu (line {n}: the vector's endpoint has 64, \
                     the profile's is the target's)"
                ))
            }
            Step::Region(f) => {
                let g = |k: &str, d: &str| f.get(k).map_or(d.to_string(), |v| v.clone());
                let len = script::num(&g("len", "64")).map_err(|e| format!("line {n}: {e}"))?;
                let acc =
                    script::access_bits(&g("access", "")).map_err(|e| format!("line {n}: {e}"))?;
                let decl_addr = match f.get("addr") {
                    Some(a) => script::num(a).map_err(|e| format!("line {n}: {e}"))?,
                    None => next_addr,
                };
                next_addr = (decl_addr + len + 0xfff) & !0xfff;
                let r = profile::REGIONS
                    .iter()
                    .find(|r| r.access & acc == acc && r.len >= len && !used.contains(&r.name))
                    .ok_or_else(|| {
                        format!(
                            "declares a region (line {n}: {} B, access {}) no unused profile \
                             region stands in for",
                            len,
                            g("access", "")
                        )
                    })?;
                used.push(r.name);
                regions.push(Mapped {
                    decl_addr,
                    len,
                    key: key_of(keys, r.name),
                    addr: r.addr,
                });
            }
            _ => {}
        }
    }
    Ok(regions)
}

/// The script's own connection id: its first OPEN's `src_conn`.
fn script_conn(s: &Script) -> u32 {
    s.steps
        .iter()
        .find_map(|(_, st)| match st {
            Step::Send(l) => {
                let (op, f) = script::fields(l).ok()?;
                (op == "OPEN").then(|| f.get("src_conn").and_then(|v| script::num(v).ok()))?
            }
            _ => None,
        })
        .unwrap_or(0) as u32
}

fn fields_of(r: &Rx) -> Fields {
    match r.pkt() {
        Some(p) => script::describe_sent(&p, r.sport),
        None => ("UNPARSEABLE".into(), Default::default()),
    }
}

fn show(f: &Fields) -> String {
    let kv: Vec<String> = f.1.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} {}", f.0, kv.join(" "))
}

/// Replay one vector: Ok(notes) or the failure (naming the vector's requirements).
fn replay(env: &Env, s: &Script, regions: Vec<Mapped>) -> Result<Vec<String>, Fail> {
    let req = s.checks.join(" ");
    let mut p = Peer::new(env);
    p.auto = false;
    let mut v = Vals {
        script_conn: script_conn(s),
        me: p.me,
        them: 0,
        regions,
    };
    let mut ignore: Vec<String> = Vec::new();
    // The target's own traffic a vector never describes.
    let own = |r: &Rx, ignore: &[String]| {
        r.is(Opcode::Probe) || r.dup || ignore.contains(&fields_of(r).0)
    };
    let mut compared = 0;
    for (n, step) in &s.steps {
        match step {
            Step::Ignore(ops) => ignore = ops.clone(),
            Step::Send(line) => {
                let (bytes, sport) = script::packet(&v, line)
                    .map_err(|e| Fail::setup(format!("{}: line {n}: {e}", s.name)))?;
                p.send(&bytes, sport)?;
            }
            Step::Expect(None) => {
                let extra: Vec<Rx> = p.quiet().into_iter().filter(|r| !own(r, &ignore)).collect();
                if let Some(r) = extra.first() {
                    return Err(Fail::new(
                        &req,
                        format!("line {n}: nothing (more)"),
                        show(&fields_of(r)),
                    ));
                }
                compared += 1;
            }
            Step::Expect(Some(want)) => {
                let ig = ignore.clone();
                let got = p.wait_for(env.answer, |r| !own(r, &ig)).ok_or_else(|| {
                    Fail::new(
                        &req,
                        format!("line {n}: {}", show(want)),
                        format!("nothing within {} ms", env.answer.as_millis()),
                    )
                })?;
                let f = fields_of(&got);
                if f.0 == "OPEN_ACK" && v.them == 0 {
                    v.them =
                        f.1.get("src_conn")
                            .and_then(|x| x.parse().ok())
                            .unwrap_or(0);
                }
                script::matches(&v, want, &f).map_err(|e| {
                    Fail::new(
                        &req,
                        format!("line {n}: {}", show(want)),
                        format!("{e}: {}", show(&f)),
                    )
                })?;
                compared += 1;
            }
            _ => {}
        }
    }
    // Leave the target's connection as a finished case would: nothing more is read from it.
    std::thread::sleep(Duration::from_millis(5));
    Ok(vec![format!("{compared} expectations met")])
}

/// The `.vec` files of `dir`, sorted.
pub fn files(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("--vectors {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(format!("--vectors {}: no .vec files", dir.display()));
    }
    Ok(v)
}

/// Replay every vector of `dir` (the report's `vector:NAME` entries).
pub fn run(env: &Env, dir: &Path) -> Result<Vec<CaseReport>, String> {
    let mut out = Vec::new();
    for f in files(dir)? {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let s = script::parse(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        let t0 = Instant::now();
        let (result, failure, notes) = match plan(&s, &env.keys) {
            Err(why) => ("n/a", None, vec![why]),
            Ok(regions) => match replay(env, &s, regions) {
                Ok(n) => ("pass", None, n),
                Err(f) => ("fail", Some(f), vec![]),
            },
        };
        out.push(CaseReport {
            name: format!("vector:{}", s.name),
            requirements: s.checks.clone(),
            result: result.into(),
            failure,
            notes,
            elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors/behaviour")
    }

    /// Which vectors a profile target can replay, and why the others cannot.
    #[test]
    fn the_profile_stands_in_for_the_vectors_that_need_no_special_set_up() {
        let keys = profile::ProfileKeys {
            write: 11,
            read: 12,
            atomic: 13,
            recv: 14,
        };
        let mut replayable = Vec::new();
        let mut na = Vec::new();
        for f in files(&dir()).unwrap() {
            let s = script::parse(&std::fs::read_to_string(&f).unwrap()).unwrap();
            assert!(!s.checks.is_empty(), "{}: no checks", s.name);
            match plan(&s, &keys) {
                Ok(r) => {
                    for m in &r {
                        assert_eq!((m.key, m.addr), (11, profile::WRITE.addr), "{}", s.name);
                    }
                    replayable.push(s.name)
                }
                Err(why) => na.push((s.name, why)),
            }
        }
        assert!(replayable.len() >= 9, "{replayable:?} / {na:?}");
        for n in [
            "reflection",
            "probe",
            "close",
            "write_ack_duplicate",
            "out_of_window",
        ] {
            assert!(replayable.iter().any(|r| r == n), "{n}: {na:?}");
        }
        let why = |n: &str| na.iter().find(|x| x.0 == n).map(|x| x.1.clone()).unwrap();
        assert!(why("consumed_receive").contains("receives"));
        assert!(why("delayed_ack").contains("ns"));
        assert!(why("open_duplicate").contains("mtu"));
        assert!(why("nack_precedence").contains("REMOTE_WRITE|REMOTE_ATOMIC"));
    }

    #[test]
    fn symbols_map_onto_the_profile_and_the_fresh_connection() {
        let v = Vals {
            script_conn: 0x0a0a_0a0a,
            me: 77,
            them: 5,
            regions: vec![Mapped {
                decl_addr: 0x9000,
                len: 64,
                key: 0xabc,
                addr: 0x1000_0000,
            }],
        };
        assert_eq!(v.value("src_conn", "0x0a0a0a0a").unwrap(), 77);
        assert_eq!(v.value("dst_conn", "0x0a0a0a0a").unwrap(), 77);
        assert_eq!(v.value("dst_conn", "0x12345678").unwrap(), 0x1234_5678);
        assert_eq!(v.value("src_conn", "CONN").unwrap(), 5);
        assert_eq!(v.value("rkey", "R0").unwrap(), 0xabc);
        assert_eq!(v.value("raddr", "0x9040").unwrap(), 0x1000_0040);
        assert_eq!(v.value("psn", "0x9040").unwrap(), 0x9040);
        assert!(v.value("rkey", "R1").is_err());
    }
}
