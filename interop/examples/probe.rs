//! Debugging aid: one ferroce-vs-rxe run with a capture on the lab bridge and the shim's debug
//! log. `probe PROGRAM server|client [MTU] [SECS]`; the capture is left in $TMPDIR.
use ferroce_interop::{apps, image, util};
use std::process::Command;
use std::time::Duration;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p =
        apps::program(a.get(1).map(String::as_str).unwrap_or("ibv_rc_pingpong")).expect("program");
    let role = if a.get(2).map(String::as_str) == Some("client") {
        apps::Role::Client
    } else {
        apps::Role::Server
    };
    let mtu: u32 = a.get(3).and_then(|v| v.parse().ok()).unwrap_or(1024);
    let secs: u64 = a.get(4).and_then(|v| v.parse().ok()).unwrap_or(20);
    let img = image::prepare().expect("image");
    let mut s = apps::Session::start(&img, 1, apps::link_mtu_for(mtu), "probe").expect("session");
    let pcap = std::env::temp_dir().join("ferroce-probe.pcap");
    let _ = std::fs::remove_file(&pcap);
    let mut c = s.lab.command("tshark");
    c.args(["-q", "-i", "fbr0", "-w"]).arg(&pcap);
    let cap = util::Bounded::spawn(&mut c, Duration::from_secs(secs + 60)).expect("tshark");
    std::thread::sleep(Duration::from_secs(2));
    let r = s.ferroce_vs_rxe(&p, role, mtu, 0.0, Duration::from_secs(secs));
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) only sends a signal to the tshark process this program started.
    unsafe { libc::kill(cap.pid() as i32, libc::SIGINT) };
    let o = cap.wait();
    eprintln!("{}", o.text());
    match r {
        Ok(r) => eprintln!(
            "ok={} figure={} ({:.1} s)\n{}",
            r.ok, r.figure, r.secs, r.detail
        ),
        Err(e) => eprintln!("error: {e}"),
    }
    let _ = Command::new("chmod").arg("644").arg(&pcap).status();
    eprintln!("capture: {}", pcap.display());
}
