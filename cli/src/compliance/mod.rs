//! `ferroce compliance`: a compliance suite for any native ferroce implementation over UDP
//! (spec/compliance.md). It plays the peer with crafted packets from kernel UDP sockets (no
//! DPDK, no root) and checks what the target sends back against the spec; each case names
//! the requirements it checks (spec/requirements.md) and passes, fails (with the requirement,
//! what was expected and what came back) or is not applicable.

mod cases;
mod cases_data;
mod cases_remote;
mod peer;
mod vectors;

pub use peer::{Net, Peer};

use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

pub use ferroce_workload::compliance::ProfileKeys;

pub const USAGE: &str = "\
usage: ferroce compliance --target IP[:PORT] --rkeys KEYS [--bind IP[:PORT]] [--json]
                          [--case NAME]... [--list] [--trace] [--answer-ms N] [--quiet-ms N]
                          [--vectors DIR [--vectors-only]]

  --target IP[:PORT]  the implementation under test (native port 4792 by default); it must
                      run the compliance target profile of spec/compliance.md (ferroce's
                      DPDK engine: `ferroce dataplane run --set workload.role=compliance`)
  --rkeys KEYS        the keys of the target's profile regions, as the target prints them:
                      write=0x..,read=0x..,atomic=0x..,recv=0x..
  --bind IP[:PORT]    where the suite receives the target's packets (default 0.0.0.0:4792:
                      targets send everything to the native port)
  --case NAME         run only this case (repeatable); --list prints the cases
  --vectors DIR       also replay the behavioural vectors of DIR (spec/vectors/behaviour):
                      each as `vector:NAME` with its requirements; pass, fail, or n/a with
                      the reason (what it sets up that the profile does not offer)
  --vectors-only      replay the vectors only, no cases
  --json              print the report as JSON instead of a table
  --trace             print every datagram sent and received (stderr)
  --answer-ms N       how long to wait for an answer the spec requires (default 1000)
  --quiet-ms N        how long \"no answer\" is watched for (default 100)

exit status: 0 every case passed or is not applicable, 1 a case failed, 2 usage or set-up error";

/// What every case gets: the sockets, the target's keys, the waits.
pub struct Env {
    pub net: Net,
    pub keys: ProfileKeys,
    /// Longest wait for an answer the spec requires.
    pub answer: Duration,
    /// How long the suite watches for an answer that must not come.
    pub quiet: Duration,
    /// Print every datagram sent and received on stderr (`--trace`).
    pub trace: bool,
    pub t0: Instant,
}

/// A failed check: the requirement, what the spec wants, what came.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Fail {
    pub requirement: String,
    pub expected: String,
    pub got: String,
}

impl Fail {
    pub fn new(req: &str, expected: impl Into<String>, got: impl Into<String>) -> Fail {
        Fail {
            requirement: req.to_string(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// The suite could not do its part (a socket error): no requirement.
    pub fn setup(what: String) -> Fail {
        Fail::new("-", "the suite's sockets to work", what)
    }
}

/// `Err(Fail)` unless `ok`.
pub fn check(
    req: &str,
    ok: bool,
    expected: impl Into<String>,
    got: impl FnOnce() -> String,
) -> Result<(), Fail> {
    if ok {
        Ok(())
    } else {
        Err(Fail::new(req, expected, got()))
    }
}

/// How a case ended when nothing failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Passed; notes say what was measured or what did not apply.
    Pass(Vec<String>),
    NotApplicable(String),
}

pub type CaseFn = fn(&Env) -> Result<Verdict, Fail>;

/// One case of the suite.
pub struct Case {
    pub name: &'static str,
    pub what: &'static str,
    /// The requirements it checks (its `checks:` marker says the same, for scripts/req-index).
    pub reqs: &'static [&'static str],
    pub run: CaseFn,
}

pub fn all_cases() -> Vec<Case> {
    let mut v = cases::cases();
    v.extend(cases_data::cases());
    v.extend(cases_remote::cases());
    v
}

/// One case's result, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    pub name: String,
    pub requirements: Vec<String>,
    /// "pass", "fail" or "n/a".
    pub result: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Fail>,
    pub notes: Vec<String>,
    pub elapsed_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub target: String,
    pub passed: usize,
    pub failed: usize,
    pub not_applicable: usize,
    pub cases: Vec<CaseReport>,
}

