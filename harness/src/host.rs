//! A simulated host: the real transport [`Endpoint`] on the simulator's NIC, plus an
//! application that runs a [`WorkloadSpec`] as client or server and checks every completion.

use crate::workload::*;
use ferroce_sim::{Datagram, Ecn, Host, Nanos};
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;

mod rounds;

#[derive(Clone, Copy, Debug)]
struct Expect {
    op: OpKind,
    s: u32,
    i: u32,
    len: u32,
    local: u64,
    raddr: u64,
    orig: u64,
    posted_at: u64,
}

/// Client side of the workload: posts work requests and verifies their completions.
#[derive(Debug)]
pub struct Client {
    pub spec: WorkloadSpec,
    pub peer: Ipv4Addr,
    keys: ServerKeys,
    pub conn: Option<ConnId>,
    lkey: u32,
    local_base: u64,
    next_post: Vec<u32>,
    next_done: Vec<u32>,
    atomic_val: Vec<u64>,
    expect: HashMap<u64, Expect>,
    /// Completion time of every work request, minus its post time (ns).
    pub latencies: Vec<u64>,
    pub bytes_done: u64,
    /// When the client started: the `now` of [`NodeHost::start_client`], or the start time of
    /// a delayed client ([`NodeHost::start_client_at`]).
    pub started_at: u64,
    pub finished_at: Option<u64>,
    /// Statuses of failed work requests (tests that expect errors read these).
    pub failures: Vec<(u64, Status)>,
    /// Work requests are first posted at this time (or when the connection is up, if later).
    pub start_at: u64,
    /// Whether the first work requests have been posted.
    pub posted: bool,
    /// When the first work requests were posted (the connection was up and `start_at` due).
    pub first_post_at: Option<u64>,
    /// Work requests posted so far.
    pub posted_wrs: u64,
    /// Work requests completed (successfully or not), over every round.
    pub completed: u64,
    /// Whether to keep every completion's latency in `latencies` (a soak that runs for hours
    /// turns it off so its memory stays flat).
    pub record_latencies: bool,
    /// The round of the workload being run: [`NodeHost::restart_client`] runs the workload
    /// again on the same connection, and the round is part of every work request id, so a
    /// completion from an earlier round is caught.
    pub round: u32,
    /// Which of the server's atomic words this client uses per stream (clients of one server
    /// need their own, since each checks the originals its atomics return).
    pub atomic_lane: u32,
    /// Chained to this host's receives (a ring collective's data dependency): work request
    /// k of stream 0 is posted only once the host's server role has completed k receives,
    /// i.e. the previous step's chunk has arrived. See [`NodeHost::chain_client`].
    pub chained: bool,
    /// Work requests of stream 0 allowed so far when `chained`.
    post_limit: u32,
    /// The server's number for stream 0 (its [`NodeHost::server_streams_from`]); this
    /// client's own streams are 1, 2, ...
    remote_streams_from: u32,
}

impl Client {
    /// Work requests the workload has in total.
    pub fn total_wrs(&self) -> u64 {
        self.spec.streams as u64 * self.spec.messages as u64
    }

    /// Work requests that completed successfully.
    pub fn completed_ok(&self) -> u64 {
        self.completed - self.failures.len() as u64
    }

    pub fn done(&self) -> bool {
        self.finished_at.is_some()
    }
}

/// Server side: keeps receives posted and verifies what arrives, for any number of client
/// connections at once. Every client shares the server's WRITE, READ and atomic regions (the
/// clients of one server run the same workload, so they write the same bytes into the same
/// slots); each connection gets receive buffers of its own.
#[derive(Debug)]
pub struct Server {
    pub spec: WorkloadSpec,
    pub keys: ServerKeys,
    recv_lkey: u32,
    consuming: Vec<Vec<u32>>,
    /// Per connection: receive region key and next receive index per stream.
    per_conn: HashMap<ConnId, ServerConn>,
    pub recvs_done: u64,
    pub conns: Vec<ConnId>,
    /// Zero each receive buffer's bytes once checked (a soak's rounds send the same patterns
    /// again: a receive that completes without its data placed then shows zeros).
    pub scrub_receives: bool,
    /// This role's number for stream 0 (see [`NodeHost::set_server_streams_from`]).
    first_stream: u32,
}

