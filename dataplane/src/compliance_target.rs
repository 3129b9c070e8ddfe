//! `workload.role = "compliance"`: the engine as a compliance target (spec/compliance.md). Every
//! connection a peer opens gets the profile's stream and receives; the regions are registered
//! once, and their keys are printed on stdout for `ferroce compliance --rkeys`. It answers
//! whatever comes until `workload.timeout_s` passes or the process is signalled.

use crate::app::WorkloadResult;
use crate::engine::{EngineHandle, Output};
use ferroce_transport::{CompletionOp, Event, Status};
use ferroce_workload::compliance as profile;
use std::io::Write;
use std::time::{Duration, Instant};

/// The line a target prints once it is ready: `compliance-target --rkeys KEYS`.
pub const READY: &str = "compliance-target --rkeys";

/// Run the target until `timeout` or `stop()`.
pub fn run(h: &EngineHandle, timeout: Duration, stop: impl Fn() -> bool) -> WorkloadResult {
    let keys = {
        let mut mem = h.mem.lock().unwrap_or_else(|p| p.into_inner());
        profile::register(&mut mem)
    };
    h.listen(vec![(profile::STREAM, profile::STREAM, profile::PD)]);
    println!("{READY} {}", keys.to_arg());
    let _ = std::io::stdout().flush();
    let t0 = Instant::now();
    let (mut conns, mut recvs, mut refused) = (0u64, 0u64, 0u64);
    while t0.elapsed() < timeout && !stop() && !h.stopped() {
        let Some(o) = h.next(Duration::from_millis(5)) else {
            continue;
        };
        match o {
            Output::Event(Event::Accepted { conn, .. }) => {
                conns += 1;
                for slot in 0..profile::RECVS {
                    h.post_recv(conn, profile::STREAM, profile::recv_wr(&keys, slot));
                }
            }
            // A receive done: post its buffer again, so RECVS stay posted. Flushed ones (the
            // peer closed, or the stream is in error) are not.
            Output::Completion(c) if c.stream == profile::STREAM && c.status == Status::Success => {
                if matches!(c.op, CompletionOp::Recv | CompletionOp::RecvWriteImm) {
                    recvs += 1;
                    h.post_recv(
                        c.conn,
                        profile::STREAM,
                        profile::recv_wr(&keys, c.wr_id as u32),
                    );
                }
            }
            // A receive posted to a connection the peer has closed already (its streams are
            // flushed), or to a stream in error, is refused: expected, counted.
            Output::Refused { .. } => refused += 1,
            _ => {}
        }
    }
    eprintln!(
        "compliance target: {conns} connections accepted, {recvs} receives completed, \
         {refused} posts refused (streams closed or in error by then)"
    );
    WorkloadResult {
        role: "compliance".into(),
        ok: true,
        completed: recvs,
        elapsed_s: t0.elapsed().as_secs_f64(),
        ..Default::default()
    }
}
