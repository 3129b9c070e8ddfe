//! The packet I/O seam (`ferroce_dataplane::io`): the fault injector and the capture wrap any
//! `PacketIo`. Over a scripted device that takes only a few frames per call (a busy PMD), every
//! frame offered passes the send faults exactly once and is captured exactly once, however
//! often it is offered again; what the device took is what it reports.

mod common;

use common::{eal, need_root, serial};
use ferroce_dataplane::dpdk::{Mbuf, Mempool};
use ferroce_dataplane::fault::{FaultConfig, FaultInjector, FaultIo};
use ferroce_dataplane::io::{IoCaps, PacketIo, TxCount};
use ferroce_dataplane::pcap::{self, PcapIo, PcapWriter};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};

/// A device that takes at most `per_call` frames per `tx_burst` and records their first
/// byte; it receives nothing.
struct Scripted {
    per_call: usize,
    taken: Arc<Mutex<Vec<u32>>>,
}

impl PacketIo for Scripted {
    fn rx_burst(&mut self, _now: u64, _out: &mut Vec<Mbuf>, _max: u16) -> usize {
        0
    }
    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        let n = self.per_call.min(pkts.len());
        let mut bytes = 0;
        let mut t = self.taken.lock().unwrap();
        for m in pkts.drain(..n) {
            bytes += m.len() as u64;
            let d = m.data();
            t.push(u32::from_be_bytes([d[0], d[1], d[2], d[3]]));
        }
        TxCount { frames: n, bytes }
    }
    fn caps(&self) -> IoCaps {
        IoCaps {
            id: 0,
            name: "scripted".into(),
            mac: [2, 0, 0, 0, 0, 1],
            max_burst: 32,
            link_layer: true,
        }
    }
    fn link_up(&self) -> bool {
        true
    }
    fn stats(&self, _out: &mut Map<String, Value>) {}
    fn release(&mut self, _out: &mut Vec<Mbuf>) {}
    fn flush(&mut self) {}
}

#[test]
fn dpdk_io_stack_faults_and_captures_each_frame_once() {
    if !need_root("dpdk_io_stack_faults_and_captures_each_frame_once") {
        return;
    }
    let _g = serial();
    let eal = eal();
    let pool = Mempool::new(eal, "io_stack", 1023, 0, 2176).expect("pool");
    let taken = Arc::new(Mutex::new(Vec::new()));
    let dev = Scripted {
        per_call: 2,
        taken: taken.clone(),
    };
    let dir = std::env::temp_dir().join(format!("ferroce-io-stack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("tx.pcap");
    let faults = FaultConfig {
        loss: 0.3,
        duplicate: 0.1,
        seed: Some(7),
        ..FaultConfig::default()
    };
    let tx = FaultInjector::new(&faults, 1);
    let rx = FaultInjector::new(&FaultConfig::default(), 2);
    let pc: Box<dyn PacketIo> = Box::new(PcapIo::new(
        Box::new(dev),
        PcapWriter::create(&cap, 256).unwrap(),
    ));
    let mut io = FaultIo::new(pc, tx, rx, pool.clone());
    let total = 200u32;
    let mut q: Vec<Mbuf> = Vec::new();
    let (mut next, mut frames, mut bytes) = (0u32, 0usize, 0u64);
    for round in 0..1000 {
        // Offer more new frames per call than the device takes, behind what it left.
        for _ in 0..3 {
            if next < total {
                let mut m = pool.alloc().expect("mbuf");
                m.room_mut()[..4].copy_from_slice(&next.to_be_bytes());
                m.room_mut()[4..64].fill(0xee);
                m.set_len(64);
                q.push(m);
                next += 1;
            }
        }
        let c = io.tx_burst(round, &mut q);
        frames += c.frames;
        bytes += c.bytes;
        if next == total && q.is_empty() {
            break;
        }
    }
    assert!(q.is_empty(), "the device never drained the queue");
    io.flush();
    let mut m = Map::new();
    io.stats(&mut m);
    let f = &m["fault_tx"];
    let n = |k: &str| f[k].as_u64().unwrap();
    // Each frame offered went through the injector once, however often it was offered.
    assert_eq!(n("frames"), total as u64, "{f}");
    let taken = taken.lock().unwrap().clone();
    assert_eq!(frames, taken.len());
    assert_eq!(bytes, 64 * taken.len() as u64);
    let expect = total as u64 - n("dropped_random") + n("duplicated");
    assert_eq!(taken.len() as u64, expect, "{f}");
    assert!(n("dropped_random") > 0 && n("duplicated") > 0, "{f}");
    // The capture (under the faults) saw exactly the frames the device took, once each.
    let got: Vec<u32> = pcap::read(&cap)
        .unwrap()
        .iter()
        .map(|(_, d)| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
        .collect();
    assert_eq!(got, taken);
    std::fs::remove_dir_all(&dir).ok();
}
