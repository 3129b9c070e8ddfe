//! What the embedder hands the core (work requests) and gets back (completions, events,
//! datagrams to send).

use smallvec::SmallVec;
use std::net::Ipv4Addr;

/// A connection handle: the local connection id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// A scatter/gather element of local registered memory (defined with the memory it names).
pub use crate::mem::Sge;

/// Up to a few SGEs inline, as verbs applications mostly use one or two.
pub type SgList = SmallVec<[Sge; 2]>;

/// The operation of a send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendOp {
    Send {
        imm: Option<u32>,
    },
    Write {
        rkey: u32,
        raddr: u64,
        imm: Option<u32>,
    },
    /// Reads `len` of the local SG list's total length.
    Read {
        rkey: u32,
        raddr: u64,
    },
    /// The local SG list names the 8 bytes that receive the original value.
    FetchAdd {
        rkey: u32,
        raddr: u64,
        add: u64,
    },
    CmpSwap {
        rkey: u32,
        raddr: u64,
        compare: u64,
        swap: u64,
    },
}

/// A send-queue work request (verbs `ibv_send_wr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    /// Local memory: the source of SEND/WRITE, the destination of READ and ATOMIC results.
    pub sgl: SgList,
    /// Report a completion on success (errors are always reported).
    pub signaled: bool,
    pub solicited: bool,
    /// Start only after every earlier READ and ATOMIC of the stream has completed.
    pub fence: bool,
}

impl SendWr {
    pub fn len(&self) -> u64 {
        self.sgl.iter().map(|s| s.len as u64).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The remote bytes `[lo, hi)` the request names (WRITE and READ: their length; atomics:
    /// 8; SEND and zero-length requests: none), by address alone, since two regions may map
    /// the same memory under different keys. Requesters compare them to keep overlapping
    /// requests in order (spec/transport.md §7.2).
    pub fn remote_range(&self) -> Option<(u64, u64)> {
        let (addr, n) = match self.op {
            SendOp::Write { raddr, .. } | SendOp::Read { raddr, .. } => (raddr, self.len()),
            SendOp::FetchAdd { raddr, .. } | SendOp::CmpSwap { raddr, .. } => (raddr, 8),
            SendOp::Send { .. } => return None,
        };
        (n > 0).then(|| (addr, addr.saturating_add(n)))
    }

    /// Whether this request changes memory an earlier, not yet completed READ with remote
    /// range `read` reads: then it must not start before that READ completes, since a READ's
    /// data may be read again for a resend (spec/transport.md §5.5).
    pub fn overwrites_read(&self, read: (u64, u64)) -> bool {
        !matches!(self.op, SendOp::Read { .. } | SendOp::Send { .. })
            && self
                .remote_range()
                .is_some_and(|(lo, hi)| lo < read.1 && read.0 < hi)
    }
}

/// A receive-queue work request (verbs `ibv_recv_wr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sgl: SgList,
}

/// Completion status (verbs `ibv_wc_status` subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Success,
    /// Local memory of the work request could not be read or written.
    LocalProtection,
    /// A SEND was longer than the receive buffer.
    LocalLength,
    /// The responder refused: rkey, access right or bounds.
    RemoteAccess,
    /// The responder refused: unknown stream, malformed or unsupported request.
    RemoteInvalidRequest,
    /// The responder could not carry out a valid request in its own memory (its receive
    /// names memory it may not write): verbs `IBV_WC_REM_OP_ERR`.
    RemoteOperation,
    /// The peer stopped answering (retry limit reached).
    RetryExceeded,
    /// RNR NACKs exceeded the retry count.
    RnrRetryExceeded,
    /// Flushed because the stream or connection entered the error state.
    Flushed,
    /// The responder's answer did not fit the request (a READ response chunk of the wrong
    /// offset, length or size): verbs `IBV_WC_BAD_RESP_ERR`.
    BadResponse,
}

/// Which operation completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompletionOp {
    Send,
    Write,
    Read,
    FetchAdd,
    CmpSwap,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by a WRITE with immediate.
    RecvWriteImm,
}

/// A work completion (verbs `ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub conn: ConnId,
    pub stream: u32,
    pub wr_id: u64,
    pub status: Status,
    pub op: CompletionOp,
    /// Bytes received (receives) or transferred (requests).
    pub byte_len: u32,
    pub imm: Option<u32>,
    /// A UD receive (RoCEv2 UD QPs): the sender's address and QP number (verbs `src_qp`).
    pub ud_src: Option<UdSource>,
}