#[derive(Debug)]
struct ServerConn {
    recv_lkey: u32,
    next_recv: Vec<u32>,
    /// The client's round these receives are for (see [`Client::round`]).
    round: u32,
}

/// What a connection of this host is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnRole {
    /// Index into [`NodeHost::clients`].
    Client(usize),
    Server,
}

/// The transport core plus its application on one simulated host.
pub struct NodeHost {
    /// The engine: native [`Endpoint`] or any other [`Transport`].
    pub ep: Box<dyn Transport>,
    pub mem: Regions,
    pub ip: Ipv4Addr,
    /// Client roles, one per server this host sends to (in the order they were started).
    pub clients: Vec<Client>,
    /// Server role, serving every client that connects.
    pub server_role: Option<Box<Server>>,
    /// Every verification failure, with what was expected.
    pub errors: Vec<String>,
    /// The engine picks NIC ports itself (a native endpoint with several `nic_ports`);
    /// otherwise the simulated NIC hashes the 5-tuple onto a port.
    pub port_aware: bool,
    /// Completions and events of a host without a scripted role (tests drive it by hand).
    pub completions: Vec<Completion>,
    pub events: Vec<Event>,
    /// Whether to keep every event in `events` (on by default; large runs turn it off).
    pub record_events: bool,
    conn_roles: HashMap<ConnId, ConnRole>,
    /// Clients whose connection is up but whose start time has not come yet.
    waiting: Vec<usize>,
    /// The earliest start time in `waiting`: the simulator asks for the host's deadline
    /// after every input, and 1,023 waiting clients (all-to-all on 1,024 hosts) made each
    /// ask a scan of them all.
    waiting_first: Option<u64>,
    /// The engine's deadline as last reported by `poll_timeout` (the simulator asks after
    /// every input, so it is current whenever the host's timer fires).
    ep_deadline: Option<u64>,
    /// The server role numbers its streams from here (see
    /// [`NodeHost::set_server_streams_from`]).
    server_streams_from: u32,
    buf: Vec<u8>,
}

/// Atomic words per stream at a server: the clients of one server use lanes 0, 1, ...
pub const ATOMIC_LANES: u32 = 64;

/// Work request ids: round in bits 48..64, stream in 32..48, index in 0..32.
fn wr_id(round: u32, s: u32, i: u32) -> u64 {
    ((round as u64 & 0xffff) << 48) | ((s as u64 & 0xffff) << 32) | i as u64
}

/// (round, stream, index) of a work request id.
fn wr_parts(id: u64) -> (u32, u32, u32) {
    ((id >> 48) as u32, ((id >> 32) & 0xffff) as u32, id as u32)
}

impl std::fmt::Debug for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHost")
            .field("ip", &self.ip)
            .field("clients", &self.clients.len())
            .field("server", &self.server_role.is_some())
            .field("errors", &self.errors.len())
            .finish()
    }
}

impl NodeHost {
    /// A host running the native protocol.
    pub fn new(ip: [u8; 4], cfg: EndpointConfig) -> Self {
        let aware = cfg.nic_ports > 1;
        let mut h = Self::with_engine(ip, Box::new(Endpoint::new(cfg)));
        h.port_aware = aware;
        h
    }

    /// A host running any engine.
    pub fn with_engine(ip: [u8; 4], ep: Box<dyn Transport>) -> Self {
        NodeHost {
            ep,
            port_aware: false,
            mem: Regions::new(),
            ip: Ipv4Addr::from(ip),
            clients: Vec::new(),
            server_role: None,
            errors: Vec::new(),
            completions: Vec::new(),
            events: Vec::new(),
            record_events: true,
            conn_roles: HashMap::new(),
            waiting: Vec::new(),
            waiting_first: None,
            ep_deadline: None,
            server_streams_from: 1,
            buf: vec![0; 65_536 + 256],
        }
    }

    /// The native endpoint, when this host runs the native protocol.
    pub fn native(&self) -> Option<&Endpoint> {
        self.ep.engine().native()
    }

