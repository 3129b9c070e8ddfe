//! Remote keys are unpredictable (spec/security.md §1.1): an attacker who saw one rkey and
//! guesses another (the seen key plus the constant steps keys used to advance by, or at
//! random) is refused with NACK RemoteAccess, the refusal is counted, and nothing is placed.

mod common;

use common::*;
use ferroce_transport::keys::KeyGen;
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{flags, DataOp, NackReason};
use ferroce_transport::*;

/// Where the region the attacker wants to reach lives.
const TARGET: u64 = 0x50_000;
/// The steps keys used to advance by: `Regions` (the engine) and the verbs shim's table.
const OLD_STEPS: [u32; 2] = [0x9e37, 0x3b9a_ca07];

/// B's memory with keys from a secret (as a real host's, whose secret comes from the OS):
/// the region whose key the attacker saw (at `DST`), then the target registered right after.
fn setup(secret: [u8; 16]) -> (Pair, u32, u32) {
    let mut p = Pair::new();
    p.mb = Regions::with_keys(KeyGen::new(secret));
    let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let seen = p.mb.register(1, DST, 256, all);
    let target = p.mb.register(1, TARGET, 256, all);
    (p, seen, target)
}

fn b_counters(p: &Pair) -> ConnCounters {
    p.b.connection(ConnId(p.to_b)).unwrap().counters()
}

/// One crafted single-packet WRITE of 0x77s to the target under `rkey`; B's NACKs.
fn write_target(p: &mut Pair, rkey: u32) -> Vec<NackReason> {
    p.send_b(
        flags::LAST,
        msg(0, 0, P),
        DataOp::Write {
            rkey,
            raddr: TARGET,
        },
        &[0x77; P as usize],
    )
}

fn target_untouched(p: &Pair, target: u32) -> bool {
    p.mb.region(target).unwrap().data.iter().all(|&b| b == 0)
}

#[test]
fn the_right_key_writes_the_target() {
    // The control: the crafted WRITE itself is good, so the refusals below are the key's.
    let (mut p, _, target) = setup([0x5c; 16]);
    assert!(write_target(&mut p, target).is_empty());
    assert!(p.mb.region(target).unwrap().data[..P as usize]
        .iter()
        .all(|&b| b == 0x77));
    assert_eq!(b_counters(&p).remote_access_refused, 0);
}

// checks: [SEC-4]
#[test]
fn the_seen_key_plus_an_old_step_is_refused_and_counted() {
    for (i, secret) in [[0x5c; 16], [1; 16], *b"ferroce-rkeys-16"]
        .into_iter()
        .enumerate()
    {
        for step in OLD_STEPS {
            let (mut p, seen, target) = setup(secret);
            let guess = seen.wrapping_add(step);
            assert_ne!(
                guess, target,
                "secret {i}: the next key is the seen one + {step:#x}"
            );
            let before = b_counters(&p);
            assert_eq!(
                write_target(&mut p, guess),
                vec![NackReason::RemoteAccess],
                "secret {i}, step {step:#x}"
            );
            let after = b_counters(&p);
            assert_eq!(
                after.remote_access_refused,
                before.remote_access_refused + 1
            );
            let ra = NackReason::RemoteAccess as usize;
            assert_eq!(after.nacks_sent[ra], before.nacks_sent[ra] + 1);
            assert!(target_untouched(&p, target));
            assert!(p.b.poll_completion().is_none());
        }
    }
}

// checks: [SEC-2] [SEC-4]
#[test]
fn random_guesses_are_refused_and_counted() {
    let (mut p, seen, target) = setup(*b"ferroce-rkeys-16");
    let mut g = KeyGen::deterministic(0xa77a_c4e2);
    let mut refused = 0;
    for _ in 0..200 {
        let guess = g.next_key();
        if guess == seen || guess == target {
            continue; // a hit by luck: probability 2 / 2^32 per guess
        }
        // Each refusal leaves B's responder where it was: the next guess is a fresh
        // attempt at the same message.
        assert_eq!(
            write_target(&mut p, guess),
            vec![NackReason::RemoteAccess],
            "{guess:#x}"
        );
        refused += 1;
    }
    assert_eq!(b_counters(&p).remote_access_refused, refused);
    assert!(target_untouched(&p, target));
    // And the right key still works afterwards: the guesses did not wedge the connection.
    assert!(write_target(&mut p, target).is_empty());
}

// checks: [SEC-2]
#[test]
fn a_requester_using_a_guessed_key_gets_a_remote_access_completion() {
    let (mut p, seen, target) = setup([0x5c; 16]);
    let lkey = p.ma.register(1, 0x1000, P as usize, access::LOCAL_WRITE);
    let wr = SendWr {
        wr_id: 42,
        op: SendOp::Write {
            rkey: seen.wrapping_add(OLD_STEPS[0]),
            raddr: TARGET,
            imm: None,
        },
        sgl: [Sge {
            lkey,
            addr: 0x1000,
            len: P,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    };
    p.a.post_send(p.a_conn, 1, wr).unwrap();
    let mut done = None;
    for _ in 0..50 {
        p.exchange();
        if let Some(c) = p.a.poll_completion() {
            done = Some(c);
            break;
        }
    }
    let c = done.expect("no completion");
    assert_eq!((c.wr_id, c.status), (42, Status::RemoteAccess));
    assert!(target_untouched(&p, target));
    assert_eq!(b_counters(&p).remote_access_refused, 1);
}
