-- Wireshark dissector for the native ferroce protocol (spec/wire.md, UDP port 4792).
--
--   tshark -X lua_script:spec/wireshark/ferroce.lua -r capture.pcap
--   wireshark -X lua_script:spec/wireshark/ferroce.lua capture.pcap
--
-- or copy this file into the personal Lua plugins folder (~/.local/lib/wireshark/plugins/,
-- Help > About > Folders). RoCEv2 on UDP 4791 is left to Wireshark's own InfiniBand dissector.
-- Tested with Wireshark 4.0 (Lua 5.2, Debian 12). For Lua 5.4 builds (Wireshark >= 4.4) the
-- bit operations fall back to the native operators; that path is untested here.
--
-- Every header and field of wire.md is shown under its spec name; the CRC-32 trailer (§2.15)
-- is verified; and every check of §3 a receiver must drop on is applied in the spec's order:
-- the first failure is shown as `ferroce.drop` (TRUNCATED, BAD_VERSION, BAD_OPCODE, MALFORMED,
-- BAD_CRC: the drop counters of transport.md §11) with an expert error. Spec violations that
-- do not make a receiver drop (reserved bits, flags on opcodes that do not define them) are
-- expert notes. Unknown opcodes are flagged, never a Lua error, so a capture from a newer
-- version still dissects. The connection manager's packets (opcodes 0x40-0x47, spec/cm.md)
-- are decoded too, with cm.md §1.7's checks in its order.
--
-- tests/tests/dissector.rs runs the test vectors, mutations of them and live captures through
-- this file and through the Rust codec (transport/src/wire) and requires the two to agree on
-- every field the codec exposes and on every verdict (the CM's against transport/src/cm). A change to wire.md (a new opcode, say)
-- changes this file too: until then such packets are flagged BAD_OPCODE and that test fails.

local NATIVE_PORT = 4792

local p = Proto("ferroce", "ferroce native transport")

-- The port is a preference (Edit > Preferences > Protocols > ferroce) for captures of a test
-- setup on another port; "Decode As..." works as well.
p.prefs.udp_port = Pref.uint("UDP port", NATIVE_PORT, "UDP port of native ferroce packets (wire.md §1: 4792)")
local registered_port = NATIVE_PORT

-- Bit operations: Lua 5.2 (Wireshark <= 4.2) has bit32; Lua 5.4 has native operators, which
-- the 5.2 parser would reject, so they are compiled from a string only when needed.
local band, bxor, rshift
if bit32 then
    band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
else
    band, bxor, rshift = load([[
        return function(a, b) return a & b end,
               function(a, b) return a ~ b end,
               function(a, n) return (a & 0xffffffff) >> n end
    ]])()
end

-- CRC-32 of IEEE 802.3 / zlib (reflected polynomial 0xEDB88320, init and final XOR all ones).
local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then
            c = bxor(rshift(c, 1), 0xEDB88320)
        else
            c = rshift(c, 1)
        end
    end
    CRC_TABLE[i] = c
end

local function crc32(s)
    local c = 0xFFFFFFFF
    for i = 1, #s do
        c = bxor(CRC_TABLE[band(bxor(c, s:byte(i)), 0xFF)], rshift(c, 8))
    end
    -- Normalised to 0 .. 2^32-1 (bxor may return a signed or unsigned 32-bit value).
    return bxor(c, 0xFFFFFFFF) % 4294967296
end

-- Table 2.2. `h`: bytes of headers after the base header; `payload`: a payload may follow.
-- The structure checks (§3 checks 3-5) read only this table; the body decoders are chosen by
-- opcode in p.dissector. A new opcode is one row here and one branch there; a row without a
-- branch still dissects, its body shown as undecoded bytes.
local OPS = {
    [0x01] = { name = "SEND", h = 32, payload = true },
    [0x02] = { name = "SEND_IMM", h = 36, payload = true },
    [0x03] = { name = "WRITE", h = 40, payload = true },
    [0x04] = { name = "WRITE_IMM", h = 48, payload = true },
    [0x05] = { name = "READ_REQ", h = 40, payload = false },
    [0x06] = { name = "READ_RESP", h = 28, payload = true },
    [0x07] = { name = "FETCH_ADD", h = 48, payload = false },
    [0x08] = { name = "CMP_SWAP", h = 56, payload = false },
    [0x09] = { name = "ATOMIC_RESP", h = 36, payload = false },
    [0x10] = { name = "ACK", h = 52, payload = false },
    [0x11] = { name = "NACK", h = 16, payload = false },
    -- ACK_MULTI: `h` is its fixed part; its blocks fill the rest (`blocks`: exempt from check 5).
    [0x12] = { name = "ACK_MULTI", h = 8, payload = false, blocks = true },
    [0x20] = { name = "OPEN", h = 12, payload = false },
    [0x21] = { name = "OPEN_ACK", h = 12, payload = false },
    [0x22] = { name = "CLOSE", h = 8, payload = false },
    [0x23] = { name = "CLOSE_ACK", h = 8, payload = false },
    [0x30] = { name = "PROBE", h = 8, payload = false },
    [0x31] = { name = "PROBE_ACK", h = 8, payload = false },
    -- The connection manager (cm.md §1): `h` is the fixed part, private data follows
    -- (`cm`: exempt from check 5, judged by cm.md §1.7 in dissect_cm; `pd_at`: pd_len's
    -- offset, `pd_max`: its limit).
    [0x40] = { name = "CM_REQ", h = 28, payload = false, cm = true, pd_at = 18, pd_max = 56 },
    [0x41] = { name = "CM_REP", h = 16, payload = false, cm = true, pd_at = 23, pd_max = 196 },
    [0x42] = { name = "CM_RTU", h = 8, payload = false, cm = true, pd_at = 12, pd_max = 224 },
    [0x43] = { name = "CM_REJ", h = 8, payload = false, cm = true, pd_at = 15, pd_max = 148 },
    [0x44] = { name = "CM_DREQ", h = 8, payload = false, cm = true, pd_at = 12, pd_max = 220 },
    [0x45] = { name = "CM_DREP", h = 8, payload = false, cm = true, pd_at = 12, pd_max = 224 },
    [0x46] = { name = "CM_SIDR_REQ", h = 16, payload = false, cm = true, pd_at = 18, pd_max = 180 },
    [0x47] = { name = "CM_SIDR_REP", h = 16, payload = false, cm = true, pd_at = 13, pd_max = 136 },
}

local OPCODE_NAMES = {}
for v, o in pairs(OPS) do
    OPCODE_NAMES[v] = o.name
end

-- Flags (§2.3) by mask.
local FLAG = { ACK_REQ = 0x01, LAST = 0x02, RETX = 0x04, SOLICITED = 0x08, BACKLOG = 0x10, ORDERED = 0x20,
    UNRELIABLE = 0x40 }
local FLAG_ORDER = { "ACK_REQ", "LAST", "RETX", "SOLICITED", "BACKLOG", "ORDERED", "UNRELIABLE" }
local FLAGS_RESERVED = 0x80

local NACK_REASONS = {
    [1] = "RemoteAccess",
    [2] = "InvalidRequest",
    [3] = "ReceiverNotReady",
    [4] = "Sequence",
    [5] = "RemoteOperation",
}

-- Checksum status values as Wireshark's own dissectors use them (PROTO_CHECKSUM_E_*).
local CRC_STATUS = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }

local f = {
    version = ProtoField.uint8("ferroce.version", "Version", base.DEC),
    opcode = ProtoField.uint8("ferroce.opcode", "Opcode", base.HEX, OPCODE_NAMES),
    flags = ProtoField.uint8("ferroce.flags", "Flags", base.HEX),
    flag_reserved = ProtoField.uint8("ferroce.flags.reserved", "reserved", base.HEX, nil, FLAGS_RESERVED),
    flag_unreliable = ProtoField.bool("ferroce.flags.unreliable", "UNRELIABLE", 8, nil, FLAG.UNRELIABLE),
    flag_ordered = ProtoField.bool("ferroce.flags.ordered", "ORDERED", 8, nil, FLAG.ORDERED),
    flag_backlog = ProtoField.bool("ferroce.flags.backlog", "BACKLOG", 8, nil, FLAG.BACKLOG),
    flag_solicited = ProtoField.bool("ferroce.flags.solicited", "SOLICITED", 8, nil, FLAG.SOLICITED),
    flag_retx = ProtoField.bool("ferroce.flags.retx", "RETX", 8, nil, FLAG.RETX),
    flag_last = ProtoField.bool("ferroce.flags.last", "LAST", 8, nil, FLAG.LAST),
    flag_ack_req = ProtoField.bool("ferroce.flags.ack_req", "ACK_REQ", 8, nil, FLAG.ACK_REQ),
    path = ProtoField.uint8("ferroce.path", "Path", base.DEC),
    dst_conn = ProtoField.uint32("ferroce.dst_conn", "Destination Connection ID", base.HEX),

    -- Sequence header (§2.4) and message header (§2.5).
    psn = ProtoField.uint32("ferroce.psn", "PSN", base.DEC),
    floor = ProtoField.uint32("ferroce.floor", "Floor", base.DEC),
    tsval = ProtoField.uint32("ferroce.tsval", "TSval", base.DEC),
    stream = ProtoField.uint32("ferroce.stream", "Stream ID", base.DEC),
    msn = ProtoField.uint32("ferroce.msn", "MSN", base.DEC),
    offset = ProtoField.uint32("ferroce.offset", "Offset", base.DEC),
    length = ProtoField.uint32("ferroce.length", "Length", base.DEC),

    -- Opcode fields of reliable packets (§2.6 - §2.9).
    rsn = ProtoField.uint32("ferroce.rsn", "RSN", base.DEC),
    imm = ProtoField.uint32("ferroce.imm", "Immediate", base.HEX),
    rkey = ProtoField.uint32("ferroce.rkey", "R_Key", base.HEX),
    raddr = ProtoField.uint64("ferroce.raddr", "Remote Address", base.HEX),
    add = ProtoField.uint64("ferroce.add", "Add", base.HEX),
    compare = ProtoField.uint64("ferroce.compare", "Compare", base.HEX),
    swap = ProtoField.uint64("ferroce.swap", "Swap", base.HEX),
    orig = ProtoField.uint64("ferroce.orig", "Original value", base.HEX),
    payload = ProtoField.bytes("ferroce.payload", "Payload"),
    payload_len = ProtoField.uint32("ferroce.payload_len", "Payload length", base.DEC),
    payload_end = ProtoField.uint64("ferroce.payload_end", "Offset + payload length", base.DEC),

    -- ACK (§2.10).
    ack_cum_psn = ProtoField.uint32("ferroce.ack.cum_psn", "Cumulative PSN", base.DEC),
    ack_sack = ProtoField.bytes("ferroce.ack.sack", "SACK bitmap"),
    ack_sacked_psn = ProtoField.uint32("ferroce.ack.sacked_psn", "SACKed PSN", base.DEC),
    ack_sack_count = ProtoField.uint32("ferroce.ack.sack_count", "SACKed PSNs", base.DEC),
    ack_ecn_ce = ProtoField.uint32("ferroce.ack.ecn_ce", "ECN-CE count", base.DEC),
    ack_rate_hint = ProtoField.uint32("ferroce.ack.rate_hint_mbps", "Rate hint (Mbit/s)", base.DEC),
    ack_ts_echo = ProtoField.uint32("ferroce.ack.ts_echo", "TS echo", base.DEC),
    ack_delay = ProtoField.uint32("ferroce.ack.ack_delay_ns", "ACK delay (ns)", base.DEC),

    -- ACK_MULTI (§2.10.1): the fixed part, then one block per path.
    am_rate_hint = ProtoField.uint32("ferroce.ack_multi.rate_hint_mbps", "Rate hint (Mbit/s)", base.DEC),
    am_count = ProtoField.uint8("ferroce.ack_multi.count", "Blocks", base.DEC),
    am_reserved = ProtoField.uint24("ferroce.ack_multi.reserved", "reserved", base.HEX),
    am_block = ProtoField.none("ferroce.ack_multi.block", "Block"),
    am_path = ProtoField.uint8("ferroce.ack_multi.path", "Path", base.DEC),
    am_words = ProtoField.uint8("ferroce.ack_multi.words", "SACK words", base.DEC),
    am_block_reserved = ProtoField.uint16("ferroce.ack_multi.block_reserved", "reserved", base.HEX),
    am_cum_psn = ProtoField.uint32("ferroce.ack_multi.cum_psn", "Cumulative PSN", base.DEC),
    am_ecn_ce = ProtoField.uint32("ferroce.ack_multi.ecn_ce", "ECN-CE count", base.DEC),
    am_ts_echo = ProtoField.uint32("ferroce.ack_multi.ts_echo", "TS echo", base.DEC),
    am_ack_delay = ProtoField.uint32("ferroce.ack_multi.ack_delay_ns", "ACK delay (ns)", base.DEC),
    am_sack = ProtoField.bytes("ferroce.ack_multi.sack", "SACK bitmap words"),
    am_sacked_psn = ProtoField.uint32("ferroce.ack_multi.sacked_psn", "SACKed PSN", base.DEC),
    am_sack_count = ProtoField.uint32("ferroce.ack_multi.sack_count", "SACKed PSNs", base.DEC),

    -- NACK (§2.11).
    nack_psn = ProtoField.uint32("ferroce.nack.psn", "PSN", base.DEC),
    nack_stream = ProtoField.uint32("ferroce.nack.stream", "Stream ID", base.DEC),
    nack_msn = ProtoField.uint32("ferroce.nack.msn", "MSN", base.DEC),
    nack_reason = ProtoField.uint8("ferroce.nack.reason", "Reason", base.DEC, NACK_REASONS),
    nack_rnr_delay = ProtoField.uint8("ferroce.nack.rnr_delay", "RNR delay (x 10 us)", base.DEC),
    nack_reserved = ProtoField.uint16("ferroce.nack.reserved", "reserved", base.HEX),
    nack_late = ProtoField.bool("ferroce.nack.late", "Late NACK (path 255)"),

    -- OPEN / OPEN_ACK (§2.12).
    open_src_conn = ProtoField.uint32("ferroce.open.src_conn", "Source Connection ID", base.HEX),
    open_paths = ProtoField.uint8("ferroce.open.paths", "Paths", base.DEC),
    open_reserved = ProtoField.uint8("ferroce.open.reserved", "reserved", base.HEX),
    open_mtu = ProtoField.uint16("ferroce.open.mtu", "MTU", base.DEC),
    open_line_rate = ProtoField.uint32("ferroce.open.line_rate_mbps", "Line rate (Mbit/s)", base.DEC),

    -- CLOSE / CLOSE_ACK (§2.13).
    close_src_conn = ProtoField.uint32("ferroce.close.src_conn", "Source Connection ID", base.HEX),
    close_reason = ProtoField.uint32("ferroce.close.reason", "Reason", base.DEC),

    -- PROBE / PROBE_ACK (§2.14).
    probe_seq = ProtoField.uint32("ferroce.probe.probe_seq", "Probe sequence", base.DEC),
    probe_ts = ProtoField.uint32("ferroce.probe.ts", "Timestamp", base.DEC),
    probe_hint_request = ProtoField.bool("ferroce.probe.hint_request", "Hint request (BACKLOG)"),

    -- Connection manager (cm.md §1).
    cm_src_comm = ProtoField.uint32("ferroce.cm.src_comm", "Source comm id", base.HEX),
    cm_port_space = ProtoField.uint16("ferroce.cm.port_space", "Port space", base.HEX,
        { [0x0106] = "RDMA_PS_TCP", [0x013F] = "RDMA_PS_IB", [0x0111] = "RDMA_PS_UDP" }),
    cm_dst_port = ProtoField.uint16("ferroce.cm.dst_port", "Destination port", base.DEC),
    cm_src_port = ProtoField.uint16("ferroce.cm.src_port", "Source port", base.DEC),
    cm_pd_len = ProtoField.uint8("ferroce.cm.pd_len", "Private data length", base.DEC),
    cm_resp_res = ProtoField.uint8("ferroce.cm.responder_resources", "Responder resources", base.DEC),
    cm_qpn = ProtoField.uint32("ferroce.cm.qpn", "QPN", base.HEX),
    cm_start_psn = ProtoField.uint32("ferroce.cm.start_psn", "Start PSN", base.HEX),
    cm_init_depth = ProtoField.uint8("ferroce.cm.initiator_depth", "Initiator depth", base.DEC),
    cm_retry = ProtoField.uint8("ferroce.cm.retry_count", "Retry count", base.DEC),
    cm_rnr_retry = ProtoField.uint8("ferroce.cm.rnr_retry_count", "RNR retry count", base.DEC),
    cm_dst_addr = ProtoField.ipv4("ferroce.cm.dst_addr", "Destination address"),
    cm_reason = ProtoField.uint16("ferroce.cm.reason", "Reject reason", base.DEC,
        { [1] = "timeout", [8] = "invalid service id", [28] = "consumer" }),
    cm_private = ProtoField.bytes("ferroce.cm.private_data", "Private data"),
    cm_sidr_status = ProtoField.uint8("ferroce.cm.sidr_status", "SIDR status", base.DEC,
        { [0] = "QP valid", [1] = "service id not supported", [2] = "rejected" }),
    cm_qkey = ProtoField.uint32("ferroce.cm.qkey", "Q_Key", base.HEX),

    -- Trailer (§2.15) and verdict (§3).
    crc = ProtoField.uint32("ferroce.crc", "CRC-32", base.HEX),
    crc_computed = ProtoField.uint32("ferroce.crc.computed", "Computed CRC-32", base.HEX),
    crc_status = ProtoField.uint8("ferroce.crc.status", "CRC-32 status", base.DEC, CRC_STATUS),
    extra = ProtoField.bytes("ferroce.extra", "Bytes after the headers (opcode has no payload)"),
    undecoded = ProtoField.bytes("ferroce.undecoded", "Undecoded bytes"),
    drop = ProtoField.string("ferroce.drop", "Receiver drops it as"),
}

