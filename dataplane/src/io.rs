//! The engine's packet I/O seam: a burst of frames in, a burst out, in the style of DPDK's
//! own `rx_burst`/`tx_burst`. [`DpdkIo`] is a port of any PMD; the fault injector
//! ([`crate::fault::FaultIo`]) and the capture ([`crate::pcap::PcapIo`]) wrap any
//! [`PacketIo`], so tests and tools stack them over whatever carries the frames, and an
//! engine without faults or capture has neither layer (they cost nothing when off).
//!
//! Order of the stack the engine builds (`engine::io_stack`): faults over capture over the
//! port, so the capture sees what crossed the wire: received frames before the receive faults,
//! sent frames after the send faults. This module knows none of the layers.

use ferroce_dpdk_sys::{Mbuf, Mempool, Port, PortStats};
use serde_json::{json, Map, Value};

/// A source and sink of Ethernet frames in mbufs.
pub trait PacketIo: Send {
    /// Receive up to `max` frames, appended to `out`; returns how many were appended.
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize;

    /// Send frames from the front of `pkts`, in order; what was not taken stays in `pkts`
    /// (the caller offers it again, with new frames appended behind it). Called on every
    /// engine poll, also with nothing to send, so a layer can release frames it holds.
    /// Returns what the device took (which a fault layer makes differ from what was offered).
    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Mbuf>) -> TxCount;

    /// What the I/O is and can do.
    fn caps(&self) -> IoCaps;

    /// Whether the link is up (a layer passes the question down).
    fn link_up(&self) -> bool;

    /// Add this layer's counters to `out`, then those of the layers below (JSON fields of the
    /// engine's counters snapshot).
    fn stats(&self, out: &mut Map<String, Value>);

    /// Shutdown: queue every frame a layer still holds back into `out`, to be sent.
    fn release(&mut self, out: &mut Vec<Mbuf>);

    /// Write buffered output (capture files) to storage.
    fn flush(&mut self);

    /// Frames wait in a software queue (another lcore's), so the engine must not sleep. A
    /// device the PMD is polled for says no; only the top of a stack is asked (the shard
    /// queues of `engine::shard` are never under another layer).
    fn rx_ready(&self) -> bool {
        false
    }

    /// Whether frames moved through this layer for other lcores since the last call (the
    /// dispatcher of a sharded engine): work, though none of it was this engine's.
    fn take_moved(&mut self) -> bool {
        false
    }
}

/// Frames and bytes a device took in one [`PacketIo::tx_burst`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCount {
    pub frames: usize,
    pub bytes: u64,
}

/// Capabilities of a [`PacketIo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoCaps {
    /// DPDK port id (or a number naming the device).
    pub id: u16,
    /// Device name (e.g. `net_ring0`, `net_af_packet0`).
    pub name: String,
    /// MAC address; all zero if the device has none (net_ring).
    pub mac: [u8; 6],
    /// Most frames one `rx_burst` returns (the engine asks for at most this many).
    pub max_burst: u16,
    /// Frames go onto a link that needs MAC addresses (ARP); false for the kernel UDP
    /// backend ([`crate::udp`]), where the kernel routes and resolves neighbours itself.
    pub link_layer: bool,
}

/// A started DPDK port, queue 0 each way.
pub struct DpdkIo {
    port: Port,
    /// net_memif: when to check the link next (ns of engine time), and restarts so far.
    /// A memif client whose server was not listening yet when it started stays down (the
    /// PMD connects only in `dev_start`), so a down memif port is restarted until its link
    /// comes up, first after [`MEMIF_RETRY_NS`].
    memif_check_at: Option<u64>,
    memif_restarts: u64,
    /// Restarts in a row that found the link still down.
    memif_backoff: u32,
}

/// How soon a down net_memif port is restarted to connect again (then 200, 400, 800 ms).
const MEMIF_RETRY_NS: u64 = 100_000_000;

impl DpdkIo {
    pub fn new(port: Port) -> Self {
        let memif = port.name().starts_with("net_memif");
        DpdkIo {
            port,
            memif_check_at: memif.then_some(0),
            memif_restarts: 0,
            memif_backoff: 0,
        }
    }

    fn memif_retry(&mut self, now: u64) {
        let Some(at) = self.memif_check_at else {
            return;
        };
        if now < at {
            return;
        }
        // The first check only notes the time: the connection made at start needs a moment.
        // Each restart of a port still down waits twice as long as the one before, up to a
        // second (DPDK logs every failed connect).
        let down = at != 0 && !self.port.link().up;
        if down {
            let _ = self.port.restart();
            self.memif_restarts += 1;
        } else {
            self.memif_backoff = 0;
        }
        let wait = MEMIF_RETRY_NS << self.memif_backoff.min(3);
        if down {
            self.memif_backoff += 1;
        }
        self.memif_check_at = Some(now + wait);
    }

    pub fn pool(&self) -> &Mempool {
        self.port.pool()
    }
}

impl PacketIo for DpdkIo {
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        self.memif_retry(now);
        self.port.rx_burst(out, max)
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        if pkts.is_empty() {
            return TxCount::default();
        }
        let len = |v: &Vec<Mbuf>| v.iter().map(|m| m.len() as u64).sum::<u64>();
        let before = len(pkts);
        let frames = self.port.tx_burst(pkts);
        let bytes = if pkts.is_empty() {
            before
        } else {
            before - len(pkts)
        };
        TxCount { frames, bytes }
    }

    fn caps(&self) -> IoCaps {
        IoCaps {
            id: self.port.id(),
            name: self.port.name().to_string(),
            mac: self.port.mac(),
            max_burst: u16::MAX,
            link_layer: true,
        }
    }

    fn link_up(&self) -> bool {
        self.port.link().up
    }

    fn stats(&self, out: &mut Map<String, Value>) {
        let d: PortStats = self.port.stats();
        out.insert(
            "driver".into(),
            json!({
                "ipackets": d.ipackets, "opackets": d.opackets,
                "ibytes": d.ibytes, "obytes": d.obytes,
                "imissed": d.imissed, "ierrors": d.ierrors, "oerrors": d.oerrors,
                "rx_nombuf": d.rx_nombuf,
                "restarts": self.memif_restarts,
            }),
        );
    }

    fn release(&mut self, _out: &mut Vec<Mbuf>) {}

    fn flush(&mut self) {}
}
