//! The endpoint's own tests (ids, the timer table under loss).

use super::*;
use crate::mem::{access, Regions};

/// Ids drawn in a residue class (an engine's shard): initiated and accepted connections
/// alike, and the default class is the whole space with the draws of before.
#[test]
fn connection_ids_stay_in_their_shard() {
    let peer = Ipv4Addr::new(198, 18, 0, 9);
    for (shards, shard) in [(2u32, 0u32), (2, 1), (3, 2)] {
        let mut e = Endpoint::new(EndpointConfig {
            id_shards: shards,
            id_shard: shard,
            ..EndpointConfig::default()
        });
        let mut buf = vec![0u8; 256];
        for i in 0..50u32 {
            assert_eq!(e.connect(peer).0 % shards, shard);
            let open = crate::wire::Packet {
                flags: 0,
                path: 0,
                dst_conn: 0,
                body: crate::wire::Body::Open(crate::wire::OpenRepr {
                    src_conn: 1000 + i,
                    paths: 2,
                    crowd: 0,
                    mtu: 1024,
                    line_rate_mbps: 10_000,
                }),
            };
            let n = open.emit(&mut buf).unwrap();
            e.handle_datagram(1, peer, 49152, false, &buf[..n], &mut Regions::new());
        }
        let ids: Vec<u32> = e.connections().map(|c| c.id.0).collect();
        assert_eq!(ids.len(), 100, "50 opened and 50 accepted");
        assert!(ids.iter().all(|id| id % shards == shard), "{ids:?}");
    }
    // One shard: the ids are the splitmix64 draws themselves, as before sharding.
    let cfg = EndpointConfig::default();
    let mut st = cfg.seed ^ cfg.incarnation;
    let mut want = Vec::new();
    while want.len() < 20 {
        st = splitmix64(st);
        if st as u32 != 0 {
            want.push(st as u32);
        }
    }
    let mut e = Endpoint::new(cfg);
    let got: Vec<u32> = (0..20).map(|_| e.connect(peer).0).collect();
    assert_eq!(got, want);
}

/// Two endpoints over a lossy, jittery, ECN-marking wire with several paths (4, or 16 on
/// even seeds): every `poll_timeout` of a connection whose timer table is up to date compares
/// each row with the paths it summarises, every read of the cached connection window
/// compares it with a fresh one, every read of the bytes in flight compares the running
/// total with the paths' sum, and every path the pick table chooses is compared with the
/// scan's choice (all compiled into the crate's tests), through sends, ACKs, losses, window
/// cuts, RTOs, tail-loss probes and path probes; and every WRITE still completes.
#[test]
fn the_timer_table_matches_the_paths_under_loss() {
    let picks = crate::conn::pick::INDEX_PICKS.with(|c| c.get());
    for seed in 1..=12u64 {
        let mk = |s| {
            let mut c = EndpointConfig {
                seed: s,
                ..EndpointConfig::default()
            };
            c.conn.paths = if seed % 2 == 0 { 16 } else { 4 };
            c.conn.mtu = 256;
            Endpoint::new(c)
        };
        let (ia, ib) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let (mut a, mut b) = (mk(seed), mk(seed + 100));
        let (mut ma, mut mb) = (Regions::new(), Regions::new());
        let lkey = ma.register(1, 0x1000, 4096, access::LOCAL_WRITE);
        let rkey = mb.register(1, 0x8000, 4096, access::REMOTE_WRITE);
        let c = a.connect(ib);
        let mut r = seed;
        let mut rand = |n: u64| {
            r = splitmix64(r);
            r % n
        };
        // (arrival time, to B?, source port, CE-marked, bytes)
        let mut wire: Vec<(u64, bool, u16, bool, Vec<u8>)> = Vec::new();
        let mut buf = vec![0u8; 2048];
        let (mut now, mut posted, mut done, mut streams) = (1_000u64, 0u64, 0u64, false);
        while done < 60 && now < 2_000_000_000 {
            if !streams {
                while let Some(ev) = b.poll_event() {
                    if let Event::Accepted { conn, .. } = ev {
                        a.create_stream(c, 1, 1, 1).unwrap();
                        b.create_stream(conn, 1, 1, 1).unwrap();
                        streams = true;
                    }
                }
            }
            while streams && posted < 60 && posted - done < 8 {
                let sgl = [Sge {
                    lkey,
                    addr: 0x1000,
                    len: 1000,
                }];
                let wr = SendWr {
                    wr_id: posted,
                    op: SendOp::Write {
                        rkey,
                        raddr: 0x8000 + (posted % 3) * 1024,
                        imm: None,
                    },
                    sgl: sgl.into_iter().collect(),
                    signaled: true,
                    solicited: false,
                    fence: false,
                };
                a.post_send(c, 1, wr).unwrap();
                posted += 1;
            }
            for e in [&mut a, &mut b] {
                if e.poll_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now);
                }
            }
            for (to_b, e, m) in [(true, &mut a, &mut ma), (false, &mut b, &mut mb)] {
                while let Some(t) = e.poll_transmit(now, &mut buf, m) {
                    if rand(100) >= 15 {
                        let spread = if rand(10) == 0 { 40_000 } else { 500 };
                        let at = now + 2_000 + rand(spread);
                        let ce = rand(8) == 0;
                        wire.push((at, to_b, t.src_port, ce, buf[..t.len].to_vec()));
                    }
                }
            }
            while let Some(x) = a.poll_completion() {
                assert_eq!(x.status, Status::Success, "seed {seed}");
                done += 1;
            }
            while b.poll_completion().is_some() {}
            let next = [a.poll_timeout(), b.poll_timeout()]
                .into_iter()
                .flatten()
                .chain(wire.iter().map(|w| w.0))
                .min();
            now = next.filter(|&t| t > now).unwrap_or(now + 100);
            let mut i = 0;
            while i < wire.len() {
                if wire[i].0 <= now {
                    let (_, to_b, port, ce, d) = wire.swap_remove(i);
                    if to_b {
                        b.handle_datagram(now, ia, port, ce, &d, &mut mb);
                    } else {
                        a.handle_datagram(now, ib, port, ce, &d, &mut ma);
                    }
                } else {
                    i += 1;
                }
            }
        }
        assert_eq!(done, 60, "seed {seed}: WRITEs left at {now} ns");
    }
    let picks = crate::conn::pick::INDEX_PICKS.with(|c| c.get()) - picks;
    assert!(picks > 1000, "the pick table answered {picks} times");
}