    pub fn native_mut(&mut self) -> Option<&mut Endpoint> {
        self.ep.engine_mut().native()
    }

    /// Make this host the workload's server for `clients`; returns the keys the clients need.
    /// Engines without a handshake (RoCEv2) connect to each client themselves.
    pub fn make_server_for(&mut self, spec: &WorkloadSpec, clients: &[[u8; 4]]) -> ServerKeys {
        let keys = match self.server_role.as_ref() {
            Some(sv) => sv.keys,
            None => self.make_server(spec),
        };
        self.serve_more(clients);
        keys
    }

    /// Engines without a handshake (RoCEv2): open the server side of the connection to each
    /// of these clients (a no-op for the native protocol, whose clients open connections).
    pub fn serve_more(&mut self, clients: &[[u8; 4]]) {
        if !self.ep.accepts_connections() {
            for c in clients {
                let conn = self.ep.connect(Ipv4Addr::from(*c));
                self.conn_roles.insert(conn, ConnRole::Server);
            }
        }
    }

    /// Number the server role's streams `first`, `first + 1`, ... instead of 1, 2, ... (the
    /// clients' own streams stay 1, 2, ...). A RoCEv2 engine keys its QPs by (peer, QPN)
    /// and the harness opens a connection per role, so a host that is both the client and
    /// the server of the same peer (all-to-all: one QP per ordered host pair) needs its
    /// server QPs numbered apart from its client QPs, or the second `create_stream` fails
    /// with `StreamExists`. Call before [`NodeHost::make_server`]; clients started later
    /// through [`crate::multi::start_flows`] learn it. Opt-in: it changes the QPNs and so
    /// the UDP source ports a RoCEv2 responder sends from.
    pub fn set_server_streams_from(&mut self, first: u32) {
        self.server_streams_from = first.max(1);
    }

    /// The number of the server role's stream 0 (1 unless set otherwise).
    pub fn server_streams_from(&self) -> u32 {
        self.server_streams_from
    }

    /// Make this host the workload's server; returns the keys the client needs.
    pub fn make_server(&mut self, spec: &WorkloadSpec) -> ServerKeys {
        let ms = spec.max_size() as u64;
        let n = spec.streams as u64;
        let layout = ServerLayout {
            recv_base: 0x1000_0000,
            write_base: 0x2000_0000,
            read_base: 0x3000_0000,
            atomic_base: 0x4000_0000,
            slot: ms,
        };
        let recv_lkey = self.mem.register(
            SERVER_PD,
            layout.recv_base,
            (n * spec.recv_depth as u64 * ms) as usize,
            access::LOCAL_WRITE,
        );
        let write_rkey = self.mem.register(
            SERVER_PD,
            layout.write_base,
            (n * spec.write_slots() as u64 * ms) as usize,
            WRITE_ACCESS,
        );
        let read_len = (ms * 4).max(1 << 16);
        let read_rkey = self.mem.register(
            SERVER_PD,
            layout.read_base,
            read_len as usize,
            access::REMOTE_READ,
        );
        if let Some(r) = self.mem.region_mut(read_rkey) {
            for (a, b) in r.data.iter_mut().enumerate() {
                *b = read_source_byte(a as u64);
            }
        }
        let atomic_rkey = self.mem.register(
            SERVER_PD,
            layout.atomic_base,
            (n * 8 * ATOMIC_LANES as u64) as usize,
            access::REMOTE_ATOMIC | access::LOCAL_WRITE,
        );
        let keys = ServerKeys {
            layout,
            write_rkey,
            read_rkey,
            read_len,
            atomic_rkey,
        };
        self.server_role = Some(Box::new(Server {
            spec: spec.clone(),
            keys,
            recv_lkey,
            consuming: (0..spec.streams).map(|s| spec.consuming(s)).collect(),
            per_conn: HashMap::new(),
            recvs_done: 0,
            conns: Vec::new(),
            scrub_receives: false,
            first_stream: self.server_streams_from,
        }));
        keys
    }

    /// Make this host the workload's client and open the connection at `now`; work requests
    /// are posted as soon as the connection is up. A host can be the client of several
    /// servers: each call adds a client role (see [`NodeHost::clients`]) and returns its index.
    pub fn start_client(
        &mut self,
        spec: &WorkloadSpec,
        peer: [u8; 4],
        keys: ServerKeys,
        now: u64,
    ) -> usize {
        self.start_client_at(spec, peer, keys, now, now)
    }