/// Where a UD datagram came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdSource {
    pub ip: Ipv4Addr,
    pub qpn: u32,
}

/// Connection-level events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection this endpoint opened is established.
    Connected { conn: ConnId, peer: Ipv4Addr },
    /// A peer opened a connection to this endpoint.
    Accepted { conn: ConnId, peer: Ipv4Addr },
    /// The connection failed (peer silent past the retry limit, or refused).
    Failed { conn: ConnId },
    /// The connection closed.
    Closed { conn: ConnId },
}

/// A datagram the embedder must send: the UDP payload is in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dst: Ipv4Addr,
    /// UDP source port: the path's ECMP entropy.
    pub src_port: u16,
    pub dst_port: u16,
    /// Bytes of the buffer to send.
    pub len: usize,
    /// NIC port (plane) to send it on; 0 on single-port hosts.
    pub port: u8,
}

/// Why a work request or stream operation was refused at post time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    UnknownConnection,
    UnknownStream,
    StreamExists,
    /// The stream is in the error state: flush it or recreate it.
    StreamInError,
    /// Message longer than 2^32 - 1 bytes, or an atomic whose local buffer is not 8 bytes.
    InvalidLength,
    /// The connection is closing or failed.
    ConnectionClosed,
    /// This engine has no such operation (a RoCEv2 engine has no connection to close: its
    /// queue pairs are destroyed one by one).
    Unsupported,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for PostError {}

/// A received UDP datagram and what the embedder knows about it.
#[derive(Clone, Copy, Debug)]
pub struct RxDatagram<'a> {
    /// IPv4 source address and UDP source port (answers reflect the port).
    pub src: std::net::Ipv4Addr,
    pub src_port: u16,
    /// The IP ECN field was CE.
    pub ce: bool,
    /// NIC port (plane) it arrived on; 0 on a single-port host.
    pub nic_port: u8,
    /// The IPv4 and UDP headers as received, when the embedder has them (RoCEv2's ICRC
    /// covers them, with the identification rxe sets); empty otherwise.
    pub ip_hdr: &'a [u8],
    pub udp_hdr: &'a [u8],
    /// The UDP payload.
    pub payload: &'a [u8],
}

impl<'a> RxDatagram<'a> {
    /// A datagram known by its source and ECN mark only (simulator, tests).
    pub fn new(src: std::net::Ipv4Addr, src_port: u16, ce: bool, payload: &'a [u8]) -> Self {
        RxDatagram {
            src,
            src_port,
            ce,
            nic_port: 0,
            ip_hdr: &[],
            udp_hdr: &[],
            payload,
        }
    }

    /// A datagram with its real IPv4 (at least 20 bytes) and UDP (8 bytes) headers; the
    /// source, port and ECN mark are read from them. None if they are too short.
    pub fn from_headers(ip_hdr: &'a [u8], udp_hdr: &'a [u8], payload: &'a [u8]) -> Option<Self> {
        if ip_hdr.len() < 20 || udp_hdr.len() < 8 {
            return None;
        }
        Some(RxDatagram {
            src: std::net::Ipv4Addr::new(ip_hdr[12], ip_hdr[13], ip_hdr[14], ip_hdr[15]),
            src_port: u16::from_be_bytes([udp_hdr[0], udp_hdr[1]]),
            ce: ip_hdr[1] & 3 == 3,
            nic_port: 0,
            ip_hdr,
            udp_hdr,
            payload,
        })
    }

    /// The same datagram, arrived on NIC port `nic_port`.
    pub fn on_port(self, nic_port: u8) -> Self {
        RxDatagram { nic_port, ..self }
    }
}