local fields = {}
for _, v in pairs(f) do
    fields[#fields + 1] = v
end
p.fields = fields

local e = {
    truncated = ProtoExpert.new("ferroce.expert.truncated", "TRUNCATED", expert.group.MALFORMED, expert.severity.ERROR),
    bad_version = ProtoExpert.new("ferroce.expert.bad_version", "BAD_VERSION", expert.group.MALFORMED, expert.severity.ERROR),
    bad_opcode = ProtoExpert.new("ferroce.expert.bad_opcode", "BAD_OPCODE", expert.group.MALFORMED, expert.severity.ERROR),
    malformed = ProtoExpert.new("ferroce.expert.malformed", "MALFORMED", expert.group.MALFORMED, expert.severity.ERROR),
    bad_crc = ProtoExpert.new("ferroce.expert.bad_crc", "BAD_CRC", expert.group.CHECKSUM, expert.severity.ERROR),
    ignored = ProtoExpert.new("ferroce.expert.ignored", "Spec violation a receiver ignores", expert.group.PROTOCOL, expert.severity.NOTE),
    snaplen = ProtoExpert.new("ferroce.expert.snaplen", "Packet cut short by the capture (snaplen)", expert.group.UNDECODED, expert.severity.WARN),
}
p.experts = { e.truncated, e.bad_version, e.bad_opcode, e.malformed, e.bad_crc, e.ignored, e.snaplen }

-- Dissection state of one packet. `check` is the number of the §3 check that failed: the
-- lowest wins the verdict (a receiver stops at the first), whatever order the tree is built in;
-- every failure is still shown as an expert error (a reader wants them all).
local function verdict_keeper()
    local st = { drop = nil, check = nil }
    function st.fail(item, check, kind, why)
        item:add_proto_expert_info(e[kind:lower()], kind .. ": " .. why)
        if not st.check or check < st.check then
            st.drop, st.check = kind, check
        end
    end
    function st.note(item, why)
        item:add_proto_expert_info(e.ignored, why)
    end
    return st
end

local function u32(tvb, o) return tvb(o, 4):uint() end

local function add_flags(tree, tvb, flags)
    local fi = tree:add(f.flags, tvb(2, 1))
    local names = {}
    for _, n in ipairs(FLAG_ORDER) do
        if band(flags, FLAG[n]) ~= 0 then names[#names + 1] = n end
    end
    if band(flags, FLAGS_RESERVED) ~= 0 then names[#names + 1] = "reserved" end
    fi:append_text(" (" .. (#names > 0 and table.concat(names, ", ") or "none") .. ")")
    fi:add(f.flag_reserved, tvb(2, 1))
    fi:add(f.flag_unreliable, tvb(2, 1))
    fi:add(f.flag_ordered, tvb(2, 1))
    fi:add(f.flag_backlog, tvb(2, 1))
    fi:add(f.flag_solicited, tvb(2, 1))
    fi:add(f.flag_retx, tvb(2, 1))
    fi:add(f.flag_last, tvb(2, 1))
    fi:add(f.flag_ack_req, tvb(2, 1))
    return fi, names
end

-- Flags a sender MUST send as 0 on this opcode (§2.3); receivers ignore them.
local function flags_not_defined(op, flags)
    local allowed
    if op < 0x10 then
        allowed = 0x1F
        if op == 0x03 or op == 0x04 then allowed = 0x3F end
    elseif op == 0x30 then
        allowed = FLAG.BACKLOG
    else
        allowed = 0
    end
    return band(flags, 0xFF - allowed)
end

-- Reliable packets: sequence header, message header, then the opcode's fields at 36.
local function dissect_reliable(tvb, tree, st, op, n, info)
    local seq = tree:add(tvb(8, 12), "Sequence header")
    seq:add(f.psn, tvb(8, 4))
    seq:add(f.floor, tvb(12, 4))
    seq:add(f.tsval, tvb(16, 4))
    local msg = tree:add(tvb(20, 16), "Message header")
    msg:add(f.stream, tvb(20, 4))
    msg:add(f.msn, tvb(24, 4))
    local off_item = msg:add(f.offset, tvb(28, 4))
    local len_item = msg:add(f.length, tvb(32, 4))
    local psn, stream, msn = u32(tvb, 8), u32(tvb, 20), u32(tvb, 24)
    local offset, length = u32(tvb, 28), u32(tvb, 32)
    -- §2.4: a receiver applies the floor only if 0 <= psn - floor <= 256 (serial), and tsval 0
    -- means "no timestamp", which senders must not send. Neither makes the packet invalid.
    if (psn - u32(tvb, 12)) % 4294967296 > 256 then
        st.note(seq, "floor not within 256 before psn: the receiver ignores it")
    end
    if u32(tvb, 16) == 0 then
        st.note(seq, "tsval 0 (no timestamp): senders must send a non-zero value")
    end
    info[#info + 1] = string.format("psn=%d stream=%d msn=%d off=%d len=%d", psn, stream, msn, offset, length)

    local name = OPS[op].name
    -- READ_RESP has no fields after the message header: no empty subtree for it.
    local body = OPS[op].h > 28 and tree:add(tvb(36, OPS[op].h - 28), name .. " fields") or tree
    local o = 36
    local function put(field, size)
        local it = body:add(field, tvb(o, size))
        o = o + size
        return it
    end
    if op == 0x01 or op == 0x02 then
        put(f.rsn, 4)
        if op == 0x02 then put(f.imm, 4) end
    elseif op == 0x03 or op == 0x04 or op == 0x05 or op == 0x07 or op == 0x08 then
        put(f.rkey, 4)
        put(f.raddr, 8)
        if op == 0x04 then
            put(f.rsn, 4)
            put(f.imm, 4)
        elseif op == 0x07 then
            put(f.add, 8)
        elseif op == 0x08 then
            put(f.compare, 8)
            put(f.swap, 8)
        end
    elseif op == 0x09 then
        put(f.orig, 8)
    end

    -- §3 checks 7-10, in order.
    if op == 0x05 and offset ~= 0 then
        st.fail(off_item, 7, "MALFORMED", "READ_REQ offset must be 0")
    end
    if op == 0x07 or op == 0x08 or op == 0x09 then
        if offset ~= 0 then st.fail(off_item, 8, "MALFORMED", "atomic offset must be 0") end
        if length ~= 8 then st.fail(len_item, 8, "MALFORMED", "atomic length must be 8") end
    end
    local hdr = 8 + OPS[op].h
    local plen = n - hdr - 4
    -- plen < 0 only when showing a truncated packet's fields: it has no payload to show.
    if OPS[op].payload and plen >= 0 then
        local pl_item
        if plen > 0 then
            pl_item = tree:add(f.payload, tvb(hdr, plen))
        else
            pl_item = tree:add(f.payload_len, tvb(hdr, 0), 0)
            pl_item:set_generated()
        end
        if plen > 0 then
            tree:add(f.payload_len, tvb(hdr, plen), plen):set_generated()
        end
        -- Lua numbers are doubles: offset + plen is exact (no 32-bit overflow, check 9).
        local e_item = tree:add(f.payload_end, tvb(28, 4), UInt64(offset + plen))
        e_item:set_generated()
        if offset + plen > length then
            st.fail(e_item, 9, "MALFORMED", "payload beyond message length (offset + payload > length)")
        end
        if plen == 0 and length ~= 0 then
            st.fail(pl_item, 10, "MALFORMED", "empty packet of a non-empty message")
        end
        info[#info + 1] = string.format("payload=%d", plen)
    end
end

-- A SACK bitmap of `len` bytes at `off` (an ACK's 32, or an ACK_MULTI block's first words): bit
-- i of byte off + i/8 at mask 1 << (i % 8) says PSN cum_psn + 1 + i (mod 2^32) was received.
-- Shown as those PSNs; returns them.
local function add_sack(tree, tvb, off, len, cum, f_sack, f_psn, f_count)
    local psns = {}
    if len == 0 then
        -- An in-order path of an ACK_MULTI: no words, nothing SACKed.
        tree:add(f_count, tvb(off, 0), 0):set_generated()
        return psns
    end
    local sack = tree:add(f_sack, tvb(off, len))
    for j = 0, len - 1 do
        local b = tvb(off + j, 1):uint()
        for k = 0, 7 do
            if band(b, 2 ^ k) ~= 0 then
                local i = 8 * j + k
                local psn = (cum + 1 + i) % 4294967296
                local it = sack:add(f_psn, tvb(off + j, 1), psn)
                it:append_text(string.format(" (bit %d)", i))
                psns[#psns + 1] = psn
            end
        end
    end
    sack:append_text(string.format(" (%d PSNs)", #psns))
    sack:add(f_count, tvb(off, len), #psns):set_generated()
    return psns
end

local function psn_list(psns)
    local shown = {}
    for x = 1, math.min(#psns, 8) do shown[x] = tostring(psns[x]) end
    return table.concat(shown, ",") .. (#psns > 8 and ",..." or "")
end

local function dissect_ack(tvb, tree, st, info)
    local cum = u32(tvb, 8)
    tree:add(f.ack_cum_psn, tvb(8, 4))
    local psns = add_sack(tree, tvb, 12, 32, cum, f.ack_sack, f.ack_sacked_psn, f.ack_sack_count)
    tree:add(f.ack_ecn_ce, tvb(44, 4))
    tree:add(f.ack_rate_hint, tvb(48, 4))
    tree:add(f.ack_ts_echo, tvb(52, 4))
    tree:add(f.ack_delay, tvb(56, 4))
    info[#info + 1] = string.format("cum_psn=%d sack=[%s] hint=%d", cum, psn_list(psns), u32(tvb, 48))
end

-- ACK_MULTI: the fixed part at 8, then `count` blocks of 20 + 8 * words bytes up to the trailer
-- at n - 4. Check 13 of §3, in its order: count != 0; for each block its 20 fixed bytes, words
-- <= 4, a path no earlier block named, its SACK bytes; then no byte left. A block that cannot be
-- delimited ends the decoding; the rest is shown as undecoded bytes.
local function dissect_ack_multi(tvb, tree, st, n, path, info)
    tree:add(f.am_rate_hint, tvb(8, 4))
    local count = tvb(12, 1):uint()
    local c_item = tree:add(f.am_count, tvb(12, 1))
    local r_item = tree:add(f.am_reserved, tvb(13, 3))
    if tvb(13, 3):uint() ~= 0 then st.note(r_item, "reserved bytes must be sent as 0") end
    if path ~= 255 then st.note(tree, "ACK_MULTI's base path must be sent as 255 (ignored)") end
    if count == 0 then st.fail(c_item, 13, "MALFORMED", "ACK_MULTI without blocks") end
    local stop, pos, seen, shown, ok = n - 4, 16, {}, {}, true
    for b = 0, count - 1 do
        if pos + 20 > stop then
            st.fail(c_item, 13, "MALFORMED", string.format("block %d: its 20 fixed bytes are beyond the packet", b))
            ok = false
            break
        end
        local bp, words, cum = tvb(pos, 1):uint(), tvb(pos + 1, 1):uint(), u32(tvb, pos + 4)
        local bt = tree:add(f.am_block, tvb(pos, math.min(20 + 8 * words, stop - pos)))
        bt:append_text(string.format(" %d: path %d, cum_psn %d", b, bp, cum))
        local p_item = bt:add(f.am_path, tvb(pos, 1))
        local w_item = bt:add(f.am_words, tvb(pos + 1, 1))
        local br_item = bt:add(f.am_block_reserved, tvb(pos + 2, 2))
        if tvb(pos + 2, 2):uint() ~= 0 then st.note(br_item, "reserved bytes must be sent as 0") end
        bt:add(f.am_cum_psn, tvb(pos + 4, 4))
        bt:add(f.am_ecn_ce, tvb(pos + 8, 4))
        bt:add(f.am_ts_echo, tvb(pos + 12, 4))
        bt:add(f.am_ack_delay, tvb(pos + 16, 4))
        if words > 4 then
            st.fail(w_item, 13, "MALFORMED", string.format("block %d: %d SACK words (at most 4)", b, words))
            pos, ok = pos + 20, false
            break
        end
        if seen[bp] then
            st.fail(p_item, 13, "MALFORMED", string.format("block %d: path %d already named by block %d", b, bp, seen[bp]))
        else
            seen[bp] = b
        end
        if pos + 20 + 8 * words > stop then
            st.fail(w_item, 13, "MALFORMED", string.format("block %d: its %d SACK words are beyond the packet", b, words))
            pos, ok = pos + 20, false
            break
        end
        local psns = add_sack(bt, tvb, pos + 20, 8 * words, cum, f.am_sack, f.am_sacked_psn, f.am_sack_count)
        shown[#shown + 1] = string.format("%d:%d%s", bp, cum, #psns > 0 and ("+[" .. psn_list(psns) .. "]") or "")
        pos = pos + 20 + 8 * words
    end
    if pos < stop then
        if ok then
            st.fail(tree, 13, "MALFORMED", string.format("%d bytes after the last block", stop - pos))
        end
        tree:add(f.undecoded, tvb(pos, stop - pos))
    end
    info[#info + 1] = string.format("hint=%d blocks=%d {%s}", u32(tvb, 8), count, table.concat(shown, " "))
end

local function dissect_nack(tvb, tree, st, path, info)
    tree:add(f.nack_psn, tvb(8, 4))
    tree:add(f.nack_stream, tvb(12, 4))
    tree:add(f.nack_msn, tvb(16, 4))
    local reason = tvb(20, 1):uint()
    local r_item = tree:add(f.nack_reason, tvb(20, 1))
    local d_item = tree:add(f.nack_rnr_delay, tvb(21, 1))
    local res_item = tree:add(f.nack_reserved, tvb(22, 2))
    if path == 255 then
        tree:add(f.nack_late, tvb(3, 1), true):set_generated()
        if u32(tvb, 8) ~= 0 then st.note(tree, "late NACK with psn != 0") end
    end
    if not NACK_REASONS[reason] then
        st.fail(r_item, 11, "MALFORMED", string.format("NACK reason %d is not 1..5", reason))
    elseif reason ~= 3 and tvb(21, 1):uint() ~= 0 then
        st.note(d_item, "rnr_delay must be 0 for reasons other than ReceiverNotReady")
    end
    if tvb(22, 2):uint() ~= 0 then st.note(res_item, "reserved bytes must be sent as 0") end
    info[#info + 1] = string.format("psn=%d stream=%d msn=%d reason=%s", u32(tvb, 8), u32(tvb, 12),
        u32(tvb, 16), NACK_REASONS[reason] or tostring(reason))
end

local function dissect_open(tvb, tree, st, op, info)
    local c_item = tree:add(f.open_src_conn, tvb(8, 4))
    local p_item = tree:add(f.open_paths, tvb(12, 1))
    local r_item = tree:add(f.open_reserved, tvb(13, 1))
    local m_item = tree:add(f.open_mtu, tvb(14, 2))
    tree:add(f.open_line_rate, tvb(16, 4))
    -- §3 check 12, in its order: paths, then src_conn, then mtu.
    if tvb(12, 1):uint() == 0 then st.fail(p_item, 12, "MALFORMED", "paths must not be 0") end
    if u32(tvb, 8) == 0 then st.fail(c_item, 12, "MALFORMED", "src_conn must not be 0") end
    if tvb(14, 2):uint() < 64 then st.fail(m_item, 12, "MALFORMED", "mtu below 64 (MIN_MTU)") end
    if tvb(13, 1):uint() ~= 0 then st.note(r_item, "reserved byte must be sent as 0") end
    if op == 0x20 and u32(tvb, 4) ~= 0 then st.note(tree, "OPEN carries dst_conn != 0") end
    info[#info + 1] = string.format("src_conn=0x%08x paths=%d mtu=%d", u32(tvb, 8), tvb(12, 1):uint(),
        tvb(14, 2):uint())
end

local function dissect_close(tvb, tree, info)
    tree:add(f.close_src_conn, tvb(8, 4))
    tree:add(f.close_reason, tvb(12, 4))
    info[#info + 1] = string.format("src_conn=0x%08x reason=%d", u32(tvb, 8), u32(tvb, 12))
end

local function dissect_probe(tvb, tree, op, flags, info)
    tree:add(f.probe_seq, tvb(8, 4))
    tree:add(f.probe_ts, tvb(12, 4))
    if op == 0x30 and band(flags, FLAG.BACKLOG) ~= 0 then
        tree:add(f.probe_hint_request, tvb(2, 1), true):set_generated()
        info[#info + 1] = "hint-request"
    end
    info[#info + 1] = string.format("probe_seq=%d ts=%d", u32(tvb, 8), u32(tvb, 12))
end

-- CM packets (cm.md §1): fields, then the §1.7 checks numbered to keep its order against the
-- CRC's check 6: pd_len and length (5, before the CRC), comm ids and ranges (7, after it).
local function dissect_cm(tvb, tree, st, op, n, info)
    local o = OPS[op]
    local function add(field, at, len) return tree:add(field, tvb(at, len)) end
    local src = add(f.cm_src_comm, 8, 4)
    local q_item
    if op == 0x40 then
        add(f.cm_port_space, 12, 2)
        add(f.cm_dst_port, 14, 2)
        add(f.cm_src_port, 16, 2)
        add(f.cm_resp_res, 19, 1)
        q_item = add(f.cm_qpn, 20, 4)
        add(f.cm_start_psn, 24, 4)
        add(f.cm_init_depth, 28, 1)
        add(f.cm_retry, 29, 1)
        add(f.cm_rnr_retry, 30, 1)
        add(f.cm_dst_addr, 32, 4)
    elseif op == 0x41 then
        q_item = add(f.cm_qpn, 12, 4)
        add(f.cm_start_psn, 16, 4)
        add(f.cm_resp_res, 20, 1)
        add(f.cm_init_depth, 21, 1)
        add(f.cm_rnr_retry, 22, 1)
    elseif op == 0x43 then
        add(f.cm_reason, 12, 2)
    elseif op == 0x46 then
        add(f.cm_port_space, 12, 2)
        add(f.cm_dst_port, 14, 2)
        add(f.cm_src_port, 16, 2)
        add(f.cm_dst_addr, 20, 4)
    elseif op == 0x47 then
        add(f.cm_sidr_status, 12, 1)
        q_item = add(f.cm_qpn, 16, 4)
        add(f.cm_qkey, 20, 4)
    end
    local pd_len = tvb(o.pd_at, 1):uint()
    local l_item = add(f.cm_pd_len, o.pd_at, 1)
    local fixed = 8 + o.h
    if pd_len > o.pd_max then
        st.fail(l_item, 5, "MALFORMED", string.format("pd_len %d over %s's %d", pd_len, o.name, o.pd_max))
    elseif n ~= fixed + pd_len + 4 then
        st.fail(l_item, 5, "MALFORMED", string.format("%d bytes, %s with pd_len %d is %d", n, o.name,
            pd_len, fixed + pd_len + 4))
    elseif pd_len > 0 then
        add(f.cm_private, fixed, pd_len)
    end
    local dst, sc = u32(tvb, 4), u32(tvb, 8)
    local request = op == 0x40 or op == 0x46
    if request and dst ~= 0 then st.fail(tree, 7, "MALFORMED", "REQ with dst_comm != 0") end
    if not request and op ~= 0x43 and dst == 0 then st.fail(tree, 7, "MALFORMED", "dst_comm 0") end
    if op ~= 0x43 and sc == 0 then st.fail(src, 7, "MALFORMED", "src_comm 0") end
    if op == 0x40 or op == 0x41 then
        local qa = op == 0x40 and 20 or 12
        if u32(tvb, qa) > 0xFFFFFF or u32(tvb, qa + 4) > 0xFFFFFF then
            st.fail(q_item, 7, "MALFORMED", "QPN or start PSN over 24 bits")
        end
        local bad = op == 0x40 and (tvb(29, 1):uint() > 7 or tvb(30, 1):uint() > 7)
            or op == 0x41 and tvb(22, 1):uint() > 7
        if bad then st.fail(q_item, 7, "MALFORMED", "retry count over 7") end
    elseif op == 0x47 and u32(tvb, 16) > 0xFFFFFF then
        st.fail(q_item, 7, "MALFORMED", "QPN over 24 bits")
    end
    info[#info + 1] = string.format("src_comm=0x%08x pd_len=%d", sc, pd_len)
end

-- Trailer: shown and verified whenever the layout is known; `counts`: check 6 applies (checks
-- 1-5 passed), else the status is only informative.
local function dissect_crc(tvb, tree, st, n, counts)
    local stored = u32(tvb, n - 4)
    local computed = crc32(tvb:raw(0, n - 4))
    local ti = tree:add(f.crc, tvb(n - 4, 4))
    ti:add(f.crc_computed, tvb(n - 4, 4), computed):set_generated()
    local good = stored == computed
    ti:add(f.crc_status, tvb(n - 4, 4), good and 1 or 0):set_generated()
    ti:append_text(good and " [good]" or string.format(" [BAD, computed 0x%08x]", computed))
    if not good and counts then
        st.fail(ti, 6, "BAD_CRC", string.format("trailer 0x%08x, computed 0x%08x", stored, computed))
    end
    return good
end

-- The opcode-specific part after the base header; its subtree spans `span` bytes.
local function dissect_body(tvb, t, st, op, n, path, flags, info, span)
    local o = OPS[op]
    if op < 0x10 then
        dissect_reliable(tvb, t, st, op, n, info)
    elseif op == 0x10 then
        dissect_ack(tvb, t:add(tvb(8, span), "ACK fields"), st, info)
    elseif op == 0x11 then
        dissect_nack(tvb, t:add(tvb(8, span), "NACK fields"), st, path, info)
    elseif op == 0x12 then
        dissect_ack_multi(tvb, t:add(tvb(8, span), "ACK_MULTI fields"), st, n, path, info)
    elseif op == 0x20 or op == 0x21 then
        dissect_open(tvb, t:add(tvb(8, span), o.name .. " fields"), st, op, info)
    elseif op == 0x22 or op == 0x23 then
        dissect_close(tvb, t:add(tvb(8, span), o.name .. " fields"), info)
    elseif op == 0x30 or op == 0x31 then
        dissect_probe(tvb, t:add(tvb(8, span), o.name .. " fields"), op, flags, info)
    elseif o and o.cm then
        dissect_cm(tvb, t:add(tvb(8, span), o.name .. " fields"), st, op, n, info)
    else
        t:add(f.undecoded, tvb(8, span))
    end
end

-- Checks of a packet already dropped do not apply: its fields are shown, nothing is judged.
local QUIET = { fail = function() end, note = function() end }

function p.dissector(tvb, pinfo, tree)
    local n = tvb:reported_len()
    pinfo.cols.protocol = "ferroce"
    local t = tree:add(p, tvb())
    local st = verdict_keeper()
    local info = {}

    if tvb:len() < n then
        -- Bytes missing from the capture are not missing from the packet: dissect nothing
        -- that would misreport them as TRUNCATED.
        t:add_proto_expert_info(e.snaplen, string.format("captured %d of %d bytes", tvb:len(), n))
        pinfo.cols.info = "ferroce [cut short by the capture]"
        return tvb:len()
    end

    -- §3 check 1.
    if n < 12 then
        st.fail(t, 1, "TRUNCATED", string.format("%d bytes, less than base header + trailer (12)", n))
        if n > 0 then t:add(f.undecoded, tvb(0, n)) end
        t:add(f.drop, tvb(0, n), st.drop):set_generated()
        pinfo.cols.info = string.format("[TRUNCATED] %d bytes", n)
        return n
    end

    local version, op, flags, path = tvb(0, 1):uint(), tvb(1, 1):uint(), tvb(2, 1):uint(), tvb(3, 1):uint()
    local o = OPS[op]
    local name = o and o.name or string.format("unknown opcode 0x%02x", op)
    t:append_text(", " .. name)

    local base = t:add(tvb(0, 8), "Base header")
    local v_item = base:add(f.version, tvb(0, 1))
    local op_item = base:add(f.opcode, tvb(1, 1))
    local _, flag_names = add_flags(base, tvb, flags)
    base:add(f.path, tvb(3, 1))
    base:add(f.dst_conn, tvb(4, 4))
    info[#info + 1] = name
    info[#info + 1] = string.format("path=%d conn=0x%08x", path, u32(tvb, 4))
    if #flag_names > 0 then info[#info + 1] = "[" .. table.concat(flag_names, ",") .. "]" end

    -- §3 checks 2-5: structure before the CRC.
    local layout_ok, partial = false, false
    if version ~= 1 then
        st.fail(v_item, 2, "BAD_VERSION", string.format("version %d (this dissector speaks 1)", version))
    elseif not o then
        st.fail(op_item, 3, "BAD_OPCODE", string.format("opcode 0x%02x is not assigned in wire.md Table 2.2", op))
    elseif n < 8 + o.h + 4 then
        st.fail(t, 4, "TRUNCATED", string.format("%d bytes, %s needs at least %d", n, o.name, 8 + o.h + 4))
        -- The fields the bytes hold, for the reader (where its trailer was is unknowable):
        -- decoding stops at the first field beyond the end, which pcall catches.
        if n > 8 then
            local sub = t:add(tvb(8, n - 8), "Fields present in the truncated packet")
            pcall(dissect_body, tvb, sub, QUIET, op, n, path, flags, {}, n - 8)
        end
        partial = true
    elseif not o.payload and not o.blocks and not o.cm and n ~= 8 + o.h + 4 then
        st.fail(t, 5, "MALFORMED", string.format("%d bytes, %s is exactly %d", n, o.name, 8 + o.h + 4))
        t:add(f.extra, tvb(8 + o.h, n - 8 - o.h - 4))
        layout_ok = true
    else
        layout_ok = true
    end

    if layout_ok then
        local fl = flags_not_defined(op, flags)
        if fl ~= 0 then
            st.note(base, string.format("flags 0x%02x are not defined for %s and must be sent as 0", fl, o.name))
        end
        dissect_body(tvb, t, st, op, n, path, flags, info, o.blocks and n - 12 or o.h)
        dissect_crc(tvb, t, st, n, true)
    elseif version == 1 and not o and n >= 12 then
        -- An opcode from a newer revision: the trailer rule (§2.15) still holds, so its CRC
        -- is shown, and the body stays raw bytes.
        if n > 12 then t:add(f.undecoded, tvb(8, n - 12)) end
        dissect_crc(tvb, t, st, n, false)
    elseif n > 8 and not partial then
        t:add(f.undecoded, tvb(8, n - 8))
    end

    if st.drop then
        t:add(f.drop, tvb(0, n), st.drop):set_generated()
        t:append_text(" [" .. st.drop .. "]")
        table.insert(info, 1, "[" .. st.drop .. "]")
    end
    pinfo.cols.info = table.concat(info, " ")
    return n
end

DissectorTable.get("udp.port"):add(NATIVE_PORT, p)

function p.prefs_changed()
    if p.prefs.udp_port ~= registered_port then
        local t = DissectorTable.get("udp.port")
        t:remove(registered_port, p)
        registered_port = p.prefs.udp_port
        t:add(registered_port, p)
    end
end

-- Wireshark's UDP dissector hands an empty payload to no subdissector, yet an empty datagram
-- to port 4792 is a packet a receiver drops (TRUNCATED, §3 check 1): a postdissector shows it.
local udp_proto = Field.new("udp")
local udp_srcport = Field.new("udp.srcport")
local udp_dstport = Field.new("udp.dstport")
local udp_length = Field.new("udp.length")
local empty = Proto("ferroce_empty", "ferroce empty-datagram check")

local function last(...)
    local v = { ... }
    return v[#v]
end

function empty.dissector(tvb, pinfo, tree)
    local u, len = last(udp_proto()), last(udp_length())
    local sport, dport = last(udp_srcport()), last(udp_dstport())
    if not (u and len and sport and dport) or len.value ~= 8 then return end
    if sport.value ~= registered_port and dport.value ~= registered_port then return end
    local t = tree:add(p, tvb(u.offset + 8, 0))
    t:add_proto_expert_info(e.truncated, "TRUNCATED: empty UDP payload (0 bytes, less than 12)")
    t:add(f.drop, tvb(u.offset + 8, 0), "TRUNCATED"):set_generated()
    pinfo.cols.protocol = "ferroce"
    pinfo.cols.info = "[TRUNCATED] 0 bytes"
end

register_postdissector(empty)