    /// Like [`NodeHost::start_client`], but the first work requests are posted at `start_at`
    /// (or when the connection is up, if that is later): the connection is opened at once, so
    /// a late joiner or a synchronised start does not include the handshake.
    pub fn start_client_at(
        &mut self,
        spec: &WorkloadSpec,
        peer: [u8; 4],
        keys: ServerKeys,
        now: u64,
        start_at: u64,
    ) -> usize {
        self.start_client_to(spec, peer, keys, 1, now, start_at)
    }

    /// Like [`NodeHost::start_client_at`], towards a server whose streams are numbered from
    /// `remote_first` (its [`NodeHost::server_streams_from`]).
    pub fn start_client_to(
        &mut self,
        spec: &WorkloadSpec,
        peer: [u8; 4],
        keys: ServerKeys,
        remote_first: u32,
        now: u64,
        start_at: u64,
    ) -> usize {
        let ms = spec.max_size() as u64;
        let idx = self.clients.len();
        // Each client role gets its own send buffers, 64 GiB apart in the address space.
        let local_base = 0x7000_0000 + ((idx as u64) << 36);
        let lkey = self.mem.register(
            CLIENT_PD,
            local_base,
            (spec.streams as u64 * spec.depth as u64 * ms) as usize,
            access::LOCAL_WRITE,
        );
        let peer = Ipv4Addr::from(peer);
        let conn = self.ep.connect(peer);
        self.conn_roles.insert(conn, ConnRole::Client(idx));
        let n = spec.streams as usize;
        self.clients.push(Client {
            spec: spec.clone(),
            peer,
            keys,
            conn: Some(conn),
            lkey,
            local_base,
            next_post: vec![0; n],
            next_done: vec![0; n],
            atomic_val: vec![0; n],
            expect: HashMap::new(),
            latencies: Vec::new(),
            bytes_done: 0,
            started_at: start_at.max(now),
            finished_at: None,
            failures: Vec::new(),
            start_at: start_at.max(now),
            posted: false,
            first_post_at: None,
            posted_wrs: 0,
            completed: 0,
            record_latencies: true,
            round: 0,
            atomic_lane: 0,
            chained: false,
            post_limit: u32::MAX,
            remote_streams_from: remote_first,
        });
        idx
    }

    /// Chain client `idx` to this host's receives: its work request k (stream 0) is posted
    /// only after the server role has completed k receives (WRITE_WITH_IMM or SEND from the
    /// upstream host), so each step of a ring starts when the previous step's data is here.
    /// Call before the client's start time.
    pub fn chain_client(&mut self, idx: usize) {
        let done = self.server_role.as_ref().map_or(0, |s| s.recvs_done);
        if let Some(cl) = self.clients.get_mut(idx) {
            cl.chained = true;
            cl.post_limit = (done + 1).min(u32::MAX as u64) as u32;
        }
    }

    /// A receive completed: let chained clients post the work it unblocked.
    fn release_chained(&mut self, now: u64) {
        let done = self.server_role.as_ref().map_or(0, |s| s.recvs_done);
        let limit = (done + 1).min(u32::MAX as u64) as u32;
        for cl in self.clients.iter_mut().filter(|c| c.chained) {
            if limit <= cl.post_limit {
                continue;
            }
            cl.post_limit = limit;
            if !cl.posted {
                continue;
            }
            while cl.next_post[0] < limit.min(cl.spec.messages)
                && cl.next_post[0] - cl.next_done[0] < cl.spec.depth
            {
                Self::post_next(&mut *self.ep, &mut self.mem, cl, 0, now, &mut self.errors);
            }
        }
    }

    /// The first client role, if any.
    pub fn client(&self) -> Option<&Client> {
        self.clients.first()
    }

    pub fn server(&self) -> Option<&Server> {
        self.server_role.as_deref()
    }

    /// Whether this host has client roles and every one has seen all its work requests
    /// complete.
    pub fn client_done(&self) -> bool {
        !self.clients.is_empty() && self.clients.iter().all(|c| c.finished_at.is_some())
    }