/// Run `names` (all cases when empty, none with `only_vectors`) against the target, then the
/// behavioural vectors of `vectors`.
pub fn run(
    env: &Env,
    names: &[String],
    vectors: Option<&std::path::Path>,
    only_vectors: bool,
) -> Result<Report, String> {
    let cases = all_cases();
    for n in names {
        if !cases.iter().any(|c| c.name == n) {
            return Err(format!("no case {n:?} (--list shows them)"));
        }
    }
    // A target that answers no OPEN fails every case the same way: say so once, quickly.
    let silent = Peer::open(env).err();
    let mut out = Vec::new();
    for c in cases
        .iter()
        .filter(|_| !only_vectors)
        .filter(|c| names.is_empty() || names.iter().any(|n| n == c.name))
    {
        let t0 = Instant::now();
        let r = match &silent {
            Some(f) => Err(f.clone()),
            None => (c.run)(env),
        };
        let (result, failure, notes) = match r {
            Ok(Verdict::Pass(n)) => ("pass", None, n),
            Ok(Verdict::NotApplicable(why)) => ("n/a", None, vec![why]),
            Err(f) => ("fail", Some(f), vec![]),
        };
        out.push(CaseReport {
            name: c.name.into(),
            requirements: c.reqs.iter().map(|s| s.to_string()).collect(),
            result: result.into(),
            failure,
            notes,
            elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
        });
        // What a finished case's connection still gets (late answers) is not the next one's.
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(dir) = vectors {
        match &silent {
            // Each would wait for its first answer in vain.
            Some(f) => {
                for path in vectors::files(dir)? {
                    let name = path.file_stem().unwrap_or_default().to_string_lossy();
                    out.push(CaseReport {
                        name: format!("vector:{name}"),
                        requirements: vec![],
                        result: "fail".into(),
                        failure: Some(f.clone()),
                        notes: vec![],
                        elapsed_ms: 0.0,
                    });
                }
            }
            None => out.extend(vectors::run(env, dir)?),
        }
    }
    let count = |r: &str| out.iter().filter(|c| c.result == r).count();
    Ok(Report {
        target: env.net.target.to_string(),
        passed: count("pass"),
        failed: count("fail"),
        not_applicable: count("n/a"),
        cases: out,
    })
}

/// The report as a table.
pub fn render(r: &Report) -> String {
    let mut s = format!("ferroce compliance: target {}\n\n", r.target);
    s.push_str(&format!(
        "{:<26} {:<6} {:<44} detail\n",
        "case", "result", "requirements"
    ));
    for c in &r.cases {
        let reqs = c.requirements.join(" ");
        let detail = match &c.failure {
            Some(f) => format!("[{}] expected {}; got {}", f.requirement, f.expected, f.got),
            None => c.notes.join("; "),
        };
        s.push_str(&format!(
            "{:<26} {:<6} {:<44} {}\n",
            c.name, c.result, reqs, detail
        ));
    }
    s.push_str(&format!(
        "\n{} passed, {} failed, {} not applicable\n",
        r.passed, r.failed, r.not_applicable
    ));
    s
}

fn addr(s: &str, default_port: u16) -> Result<SocketAddrV4, String> {
    if let Ok(a) = s.parse::<SocketAddrV4>() {
        return Ok(a);
    }
    s.parse::<Ipv4Addr>()
        .map(|ip| SocketAddrV4::new(ip, default_port))
        .map_err(|_| format!("{s:?} is not IPv4 or IPv4:PORT"))
}

/// `ferroce compliance ...`: the exit code.
pub fn main(args: &[String]) -> i32 {
    let mut target = None;
    let mut bind = SocketAddrV4::new(
        Ipv4Addr::UNSPECIFIED,
        ferroce_transport::wire::NATIVE_UDP_PORT,
    );
    let mut keys = None;
    let (mut json, mut list, mut trace) = (false, false, false);
    let mut names = Vec::new();
    let mut vectors: Option<std::path::PathBuf> = None;
    let mut only_vectors = false;
    let (mut answer_ms, mut quiet_ms) = (1000u64, 100u64);
    let mut it = args.iter();
    let port = ferroce_transport::wire::NATIVE_UDP_PORT;
    let usage = |e: String| {
        eprintln!("ferroce compliance: {e}\n{USAGE}");
        2
    };
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "--target" => target = Some(addr(&val()?, port)?),
                "--bind" => bind = addr(&val()?, port)?,
                "--rkeys" => keys = Some(ProfileKeys::parse(&val()?)?),
                "--case" => names.push(val()?),
                "--vectors" => vectors = Some(val()?.into()),
                "--vectors-only" => only_vectors = true,
                "--json" => json = true,
                "--trace" => trace = true,
                "--list" => list = true,
                "--answer-ms" => answer_ms = val()?.parse().map_err(|_| "--answer-ms: a number")?,
                "--quiet-ms" => quiet_ms = val()?.parse().map_err(|_| "--quiet-ms: a number")?,
                "-h" | "--help" => return Err(String::new()),
                x => return Err(format!("unknown argument {x:?}")),
            }
            Ok(())
        })();
        match r {
            Ok(()) => {}
            Err(e) if e.is_empty() => {
                println!("{USAGE}");
                return 0;
            }
            Err(e) => return usage(e),
        }
    }
    if list {
        for c in all_cases() {
            println!("{:<18} {:<44} {}", c.name, c.reqs.join(" "), c.what);
        }
        return 0;
    }
    let Some(target) = target else {
        return usage("--target is required".into());
    };
    let Some(keys) = keys else {
        return usage("--rkeys is required (the target prints them)".into());
    };
    let net = match Net::new(bind, target) {
        Ok(n) => n,
        Err(e) => return usage(e),
    };
    let env = Env {
        net,
        keys,
        answer: Duration::from_millis(answer_ms),
        quiet: Duration::from_millis(quiet_ms),
        trace,
        t0: Instant::now(),
    };
    if only_vectors && vectors.is_none() {
        return usage("--vectors-only needs --vectors DIR".into());
    }
    let report = match run(&env, &names, vectors.as_deref(), only_vectors) {
        Ok(r) => r,
        Err(e) => return usage(e),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_else(|_| "{}".into())
        );
    } else {
        print!("{}", render(&report));
    }
    if report.failed == 0 {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case's list of requirements, its `checks:` marker (what scripts/req-index counts) and
    /// the requirements its checks can name agree.
    #[test]
    fn every_case_lists_the_requirements_it_checks_and_its_marker_says_the_same() {
        let src = [
            include_str!("cases.rs"),
            include_str!("cases_data.rs"),
            include_str!("cases_remote.rs"),
        ];
        let ids = |t: &str, open: char, close: char| -> Vec<String> {
            t.split(open)
                .skip(1)
                .filter_map(|x| x.split(close).next())
                .filter(|x| {
                    x.split_once('-').is_some_and(|(a, n)| {
                        !a.is_empty()
                            && a.chars().all(|c| c.is_ascii_uppercase())
                            && !n.is_empty()
                            && n.chars().all(|c| c.is_ascii_digit())
                    })
                })
                .map(String::from)
                .collect()
        };
        let cases = all_cases();
        assert!(cases.len() >= 15);
        for c in &cases {
            let head = format!("\nfn case_{}(", c.name);
            let src = src
                .iter()
                .find(|s| s.contains(&head))
                .unwrap_or_else(|| panic!("no fn case_{}", c.name));
            let at = src.find(&head).expect("found");
            let marker_line = src[..at].lines().last().unwrap_or("");
            assert!(
                marker_line.starts_with("// checks:"),
                "{}: no marker",
                c.name
            );
            let reqs: Vec<String> = c.reqs.iter().map(|s| s.to_string()).collect();
            assert_eq!(
                ids(marker_line, '[', ']'),
                reqs,
                "{}: marker vs list",
                c.name
            );
            let body_end = src[at + 1..]
                .find("\n// checks:")
                .map_or(src.len(), |e| at + 1 + e);
            for id in ids(&src[at..body_end], '"', '"') {
                // Peer::open names these when the connection cannot be opened at all.
                let opening = id == "OPEN-1" || id == "CONN-1";
                assert!(
                    reqs.contains(&id) || opening,
                    "{}: checks {id}, not in its list",
                    c.name
                );
            }
        }
    }
}