/// The embedding interface every transport engine of ferroce offers (the native protocol's
/// [`crate::Endpoint`] and the RoCEv2 RC engine): an embedder — the simulator host, the DPDK
/// engine, the verbs shim — drives any of them the same way.
pub trait Transport {
    /// Start talking to `peer`. Native: opens a connection (Event::Connected follows);
    /// RoCEv2: no handshake, Event::Connected is queued at once.
    fn connect(&mut self, peer: std::net::Ipv4Addr) -> ConnId;
    /// Create a stream (native) / an RC queue pair (RoCEv2): `local` is the id the peer sends
    /// to (the local QPN), `remote` the id we send to (the peer's QPN), `pd` the protection
    /// domain remote access is checked against.
    fn create_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError>;
    /// Remove a stream (native) / a queue pair (RoCEv2) with everything it holds; its work
    /// requests complete no more (verbs `IBV_QPS_RESET`: the QP's state is gone). The same
    /// `local` id may then be created again, starting afresh.
    fn destroy_stream(&mut self, c: ConnId, local: u32) -> Result<(), PostError>;
    fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError>;
    fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError>;
    /// A UDP datagram for this engine's port arrived, with everything the embedder knows
    /// about it (one method, so no wrapper can drop a field on the way).
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn crate::mem::Memory);
    /// The next datagram to send, written into `buf`, for one of the NIC ports whose bit is
    /// set in `ready` (they have room; `u64::MAX` on a single-port host). An engine without
    /// planes (RoCEv2) sends on port 0 and ignores the mask.
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn crate::mem::Memory,
        ready: u64,
    ) -> Option<Transmit>;
    /// Close a connection gracefully (native: CLOSE once its work is done).
    fn close(&mut self, c: ConnId) -> Result<(), PostError>;
    fn poll_timeout(&self) -> Option<u64>;
    fn handle_timeout(&mut self, now: u64);
    fn poll_completion(&mut self) -> Option<Completion>;
    fn poll_event(&mut self) -> Option<Event>;
    /// Give back the spare capacity idle connections (and the engine's own queues) hold
    /// since their busiest moment. An embedder calls it now and then (the DPDK engine every
    /// `engine.compact_interval_ms`), never per packet: it walks every connection.
    fn compact_idle(&mut self);
    /// Totals across connections, for benchmarks and counters dumps.
    fn totals(&self) -> TransportTotals;
    /// UDP destination port this engine speaks on (4792 native, 4791 RoCEv2).
    fn udp_port(&self) -> u16;
    /// Whether peers open connections to it (native handshake); a RoCEv2 engine has none, so
    /// both sides call `connect`.
    fn accepts_connections(&self) -> bool;
    /// The engine behind this transport, for what only one kind has (connection walks,
    /// RoCEv2's XRC, UC, UD and CM state, engine counters). A wrapper forwards its inner
    /// engine's.
    fn engine(&self) -> EngineRef<'_>;
    fn engine_mut(&mut self) -> EngineMut<'_>;
}

/// The two engines a [`Transport`] can be, borrowed: a closed set matched by name, so an
/// embedder reaches engine-specific state without a type-erased downcast that a wrapper
/// could silently break.
pub enum EngineRef<'a> {
    Native(&'a crate::endpoint::Endpoint),
    Roce(&'a crate::roce::RoceEndpoint),
}

/// [`EngineRef`], mutably.
pub enum EngineMut<'a> {
    Native(&'a mut crate::endpoint::Endpoint),
    Roce(&'a mut crate::roce::RoceEndpoint),
}

impl<'a> EngineRef<'a> {
    /// The native engine, if it is one.
    pub fn native(self) -> Option<&'a crate::endpoint::Endpoint> {
        match self {
            EngineRef::Native(e) => Some(e),
            EngineRef::Roce(_) => None,
        }
    }

    /// The RoCEv2 engine, if it is one.
    pub fn roce(self) -> Option<&'a crate::roce::RoceEndpoint> {
        match self {
            EngineRef::Roce(e) => Some(e),
            EngineRef::Native(_) => None,
        }
    }
}

impl<'a> EngineMut<'a> {
    /// The native engine, if it is one.
    pub fn native(self) -> Option<&'a mut crate::endpoint::Endpoint> {
        match self {
            EngineMut::Native(e) => Some(e),
            EngineMut::Roce(_) => None,
        }
    }

    /// The RoCEv2 engine, if it is one.
    pub fn roce(self) -> Option<&'a mut crate::roce::RoceEndpoint> {
        match self {
            EngineMut::Roce(e) => Some(e),
            EngineMut::Native(_) => None,
        }
    }
}

/// Engine-independent totals (both directions of every connection).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportTotals {
    pub tx_pkts: u64,
    pub tx_payload_bytes: u64,
    /// Packets that carried data sent before (selective resends or go-back-N replays).
    pub retx_pkts: u64,
    pub rx_pkts: u64,
    pub rx_duplicates: u64,
    pub timeouts: u64,
    pub nacks_sent: u64,
    pub nacks_received: u64,
}