    fn pump(&mut self, now: u64) {
        while let Some(ev) = self.ep.poll_event() {
            self.on_event(now, ev);
        }
        while let Some(c) = self.ep.poll_completion() {
            self.on_completion(now, c);
        }
    }

    fn on_event(&mut self, now: u64, ev: Event) {
        if self.record_events {
            self.events.push(ev);
        }
        match ev {
            Event::Connected { conn, .. } | Event::Accepted { conn, .. } => {
                match self.conn_roles.get(&conn).copied() {
                    Some(ConnRole::Client(idx)) => {
                        let cl = &self.clients[idx];
                        for s in 0..cl.spec.streams {
                            let remote = cl.remote_streams_from + s;
                            if let Err(e) = self.ep.create_stream(conn, s + 1, remote, CLIENT_PD) {
                                self.errors.push(format!("create_stream: {e}"));
                            }
                        }
                        if now >= cl.start_at {
                            self.post_initial(idx, now);
                        } else {
                            self.waiting.push(idx);
                            let at = cl.start_at;
                            self.waiting_first = Some(self.waiting_first.map_or(at, |t| t.min(at)));
                        }
                    }
                    Some(ConnRole::Server) | None if self.server_role.is_some() => {
                        self.conn_roles.insert(conn, ConnRole::Server);
                        self.accept_server_conn(conn);
                    }
                    _ => {}
                }
            }
            Event::Failed { conn } => {
                if let Some(ConnRole::Client(idx)) = self.conn_roles.get(&conn).copied() {
                    if self.clients[idx].finished_at.is_none() {
                        self.errors
                            .push(format!("connection of client {idx} failed at {now} ns"));
                    }
                }
            }
            _ => {}
        }
    }

    /// Post the first `depth` work requests of every stream of client `idx`.
    fn post_initial(&mut self, idx: usize, now: u64) {
        let cl = &mut self.clients[idx];
        if cl.posted {
            return;
        }
        cl.posted = true;
        cl.first_post_at = Some(now);
        for s in 0..cl.spec.streams {
            for _ in 0..cl.spec.depth {
                Self::post_next(&mut *self.ep, &mut self.mem, cl, s, now, &mut self.errors);
            }
        }
    }

    fn accept_server_conn(&mut self, conn: ConnId) {
        let Some(sv) = self.server_role.as_deref_mut() else {
            return;
        };
        if sv.per_conn.contains_key(&conn) {
            return;
        }
        // The first connection uses the receive region registered by `make_server`; later ones
        // get their own (only when the workload consumes receives at all).
        let recv_lkey = if sv.per_conn.is_empty() || sv.consuming.iter().all(Vec::is_empty) {
            sv.recv_lkey
        } else {
            let ms = sv.spec.max_size() as u64;
            self.mem.register(
                SERVER_PD,
                sv.keys.layout.recv_base,
                (sv.spec.streams as u64 * sv.spec.recv_depth as u64 * ms) as usize,
                access::LOCAL_WRITE,
            )
        };
        sv.conns.push(conn);
        sv.per_conn.insert(
            conn,
            ServerConn {
                recv_lkey,
                next_recv: vec![0; sv.spec.streams as usize],
                round: 0,
            },
        );
        for s in 0..sv.spec.streams {
            if let Err(e) = self
                .ep
                .create_stream(conn, sv.first_stream + s, s + 1, SERVER_PD)
            {
                self.errors.push(format!("create_stream: {e}"));
            }
            for _ in 0..sv.spec.recv_depth {
                Self::post_recv(&mut *self.ep, sv, conn, s, &mut self.errors);
            }
        }
    }

