//! pcap capture (nanosecond timestamps, Ethernet link type) of what the engine sends and
//! receives, as it is on the wire: received frames before the rx fault injector, sent frames
//! after the tx fault injector.

use crate::io::{IoCaps, PacketIo, TxCount};
use ferroce_dpdk_sys::Mbuf;
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Magic of the nanosecond-resolution pcap format.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const LINKTYPE_ETHERNET: u32 = 1;

pub struct PcapWriter {
    out: BufWriter<File>,
    snaplen: u32,
    /// Unix time (ns) at engine time 0.
    epoch_ns: u64,
    pub frames: u64,
    pub errors: u64,
}

impl std::fmt::Debug for PcapWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PcapWriter({} frames)", self.frames)
    }
}

impl PcapWriter {
    pub fn create(path: &Path, snaplen: u32) -> io::Result<Self> {
        let f = File::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        out.write_all(&MAGIC_NS.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&snaplen.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        let epoch_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Ok(PcapWriter {
            out,
            snaplen,
            epoch_ns,
            frames: 0,
            errors: 0,
        })
    }

    /// Record one frame seen at engine time `now_ns`.
    pub fn write(&mut self, now_ns: u64, frame: &[u8]) {
        let t = self.epoch_ns + now_ns;
        let cap = frame.len().min(self.snaplen as usize);
        let mut hdr = [0u8; 16];
        hdr[0..4].copy_from_slice(&((t / 1_000_000_000) as u32).to_le_bytes());
        hdr[4..8].copy_from_slice(&((t % 1_000_000_000) as u32).to_le_bytes());
        hdr[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        hdr[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let r = self
            .out
            .write_all(&hdr)
            .and_then(|_| self.out.write_all(&frame[..cap]));
        match r {
            Ok(()) => self.frames += 1,
            Err(_) => self.errors += 1,
        }
    }

    pub fn flush(&mut self) {
        if self.out.flush().is_err() {
            self.errors += 1;
        }
    }
}

/// Capture of every frame that crosses `inner`: frames as received, and frames as offered to
/// it for sending, each once (a frame the device did not take yet is not written again).
pub struct PcapIo {
    inner: Box<dyn PacketIo>,
    w: PcapWriter,
    /// The first `recorded` frames of the caller's transmit queue were written already.
    recorded: usize,
}

impl PcapIo {
    pub fn new(inner: Box<dyn PacketIo>, w: PcapWriter) -> Self {
        PcapIo {
            inner,
            w,
            recorded: 0,
        }
    }
}

impl PacketIo for PcapIo {
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        let before = out.len();
        let n = self.inner.rx_burst(now, out, max);
        for m in &out[before..] {
            self.w.write(now, m.data());
        }
        n
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        // The caller may have dropped frames from the back of its queue meanwhile.
        let from = self.recorded.min(pkts.len());
        for m in &pkts[from..] {
            self.w.write(now, m.data());
        }
        let sent = self.inner.tx_burst(now, pkts);
        self.recorded = pkts.len();
        sent
    }

    fn caps(&self) -> IoCaps {
        self.inner.caps()
    }

    fn link_up(&self) -> bool {
        self.inner.link_up()
    }

    fn stats(&self, out: &mut Map<String, Value>) {
        out.insert("pcap_frames".into(), self.w.frames.into());
        out.insert("pcap_errors".into(), self.w.errors.into());
        self.inner.stats(out);
    }

    fn release(&mut self, out: &mut Vec<Mbuf>) {
        self.inner.release(out);
    }

    fn flush(&mut self) {
        self.w.flush();
        self.inner.flush();
    }
}

/// Read a pcap file written by [`PcapWriter`]: (timestamp ns, frame) pairs. For tests and tools.
pub fn read(path: &Path) -> io::Result<Vec<(u64, Vec<u8>)>> {
    let b = std::fs::read(path)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a ferroce pcap file");
    if b.len() < 24 || u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != MAGIC_NS {
        return Err(bad());
    }
    let mut v = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let r =
            |o: usize| u32::from_le_bytes([b[at + o], b[at + o + 1], b[at + o + 2], b[at + o + 3]]);
        let ts = r(0) as u64 * 1_000_000_000 + r(4) as u64;
        let cap = r(8) as usize;
        at += 16;
        if at + cap > b.len() {
            return Err(bad());
        }
        v.push((ts, b[at..at + cap].to_vec()));
        at += cap;
    }
    Ok(v)
}