    fn post_recv(
        ep: &mut dyn Transport,
        sv: &mut Server,
        conn: ConnId,
        s: u32,
        errors: &mut Vec<String>,
    ) {
        let Some(pc) = sv.per_conn.get_mut(&conn) else {
            return;
        };
        let k = pc.next_recv[s as usize];
        if k as usize >= sv.consuming[s as usize].len() {
            return;
        }
        pc.next_recv[s as usize] += 1;
        let slot = (s * sv.spec.recv_depth + k % sv.spec.recv_depth) as u64;
        let wr = RecvWr {
            wr_id: wr_id(pc.round, s, k),
            sgl: [Sge {
                lkey: pc.recv_lkey,
                addr: sv.keys.layout.recv_base + slot * sv.keys.layout.slot,
                len: sv.keys.layout.slot as u32,
            }]
            .into_iter()
            .collect(),
        };
        if let Err(e) = ep.post_recv(conn, sv.first_stream + s, wr) {
            errors.push(format!("post_recv: {e}"));
        }
    }

    fn post_next(
        ep: &mut dyn Transport,
        mem: &mut Regions,
        cl: &mut Client,
        s: u32,
        now: u64,
        errors: &mut Vec<String>,
    ) {
        let su = s as usize;
        let i = cl.next_post[su];
        if i >= cl.spec.messages || (cl.chained && s == 0 && i >= cl.post_limit) {
            return;
        }
        cl.next_post[su] += 1;
        let Some(conn) = cl.conn else { return };
        let (op, size) = cl.spec.op_at(s, i);
        let ms = cl.spec.max_size() as u64;
        let local =
            cl.local_base + (s as u64 * cl.spec.depth as u64 + (i % cl.spec.depth) as u64) * ms;
        let lay = cl.keys.layout;
        if matches!(
            op,
            OpKind::Send | OpKind::SendImm | OpKind::Write | OpKind::WriteImm
        ) {
            if let Some(r) = mem.region_mut(cl.lkey) {
                let off = (local - r.addr) as usize;
                fill_pattern(&mut r.data[off..off + size as usize], s, i);
            }
        }
        let slots = cl.spec.write_slots();
        let write_addr = lay.write_base + ((s * slots + i % slots) as u64) * lay.slot;
        let read_addr =
            lay.read_base + ((s as u64 * 4099 + i as u64 * 64) % (cl.keys.read_len - ms));
        let lane = cl.atomic_lane.min(ATOMIC_LANES - 1) as u64;
        let atomic_addr = lay.atomic_base + (lane * cl.spec.streams as u64 + s as u64) * 8;
        let mut orig = 0;
        let (sop, raddr) = match op {
            OpKind::Send => (SendOp::Send { imm: None }, 0),
            OpKind::SendImm => (
                SendOp::Send {
                    imm: Some(imm_of(s, i)),
                },
                0,
            ),
            OpKind::Write => (
                SendOp::Write {
                    rkey: cl.keys.write_rkey,
                    raddr: write_addr,
                    imm: None,
                },
                write_addr,
            ),
            OpKind::WriteImm => (
                SendOp::Write {
                    rkey: cl.keys.write_rkey,
                    raddr: write_addr,
                    imm: Some(imm_of(s, i)),
                },
                write_addr,
            ),
            OpKind::Read => (
                SendOp::Read {
                    rkey: cl.keys.read_rkey,
                    raddr: read_addr,
                },
                read_addr,
            ),
            OpKind::FetchAdd => {
                orig = cl.atomic_val[su];
                cl.atomic_val[su] = orig.wrapping_add(i as u64 + 1);
                (
                    SendOp::FetchAdd {
                        rkey: cl.keys.atomic_rkey,
                        raddr: atomic_addr,
                        add: i as u64 + 1,
                    },
                    atomic_addr,
                )
            }
            OpKind::CmpSwap => {
                orig = cl.atomic_val[su];
                let swap = orig.wrapping_add(1000 + i as u64);
                cl.atomic_val[su] = swap;
                (
                    SendOp::CmpSwap {
                        rkey: cl.keys.atomic_rkey,
                        raddr: atomic_addr,
                        compare: orig,
                        swap,
                    },
                    atomic_addr,
                )
            }
        };
        let id = wr_id(cl.round, s, i);
        cl.expect.insert(
            id,
            Expect {
                op,
                s,
                i,
                len: size,
                local,
                raddr,
                orig,
                posted_at: now,
            },
        );
        let wr = SendWr {
            wr_id: id,
            op: sop,
            sgl: [Sge {
                lkey: cl.lkey,
                addr: local,
                len: size,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        cl.posted_wrs += 1;
        if let Err(e) = ep.post_send(conn, s + 1, wr) {
            errors.push(format!("post_send stream {s} wr {i}: {e}"));
        }
    }

    fn on_completion(&mut self, now: u64, c: Completion) {
        match self.conn_roles.get(&c.conn).copied() {
            Some(ConnRole::Client(idx)) => {
                let cl = &mut self.clients[idx];
                let Some(x) = cl.expect.remove(&c.wr_id) else {
                    self.errors
                        .push(format!("unexpected or duplicate completion {c:?}"));
                    return;
                };
                let su = x.s as usize;
                if cl.next_done[su] != x.i {
                    self.errors.push(format!(
                        "stream {} completed wr {} before wr {}",
                        x.s, x.i, cl.next_done[su]
                    ));
                }
                cl.next_done[su] = x.i + 1;
                if c.status != Status::Success {
                    cl.failures.push((c.wr_id, c.status));
                    self.errors.push(format!(
                        "stream {} wr {} ({:?}) failed: {:?}",
                        x.s, x.i, x.op, c.status
                    ));
                } else {
                    let r = self.mem.region(cl.lkey);
                    let local = r.map(|r| {
                        let off = (x.local - r.addr) as usize;
                        &r.data[off..off + x.len as usize]
                    });
                    match (x.op, local) {
                        (OpKind::Read, Some(buf)) => {
                            let base = x.raddr - cl.keys.layout.read_base;
                            if let Some(j) = (0..buf.len())
                                .find(|&j| buf[j] != read_source_byte(base + j as u64))
                            {
                                self.errors
                                    .push(format!("stream {} read {}: byte {j} wrong", x.s, x.i));
                            }
                        }
                        (OpKind::FetchAdd | OpKind::CmpSwap, Some(buf)) => {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&buf[..8]);
                            let got = u64::from_ne_bytes(b);
                            if got != x.orig {
                                self.errors.push(format!(
                                    "stream {} atomic {}: original {got}, expected {}",
                                    x.s, x.i, x.orig
                                ));
                            }
                        }
                        _ => {}
                    }
                    if !x.op.is_atomic() {
                        cl.bytes_done += x.len as u64;
                    }
                }
                cl.completed += 1;
                if cl.record_latencies {
                    cl.latencies.push(now - x.posted_at);
                }
                let s = x.s;
                Self::post_next(&mut *self.ep, &mut self.mem, cl, s, now, &mut self.errors);
                if cl.next_done.iter().all(|&d| d >= cl.spec.messages) && cl.finished_at.is_none() {
                    cl.finished_at = Some(now);
                }
            }
            Some(ConnRole::Server) if self.server_role.is_some() => {
                let Some(sv) = self.server_role.as_deref_mut() else {
                    return;
                };
                let (round, s, k) = wr_parts(c.wr_id);
                let want_round = sv.per_conn.get(&c.conn).map(|p| p.round);
                if want_round != Some(round) {
                    self.errors.push(format!(
                        "receive completion of round {round}, expected round {want_round:?}: {c:?}"
                    ));
                    return;
                }
                let Some(&i) = sv.consuming.get(s as usize).and_then(|v| v.get(k as usize)) else {
                    self.errors
                        .push(format!("unexpected receive completion {c:?}"));
                    return;
                };
                if c.status != Status::Success {
                    self.errors
                        .push(format!("stream {s} receive {k} failed: {:?}", c.status));
                    return;
                }
                sv.recvs_done += 1;
                let (op, size) = sv.spec.op_at(s, i);
                if c.byte_len != size {
                    self.errors.push(format!(
                        "stream {s} recv {k}: {} bytes, expected {size}",
                        c.byte_len
                    ));
                }
                let want_imm =
                    matches!(op, OpKind::SendImm | OpKind::WriteImm).then(|| imm_of(s, i));
                if c.imm != want_imm {
                    self.errors.push(format!(
                        "stream {s} recv {k}: imm {:?}, expected {want_imm:?}",
                        c.imm
                    ));
                }
                let lay = sv.keys.layout;
                let (key, addr) = if op == OpKind::WriteImm {
                    (
                        sv.keys.write_rkey,
                        lay.write_base
                            + ((s * sv.spec.write_slots() + i % sv.spec.write_slots()) as u64)
                                * lay.slot,
                    )
                } else {
                    (
                        sv.per_conn
                            .get(&c.conn)
                            .map_or(sv.recv_lkey, |p| p.recv_lkey),
                        lay.recv_base
                            + ((s * sv.spec.recv_depth + k % sv.spec.recv_depth) as u64) * lay.slot,
                    )
                };
                if let Some(r) = self.mem.region(key) {
                    let off = (addr - r.addr) as usize;
                    let bytes = &r.data[off..off + size as usize];
                    let bad = if op == OpKind::WriteImm {
                        sv.spec.check_write_slot(bytes, s, i)
                    } else {
                        check_pattern(bytes, s, i)
                    };
                    if let Some(j) = bad {
                        self.errors
                            .push(format!("stream {s} message {i} ({op:?}): byte {j} wrong"));
                    }
                }
                // WRITE_WITH_IMM data stays: the end-of-round check reads the write slots.
                if sv.scrub_receives && op != OpKind::WriteImm {
                    if let Some(r) = self.mem.region_mut(key) {
                        let off = (addr - r.addr) as usize;
                        r.data[off..off + size as usize].fill(0);
                    }
                }
                let conn = c.conn;
                Self::post_recv(&mut *self.ep, sv, conn, s, &mut self.errors);
                self.release_chained(now);
            }
            _ => self.completions.push(c),
        }
    }

    /// Post the work of delayed clients whose start time has come.
    fn start_due(&mut self, now: u64) {
        if self.waiting_first.is_none_or(|t| t > now) {
            return;
        }
        let mut i = 0;
        while i < self.waiting.len() {
            let idx = self.waiting[i];
            if self.clients[idx].start_at <= now {
                self.waiting.swap_remove(i);
                self.post_initial(idx, now);
            } else {
                i += 1;
            }
        }
        self.waiting_first = self.waiting.iter().map(|&i| self.clients[i].start_at).min();
    }

    fn next_start(&self) -> Option<u64> {
        self.waiting_first
    }
}

impl Host for NodeHost {
    fn handle_datagram(&mut self, now: Nanos, port: usize, d: Datagram) {
        if d.dst_port != self.ep.udp_port() {
            return;
        }
        let ce = d.ecn == Ecn::Ce;
        let rx = RxDatagram::new(Ipv4Addr::from(d.src_ip), d.src_port, ce, &d.payload)
            .on_port(port.min(255) as u8);
        self.ep.receive(now, &rx, &mut self.mem);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Datagram> {
        let t = self
            .ep
            .transmit(now, &mut self.buf, &mut self.mem, u64::MAX);
        self.pump(now);
        let t = t?;
        Some(Datagram {
            src_ip: self.ip.octets(),
            dst_ip: t.dst.octets(),
            src_port: t.src_port,
            dst_port: t.dst_port,
            ecn: Ecn::Ect0,
            payload: self.buf[..t.len].to_vec(),
        })
    }

    fn poll_transmit_ports(&mut self, now: Nanos, ready: u64) -> Option<(Datagram, Option<usize>)> {
        let t = self.ep.transmit(now, &mut self.buf, &mut self.mem, ready);
        self.pump(now);
        let t = t?;
        let d = Datagram {
            src_ip: self.ip.octets(),
            dst_ip: t.dst.octets(),
            src_port: t.src_port,
            dst_port: t.dst_port,
            ecn: Ecn::Ect0,
            payload: self.buf[..t.len].to_vec(),
        };
        Some((d, self.port_aware.then_some(t.port as usize)))
    }

    fn poll_timeout(&mut self) -> Option<Nanos> {
        let ep = self.ep.poll_timeout();
        self.ep_deadline = ep;
        match self.next_start() {
            None => ep,
            Some(s) => Some(ep.map_or(s, |e| e.min(s))),
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        // Only the client start times are the harness's own timers: skip the engine when its
        // deadline is not due (asking it again would cost a full scan of its connections).
        if self.waiting.is_empty() || self.ep_deadline.is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.start_due(now);
        self.pump(now);
    }
}
