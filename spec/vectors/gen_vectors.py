#!/usr/bin/env python3
"""Generate the ferroce v0 wire test vectors (spec/vectors/*.vec).

This script is written from spec/wire.md alone, independently of the Rust codec: it lays
out every field by hand with `struct` and computes the trailer with zlib.crc32. Run it from
anywhere: `python3 spec/vectors/gen_vectors.py`. It rewrites every .vec file it knows and
deletes nothing else. The format of the files is described in spec/vectors/README.md.
"""

import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

OPCODES = {
    "SEND": 0x01, "SEND_IMM": 0x02, "WRITE": 0x03, "WRITE_IMM": 0x04,
    "READ_REQ": 0x05, "READ_RESP": 0x06, "FETCH_ADD": 0x07, "CMP_SWAP": 0x08,
    "ATOMIC_RESP": 0x09, "ACK": 0x10, "NACK": 0x11, "ACK_MULTI": 0x12, "OPEN": 0x20, "OPEN_ACK": 0x21,
    "CLOSE": 0x22, "CLOSE_ACK": 0x23, "PROBE": 0x30, "PROBE_ACK": 0x31,
}
REASONS = {"REMOTE_ACCESS": 1, "INVALID_REQUEST": 2, "RNR": 3, "SEQUENCE": 4, "REMOTE_OPERATION": 5}
FLAG_NAMES = [(0x01, "ACK_REQ"), (0x02, "LAST"), (0x04, "RETX"), (0x08, "SOLICITED"),
              (0x10, "BACKLOG")]


def u8(v):
    return struct.pack(">B", v)


def u16(v):
    return struct.pack(">H", v)


def u32(v):
    return struct.pack(">I", v)


def u64(v):
    return struct.pack(">Q", v)


def flag_text(f):
    names = [n for b, n in FLAG_NAMES if f & b]
    if f & ~0x1F:
        names.append("undefined 0x%02x" % (f & ~0x1F))
    return "|".join(names) if names else "none"


def sack_bytes(bits):
    """Bit i -> byte i // 8, bit position i % 8 (least significant first)."""
    b = bytearray(32)
    for i in bits:
        b[i // 8] |= 1 << (i % 8)
    return bytes(b)


class Vec:
    def __init__(self, name, comment):
        self.name = name
        self.comment = comment
        self.fields = []  # (key, text)
        self.segs = []  # (bytes, comment)
        self.error = None
        self.emit = None  # expected emit bytes when they differ from the input

    def f(self, key, value):
        if isinstance(value, int):
            value = str(value)
        self.fields.append((key, value))

    def seg(self, data, comment):
        self.segs.append((data, comment))

    def body(self):
        return b"".join(d for d, _ in self.segs)

    def seal(self, corrupt=False):
        c = zlib.crc32(self.body()) & 0xFFFFFFFF
        if corrupt:
            self.seg(u32(c ^ 0x00000001), "CRC-32 0x%08x with its lowest bit flipped (correct: 0x%08x)" % (c ^ 1, c))
        else:
            self.seg(u32(c), "CRC-32 trailer 0x%08x (zlib, big-endian) over the %d bytes before it" % (c, len(self.body())))

    def write(self):
        lines = []
        for c in self.comment.strip().splitlines():
            lines.append(("# " + c.strip()).rstrip())
        if self.name in CHECKS:
            lines.append("# checks: " + CHECKS[self.name])
        lines.append("name: " + self.name)
        if self.error:
            lines.append("error: " + self.error)
        for k, v in self.fields:
            lines.append("%s: %s" % (k, v))
        total = sum(len(d) for d, _ in self.segs)
        lines.append("# UDP payload, %d bytes; offsets are from its first byte" % total)
        off = 0
        for data, com in self.segs:
            for i in range(0, len(data), 16):
                hx = " ".join("%02x" % x for x in data[i:i + 16])
                c = ("# @%d: %s" % (off + i, com)) if i == 0 else "#   (cont.)"
                lines.append("hex: %-47s  %s" % (hx, c))
            off += len(data)
        if self.emit is not None:
            lines.append("# emit of the parsed packet (reserved bits written as zero):")
            for i in range(0, len(self.emit), 16):
                lines.append("emit: " + " ".join("%02x" % x for x in self.emit[i:i + 16]))
        path = os.path.join(HERE, self.name + ".vec")
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        return path


def base(v, op, flags, path, dst_conn, declare=True):
    opc = OPCODES[op] if isinstance(op, str) else op
    v.seg(u8(1) + u8(opc) + u8(flags) + u8(path) + u32(dst_conn),
          "base: version 1, opcode 0x%02x%s, flags 0x%02x (%s), path %d, dst_conn 0x%08x"
          % (opc, (" " + op) if isinstance(op, str) else "", flags, flag_text(flags), path, dst_conn))
    if declare:
        v.f("opcode", op)
        v.f("flags", "0x%02x" % flags)
        v.f("path", path)
        v.f("dst_conn", "0x%08x" % dst_conn)


def seqmsg(v, psn, floor, tsval, stream, msn, offset, length, declare=True):
    v.seg(u32(psn) + u32(floor) + u32(tsval),
          "sequence: psn %d, floor %d, tsval %d" % (psn, floor, tsval))
    v.seg(u32(stream) + u32(msn) + u32(offset) + u32(length),
          "message: stream %d, msn %d, offset %d, length %d" % (stream, msn, offset, length))
    if declare:
        for k, x in (("psn", psn), ("floor", floor), ("tsval", tsval), ("stream", stream),
                     ("msn", msn), ("offset", offset), ("length", length)):
            v.f(k, x)


def payload(v, data, declare=True):
    if data:
        v.seg(data, "payload, %d bytes" % len(data))
    if declare:
        v.f("payload", " ".join("%02x" % x for x in data))


def ack_body(v, cum, bits, ce, hint, tse, delay, declare=True):
    v.seg(u32(cum), "cum_psn %d" % cum)
    v.seg(sack_bytes(bits), "SACK bitmap, 32 bytes; set bits %s" % (" ".join(map(str, bits)) or "none"))
    v.seg(u32(ce) + u32(hint) + u32(tse) + u32(delay),
          "ecn_ce %d, rate_hint_mbps %d, ts_echo %d, ack_delay_ns %d" % (ce, hint, tse, delay))
    if declare:
        v.f("cum_psn", cum)
        v.f("sack", " ".join(map(str, bits)))
        v.f("ecn_ce", ce)
        v.f("rate_hint_mbps", hint)
        v.f("ts_echo", tse)
        v.f("ack_delay_ns", delay)


def ack_multi_body(v, hint, blocks, count=None, declare=True):
    """blocks: (path, words, cum, bits, ce, tse, delay); words = SACK words written."""
    count = len(blocks) if count is None else count
    v.seg(u32(hint) + u8(count) + bytes(3),
          "rate_hint_mbps %d, count %d, reserved 3 bytes" % (hint, count))
    if declare:
        v.f("rate_hint_mbps", hint)
        v.f("blocks", count)
    for i, (path, words, cum, bits, ce, tse, delay) in enumerate(blocks):
        v.seg(u8(path) + u8(words) + bytes(2) + u32(cum) + u32(ce) + u32(tse) + u32(delay),
              "block %d: path %d, %d SACK words, reserved, cum_psn %d, ecn_ce %d, ts_echo %d, ack_delay_ns %d"
              % (i, path, words, cum, ce, tse, delay))
        if words:
            v.seg(sack_bytes(bits)[:8 * words],
                  "block %d: SACK, %d bytes; set bits %s" % (i, 8 * words, " ".join(map(str, bits)) or "none"))
        if declare:
            v.f("block%d" % i, "path=%d cum_psn=%d sack=%s ecn_ce=%d ts_echo=%d ack_delay_ns=%d"
                % (path, cum, ",".join(map(str, bits)), ce, tse, delay))


def nack_body(v, psn, stream, msn, reason, rnr, reserved=0, declare=True):
    rc = REASONS[reason] if isinstance(reason, str) else reason
    v.seg(u32(psn) + u32(stream) + u32(msn), "psn %d, stream %d, msn %d" % (psn, stream, msn))
    v.seg(u8(rc) + u8(rnr) + u16(reserved),
          "reason %d%s, rnr_delay %d, reserved 0x%04x" % (rc, (" " + reason) if isinstance(reason, str) else "", rnr, reserved))
    if declare:
        v.f("psn", psn)
        v.f("stream", stream)
        v.f("msn", msn)
        v.f("reason", reason)
        v.f("rnr_delay", rnr)


def open_body(v, src, paths, mtu, rate, crowd=0, declare=True):
    v.seg(u32(src) + u8(paths) + u8(crowd) + u16(mtu) + u32(rate),
          "src_conn 0x%08x, paths %d, crowd %d, mtu %d, line_rate_mbps %d" % (src, paths, crowd, mtu, rate))
    if declare:
        v.f("src_conn", "0x%08x" % src)
        v.f("paths", paths)
        v.f("crowd", crowd)
        v.f("mtu", mtu)
        v.f("line_rate_mbps", rate)


def close_body(v, src, reason, declare=True):
    v.seg(u32(src) + u32(reason), "src_conn 0x%08x, reason %d" % (src, reason))
    if declare:
        v.f("src_conn", "0x%08x" % src)
        v.f("reason", reason)


def probe_body(v, seq, ts, declare=True):
    v.seg(u32(seq) + u32(ts), "probe_seq %d, ts %d" % (seq, ts))
    if declare:
        v.f("probe_seq", seq)
        v.f("ts", ts)


A = 0x7C3A91E5  # connection id chosen by endpoint A
B = 0x1D05B2C8  # connection id chosen by endpoint B
ACK_REQ, LAST, RETX, SOL, BACKLOG, ORDERED, UNRELIABLE = 1, 2, 4, 8, 16, 32, 64
OUT = []
# The requirements (spec/requirements.md) each vector checks, read by scripts/req-index.
CHECKS = {
    "truncated_empty": "[VAL-1]",
    "truncated_short": "[VAL-1]",
    "truncated_headers": "[VAL-4]",
    "truncated_ack": "[VAL-4]",
    "truncated_ack_multi": "[VAL-4]",
    "bad_version": "[VAL-2]",
    "bad_version_zero": "[VAL-2] [VAL-14]",
    "bad_opcode": "[VAL-3]",
    "bad_opcode_ff": "[VAL-3]",
    "ack_with_payload": "[VAL-5]",
    "read_req_with_payload": "[VAL-5]",
    "structure_before_crc": "[VAL-5] [VAL-14]",
    "bad_crc": "[VAL-6]",
    "bad_crc_payload_bit": "[VAL-6]",
    "read_req_offset": "[VAL-7] [WIRE-18]",
    "atomic_length_4": "[VAL-8] [WIRE-21]",
    "atomic_offset": "[VAL-8] [WIRE-21]",
    "atomic_resp_length_16": "[VAL-8] [WIRE-21]",
    "payload_beyond_length": "[VAL-9]",
    "offset_overflow": "[VAL-9]",
    "empty_nonempty_message": "[VAL-10]",
    "nack_reason_0": "[VAL-11]",
    "nack_reason_6": "[VAL-11]",
    "open_zero_paths": "[VAL-12]",
    "open_ack_conn_zero": "[VAL-12]",
    "open_mtu_63": "[VAL-12] [WIRE-9]",
    "open_ack_mtu_64": "[WIRE-9]",
    "ack_multi_no_blocks": "[VAL-13]",
    "ack_multi_short": "[VAL-13]",
    "ack_multi_trailing": "[VAL-13]",
    "ack_multi_words_5": "[VAL-13]",
    "ack_multi_path_twice": "[VAL-13]",
    "ack_multi": "[WIRE-22]",
    "nack_reserved_nonzero": "[WIRE-26] [WIRE-29]",
    "open_crowd": "[WIRE-27]",
    "open_ack": "[WIRE-27]",
    "fetch_add": "[WIRE-21]",
    "cmp_swap": "[WIRE-21]",
    "atomic_resp": "[WIRE-21]",
    "read_req": "[WIRE-18]",
    "read_req_zero": "[WIRE-18]",
}


def new(name, comment):
    v = Vec(name, comment)
    OUT.append(v)
    return v


# ---------------------------------------------------------------- valid: reliable opcodes
v = new("send", """
SEND: a whole 14-byte message in one packet (offset 0, length 14), so LAST is set.
A -> B on path 2; B's stream id 5; message number 9; it consumes B's receive number 3.
""")
base(v, "SEND", LAST, 2, B)
seqmsg(v, 41, 38, 1000000, 5, 9, 0, 14)
v.seg(u32(3), "SEND: rsn 3")
v.f("rsn", 3)
payload(v, b"hello, ferroce")
v.seal()

v = new("send_imm", """
SEND_IMM: first packet of a 24-byte message (max payload 16 for brevity: offsets 0 and 16),
with ACK_REQ and BACKLOG; immediate 0xcafef00d.
""")
base(v, "SEND_IMM", ACK_REQ | BACKLOG, 0, B)
seqmsg(v, 0, 0, 123456789, 1, 0, 0, 24)
v.seg(u32(0) + u32(0xCAFEF00D), "SEND_IMM: rsn 0, imm 0xcafef00d")
v.f("rsn", 0)
v.f("imm", "0xcafef00d")
payload(v, bytes(range(0x10, 0x20)))
v.seal()

v = new("send_empty", """
SEND of a zero-length message: one packet, offset 0, length 0, no payload (the only case
where a data packet may be empty).
""")
base(v, "SEND", LAST | SOL, 1, A)
seqmsg(v, 7, 7, 5, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0)
v.seg(u32(0xFFFFFFFF), "SEND: rsn 4294967295")
v.f("rsn", 0xFFFFFFFF)
payload(v, b"")
v.seal()

v = new("write", """
WRITE: the middle packet (offset 16) of a 40-byte message, resent (RETX) under a fresh PSN;
raddr is the address of this packet's own first byte (message base 0x7f0000001000 + 16).
""")
base(v, "WRITE", RETX, 7, B)
seqmsg(v, 1000, 996, 0xFFFFFFF0, 3, 77, 16, 40)
v.seg(u32(0x00ABCDEF) + u64(0x7F0000001010), "WRITE: rkey 0x00abcdef, raddr 0x7f0000001010")
v.f("rkey", "0x00abcdef")
v.f("raddr", "0x7f0000001010")
payload(v, bytes([0xA5] * 16))
v.seal()

v = new("write_ordered", """
WRITE with ORDERED: the first packet (offset 0, 24 bytes) of a 24-byte message whose target
overlaps an earlier request still outstanding; the responder holds it until every earlier
message of stream 3 is complete (transport.md 7.2).
""")
base(v, "WRITE", ORDERED | LAST, 7, B)
seqmsg(v, 1001, 996, 0xFFFFFFF1, 3, 79, 0, 24)
v.seg(u32(0x00ABCDEF) + u64(0x7F0000001000), "WRITE: rkey 0x00abcdef, raddr 0x7f0000001000")
v.f("rkey", "0x00abcdef")
v.f("raddr", "0x7f0000001000")
payload(v, bytes([0x5A] * 24))
v.seal()

v = new("write_imm", """
WRITE_IMM: last packet (offset 32, 8 bytes) of a 40-byte message; carries rsn and imm.
""")
base(v, "WRITE_IMM", LAST | ACK_REQ, 3, B)
seqmsg(v, 0x80000000, 0x7FFFFFF0, 42, 3, 78, 32, 40)
v.seg(u32(0x00ABCDEF) + u64(0x7F0000002020) + u32(12) + u32(0x01020304),
      "WRITE_IMM: rkey 0x00abcdef, raddr 0x7f0000002020, rsn 12, imm 0x01020304")
v.f("rkey", "0x00abcdef")
v.f("raddr", "0x7f0000002020")
v.f("rsn", 12)
v.f("imm", "0x01020304")
payload(v, b"TAILDATA")
v.seal()

v = new("send_imm_unreliable", """
SEND_IMM of an unreliable stream (UNRELIABLE, transport.md 3.5): the only packet of a 6-byte
message; its rsn is carried but the receiver takes its oldest posted receive.
""")
base(v, "SEND_IMM", UNRELIABLE | LAST, 1, B)
seqmsg(v, 300, 298, 77, 9, 4, 0, 6)
v.seg(u32(4) + u32(0x00C0FFEE), "SEND_IMM: rsn 4, imm 0x00c0ffee")
v.f("rsn", 4)
v.f("imm", "0x00c0ffee")
payload(v, b"uc msg")
v.seal()

v = new("read_req", """
READ_REQ: read 65536 bytes at raddr 0x10000 of region rkey 0x11223344. No payload; offset
MUST be 0; length is the read length.
""")
base(v, "READ_REQ", ACK_REQ, 4, B)
seqmsg(v, 5, 0, 999, 2, 10, 0, 65536)
v.seg(u32(0x11223344) + u64(0x10000), "READ_REQ: rkey 0x11223344, raddr 0x10000")
v.f("rkey", "0x11223344")
v.f("raddr", "0x10000")
v.seal()

v = new("read_req_zero", """
READ_REQ of length 0 (valid: answered by one empty READ_RESP).
""")
base(v, "READ_REQ", 0, 0, B)
seqmsg(v, 6, 6, 1000, 2, 11, 0, 0)
v.seg(u32(0x11223344) + u64(0xFFFFFFFFFFFFFFFF), "READ_REQ: rkey 0x11223344, raddr 0xffffffffffffffff")
v.f("rkey", "0x11223344")
v.f("raddr", "0xffffffffffffffff")
v.seal()

v = new("read_resp", """
READ_RESP: B -> A, second packet (offset 16) of the response to A's READ_REQ msn 10 on A's
stream 6; the stream is A's id and the msn is the request's. 16 bytes of data.
""")
base(v, "READ_RESP", BACKLOG, 5, A)
seqmsg(v, 300, 290, 31337, 6, 10, 16, 65536)
payload(v, bytes(range(0xF0, 0x100)))
v.seal()

v = new("fetch_add", """
FETCH_ADD: add 1 to the 8-byte word at raddr 0x2000 (8-byte aligned) of rkey 0x55667788.
offset 0 and length 8 are mandatory for atomics.
""")
base(v, "FETCH_ADD", ACK_REQ | LAST, 0, B)
seqmsg(v, 12, 12, 77, 2, 12, 0, 8)
v.seg(u32(0x55667788) + u64(0x2000) + u64(1), "FETCH_ADD: rkey 0x55667788, raddr 0x2000, add 1")
v.f("rkey", "0x55667788")
v.f("raddr", "0x2000")
v.f("add", 1)
v.seal()

v = new("cmp_swap", """
CMP_SWAP: if *raddr == compare then *raddr = swap; the original value comes back in ATOMIC_RESP.
""")
base(v, "CMP_SWAP", ACK_REQ | LAST, 1, B)
seqmsg(v, 13, 12, 78, 2, 13, 0, 8)
v.seg(u32(0x55667788) + u64(0x2008) + u64(0x0123456789ABCDEF) + u64(0xFEDCBA9876543210),
      "CMP_SWAP: rkey 0x55667788, raddr 0x2008, compare 0x0123456789abcdef, swap 0xfedcba9876543210")
v.f("rkey", "0x55667788")
v.f("raddr", "0x2008")
v.f("compare", "0x0123456789abcdef")
v.f("swap", "0xfedcba9876543210")
v.seal()

v = new("atomic_resp", """
ATOMIC_RESP: B -> A, answer to CMP_SWAP msn 13 of A's stream 6; orig is the value before.
""")
base(v, "ATOMIC_RESP", LAST, 1, A)
seqmsg(v, 301, 301, 79, 6, 13, 0, 8)
v.seg(u64(0x0123456789ABCDEF), "ATOMIC_RESP: orig 0x0123456789abcdef")
v.f("orig", "0x0123456789abcdef")
v.seal()

# ---------------------------------------------------------------- valid: ACK
v = new("ack", """
ACK for path 2: every PSN before 42 received, nothing above; 3 CE marks so far; fair-share
hint 100000 Mbit/s (100 Gbit/s); echoes tsval 1000000, held 2500 ns.
""")
base(v, "ACK", 0, 2, A)
ack_body(v, 42, [], 3, 100000, 1000000, 2500)
v.seal()

v = new("ack_sack_multiword", """
ACK with SACK bits in all four 64-bit words: bit i means PSN cum_psn + 1 + i was received.
cum_psn 1000 is missing; received: 1001-1003 (bits 0-2), 1008 (bit 7), 1010 (bit 9),
1064 (bit 63), 1065 (bit 64), 1128 (bit 127), 1129 (bit 128), 1201 (bit 200), 1256 (bit 255).
Bit i is in byte i/8 of the bitmap at bit position i%8 (LSB first).
""")
base(v, "ACK", 0, 6, A)
ack_body(v, 1000, [0, 1, 2, 7, 9, 63, 64, 127, 128, 200, 255], 0, 0, 0xDEADBEEF, 0)
v.seal()

v = new("ack_psn_wrap", """
ACK whose window straddles the PSN wrap: cum_psn 4294967290 (2^32 - 6); bits 5 and 6 stand for
PSNs 4294967296 mod 2^32 = 0 and 1. Counters at their maximum.
""")
base(v, "ACK", 0, 255, A)
ack_body(v, 0xFFFFFFFA, [5, 6], 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
v.seal()

# ---------------------------------------------------------------- valid: NACK per reason
v = new("ack_multi", """
ACK_MULTI acknowledging paths 2, 0 and 7 of one connection in one datagram (the path byte of
the base header is 255: the blocks name their paths). Path 2 led (its ACK was due): a hole at
cum_psn 42 with 43 and 48 received (one SACK word). Path 0: in order (no SACK words). Path 7:
a SACK bit in the fourth word, so all four words are present. One hint for the connection.
""")
base(v, "ACK_MULTI", 0, 255, A)
ack_multi_body(v, 100000, [
    (2, 1, 42, [0, 5], 3, 1000000, 2500),
    (0, 0, 17, [], 0, 999000, 3500),
    (7, 4, 0xFFFFFFF0, [3, 200, 255], 1, 0, 0),
])
v.seal()

v = new("ack_multi_nonminimal", """
ACK_MULTI with one block whose two SACK words are both zero: valid (a receiver takes absent
and zero words alike), but an encoder writes the fewest words that hold the set bits, so the
re-encoding has none (and a new CRC).
""")
base(v, "ACK_MULTI", 0, 255, A)
ack_multi_body(v, 0, [(1, 2, 5, [], 0, 77, 0)])
v.seal()
v.emit = (u8(1) + u8(0x12) + u8(0) + u8(255) + u32(A) + u32(0) + u8(1) + bytes(3)
          + u8(1) + u8(0) + bytes(2) + u32(5) + u32(0) + u32(77) + u32(0))
v.emit += u32(zlib.crc32(v.emit) & 0xFFFFFFFF)

v = new("nack_remote_access", """
NACK RemoteAccess of PSN 41 on path 2 (stream and msn echoed from the refused packet).
""")
base(v, "NACK", 0, 2, A)
nack_body(v, 41, 5, 9, "REMOTE_ACCESS", 0)
v.seal()

v = new("nack_invalid_request", """
NACK InvalidRequest (e.g. unknown stream 99) of PSN 0 on path 0.
""")
base(v, "NACK", 0, 0, A)
nack_body(v, 0, 99, 0, "INVALID_REQUEST", 0)
v.seal()

v = new("nack_rnr", """
NACK ReceiverNotReady: no receive posted; retry after rnr_delay 25 x 10 us = 250 us.
""")
base(v, "NACK", 0, 3, A)
nack_body(v, 77, 5, 10, "RNR", 25)
v.seal()

v = new("nack_sequence", """
NACK Sequence: PSN 4000 is outside the receiver's window on path 1.
""")
base(v, "NACK", 0, 1, A)
nack_body(v, 4000, 5, 11, "SEQUENCE", 0)
v.seal()

v = new("nack_remote_operation", """
NACK RemoteOperation of PSN 12 on path 0: the SEND was valid but the receive it consumes names
memory the responder's stream may not write (e.g. its region moved to another protection domain).
""")
base(v, "NACK", 0, 0, A)
nack_body(v, 12, 5, 3, "REMOTE_OPERATION", 0)
v.seal()

v = new("nack_late", """
Late NACK: path 255 (never a path index) and psn 0; a READ accepted earlier (A's stream 6,
msn 10) could not be executed because its region was deregistered meanwhile.
""")
base(v, "NACK", 0, 255, A)
nack_body(v, 0, 6, 10, "REMOTE_ACCESS", 0)
v.seal()

v = new("nack_reserved_nonzero", """
NACK with its reserved 16 bits set: receivers MUST ignore them; emit writes them as zero.
""")
base(v, "NACK", 0, 1, A)
nack_body(v, 5, 6, 7, "RNR", 0, reserved=0xBEEF)
v.seal()
e = bytearray(v.body())
e[22:24] = b"\0\0"
e[-4:] = u32(zlib.crc32(bytes(e[:-4])) & 0xFFFFFFFF)
v.emit = bytes(e)

# ---------------------------------------------------------------- valid: connection
v = new("open", """
OPEN from A: dst_conn 0 (A does not know B's id yet), A's id, 8 paths, max payload 4096,
line rate 400000 Mbit/s. Sent on path 0.
""")
base(v, "OPEN", 0, 0, 0)
open_body(v, A, 8, 4096, 400000)
v.seal()

v = new("open_ack", """
OPEN_ACK from B to A: dst_conn is A's id, src_conn is B's; B accepts 4 paths and 1024 bytes;
B has 20 connections (crowd 20: 17 to 20 of them, on the level grid).
""")
base(v, "OPEN_ACK", 0, 0, A)
open_body(v, B, 4, 1024, 100000, crowd=20)
v.seal()

v = new("open_crowd", """
OPEN with 255 paths and crowd 90: a value off the level grid, which a receiver takes as it is
(the grid only bounds how often a sender updates it); emit writes it back unchanged.
""")
base(v, "OPEN", 0, 0, 0)
open_body(v, 1, 255, 65535, 0, crowd=90)
v.seal()

v = new("open_ack_mtu_64", """
OPEN_ACK offering mtu 64, the smallest valid value (MIN_MTU); 1 path, line rate unknown (0).
""")
base(v, "OPEN_ACK", 0, 0, A)
open_body(v, B, 1, 64, 0)
v.seal()

v = new("close", """
CLOSE from A to B, reason 0 (normal).
""")
base(v, "CLOSE", 0, 0, B)
close_body(v, A, 0)
v.seal()

v = new("close_ack", """
CLOSE_ACK from B to A: reason 0, whatever the CLOSE's reason was (a CLOSE_ACK does not echo it).
checks: [WIRE-28]
""")
base(v, "CLOSE_ACK", 0, 0, A)
close_body(v, B, 0)
v.seal()

v = new("probe", """
PROBE on path 4 (probe_seq 17, ts = sender clock in ns).
""")
base(v, "PROBE", 0, 4, B)
probe_body(v, 17, 0x12345678)
v.seal()

v = new("probe_ack", """
PROBE_ACK on path 4: echoes probe_seq and ts of the PROBE.
""")
base(v, "PROBE_ACK", 0, 4, A)
probe_body(v, 17, 0x12345678)
v.seal()

v = new("flags_undefined", """
Flag bits undefined for the opcode (0x80 everywhere; UNRELIABLE 0x40 outside SEND, SEND_IMM,
WRITE and WRITE_IMM; ORDERED 0x20 outside WRITE and WRITE_IMM) are carried, not rejected:
receivers ignore them, parse keeps the flags byte whole, emit writes it back unchanged (the
flags byte is not a reserved field: wire.md WIRE-15).
checks: [WIRE-15] [WIRE-29]
""")
base(v, "PROBE", 0xE0 | ACK_REQ, 9, B)
probe_body(v, 0, 0)
v.seal()

# ---------------------------------------------------------------- invalid
def inv(name, comment, error):
    v = new(name, comment)
    v.error = error
    return v


v = inv("bad_crc", "SEND whose trailer does not match (lowest bit flipped).", "BAD_CRC")
base(v, "SEND", LAST, 2, B, declare=False)
seqmsg(v, 41, 38, 1000000, 5, 9, 0, 14, declare=False)
v.seg(u32(3), "SEND: rsn 3")
payload(v, b"hello, ferroce", declare=False)
v.seal(corrupt=True)

v = inv("bad_crc_payload_bit", "ACK with bit 3 of byte 20 (inside the SACK bitmap) flipped after sealing.", "BAD_CRC")
base(v, "ACK", 0, 2, A, declare=False)
ack_body(v, 42, [], 3, 100000, 1000000, 2500, declare=False)
v.seal()
b = bytearray(v.body())
b[20] ^= 0x08
v.segs = [(bytes(b[:-4]), "ACK headers with byte 20 flipped from 0x%02x to 0x%02x" % (b[20] ^ 0x08, b[20])),
          (bytes(b[-4:]), "the original CRC-32 trailer")]

v = inv("truncated_short", "11 bytes: shorter than base header + trailer (12).", "TRUNCATED")
v.seg(bytes([1, 0x10, 0, 0, 0, 0, 0, 1, 0xAA, 0xBB, 0xCC]), "11 bytes")

v = inv("truncated_empty", "An empty UDP payload.", "TRUNCATED")

v = inv("truncated_headers", "A WRITE cut inside its opcode header: 44 bytes < 8 + 40 + 4 = 52.", "TRUNCATED")
base(v, "WRITE", 0, 0, B, declare=False)
seqmsg(v, 1, 0, 0, 3, 0, 0, 16, declare=False)
v.seg(u32(0x00ABCDEF) + u32(0x7F00), "WRITE: rkey, first half of raddr; the rest is missing")
v.seal()

v = inv("truncated_ack", "ACK one byte short (63 of 64).", "TRUNCATED")
base(v, "ACK", 0, 0, A, declare=False)
v.seg(u32(1) + bytes(32) + u32(0) + u32(0) + u32(0) + b"\0\0\0", "ACK body missing its last byte")
v.seal()

v = inv("bad_version", "Version 2 (this spec is version 1); the CRC is correct.", "BAD_VERSION 2")
v.seg(u8(2) + u8(0x30) + u8(0) + u8(0) + u32(B), "base: version 2, PROBE")
probe_body(v, 1, 2, declare=False)
v.seal()

v = inv("bad_version_zero", "Version 0; checked before the opcode (0xff would be unknown too).", "BAD_VERSION 0")
v.seg(u8(0) + u8(0xFF) + u8(0) + u8(0) + u32(B), "base: version 0, opcode 0xff")
probe_body(v, 1, 2, declare=False)
v.seal()

v = inv("bad_opcode", "Opcode 0x0a is unassigned; the CRC is correct.", "BAD_OPCODE 0x0a")
base(v, 0x0A, 0, 0, B, declare=False)
v.seg(bytes(8), "8 bytes of something")
v.seal()

v = inv("bad_opcode_ff", "Opcode 0xff is unassigned.", "BAD_OPCODE 0xff")
base(v, 0xFF, 0, 0, B, declare=False)
v.seal()

v = inv("ack_with_payload", """
ACK followed by 4 extra bytes before the trailer (CRC correct): opcodes without a payload
must have exactly their header length.
""", "MALFORMED")
base(v, "ACK", 0, 2, A, declare=False)
ack_body(v, 42, [], 3, 100000, 1000000, 2500, declare=False)
v.seg(b"junk", "4 bytes of payload on an ACK")
v.seal()

v = inv("ack_multi_no_blocks", "ACK_MULTI with count 0 (and no blocks).", "MALFORMED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
ack_multi_body(v, 0, [], declare=False)
v.seal()

v = inv("ack_multi_short", """
ACK_MULTI whose count (2) promises more blocks than it holds (one).
""", "MALFORMED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
ack_multi_body(v, 0, [(1, 0, 5, [], 0, 0, 0)], count=2, declare=False)
v.seal()

v = inv("ack_multi_trailing", """
ACK_MULTI with 4 bytes after its only block (CRC correct).
""", "MALFORMED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
ack_multi_body(v, 0, [(1, 0, 5, [], 0, 0, 0)], declare=False)
v.seg(b"junk", "4 bytes after the last block")
v.seal()

v = inv("ack_multi_words_5", """
ACK_MULTI block claiming 5 SACK words (the bitmap has 4), 40 bytes of them present.
""", "MALFORMED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
ack_multi_body(v, 0, [(1, 5, 5, [], 0, 0, 0)], declare=False)
v.seg(bytes(40), "40 bytes of SACK")
v.seal()

v = inv("ack_multi_path_twice", """
ACK_MULTI naming path 3 in two blocks.
""", "MALFORMED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
ack_multi_body(v, 0, [(3, 0, 5, [], 0, 0, 0), (3, 0, 6, [], 0, 0, 0)], declare=False)
v.seal()

v = inv("truncated_ack_multi", """
ACK_MULTI of 15 bytes: shorter than base header + its fixed part + trailer (20).
""", "TRUNCATED")
base(v, "ACK_MULTI", 0, 255, A, declare=False)
v.seg(u32(0) + u8(1) + bytes(2), "rate hint, count 1, two of three reserved bytes")

v = inv("read_req_with_payload", "READ_REQ with 1 trailing byte (CRC correct).", "MALFORMED")
base(v, "READ_REQ", 0, 4, B, declare=False)
seqmsg(v, 5, 0, 999, 2, 10, 0, 65536, declare=False)
v.seg(u32(0x11223344) + u64(0x10000), "READ_REQ: rkey, raddr")
v.seg(b"\x00", "1 extra byte")
v.seal()

v = inv("structure_before_crc", """
PROBE with 1 trailing byte AND a wrong CRC: structure is checked before the CRC, so the
error is MALFORMED, not BAD_CRC.
""", "MALFORMED")
base(v, "PROBE", 0, 4, B, declare=False)
probe_body(v, 17, 0x12345678, declare=False)
v.seg(b"\x00", "1 extra byte")
v.seal(corrupt=True)

v = inv("atomic_length_4", "FETCH_ADD with length 4 (atomics operate on exactly 8 bytes).", "MALFORMED")
base(v, "FETCH_ADD", ACK_REQ | LAST, 0, B, declare=False)
seqmsg(v, 12, 12, 77, 2, 12, 0, 4, declare=False)
v.seg(u32(0x55667788) + u64(0x2000) + u64(1), "FETCH_ADD: rkey, raddr, add")
v.seal()

v = inv("atomic_offset", "CMP_SWAP with offset 8 (atomics must have offset 0).", "MALFORMED")
base(v, "CMP_SWAP", 0, 1, B, declare=False)
seqmsg(v, 13, 12, 78, 2, 13, 8, 8, declare=False)
v.seg(u32(0x55667788) + u64(0x2008) + u64(0) + u64(1), "CMP_SWAP: rkey, raddr, compare, swap")
v.seal()

v = inv("atomic_resp_length_16", "ATOMIC_RESP with length 16.", "MALFORMED")
base(v, "ATOMIC_RESP", 0, 1, A, declare=False)
seqmsg(v, 301, 301, 79, 6, 13, 0, 16, declare=False)
v.seg(u64(7), "ATOMIC_RESP: orig")
v.seal()

v = inv("read_req_offset", "READ_REQ with offset 4096 (must be 0).", "MALFORMED")
base(v, "READ_REQ", 0, 4, B, declare=False)
seqmsg(v, 5, 0, 999, 2, 10, 4096, 65536, declare=False)
v.seg(u32(0x11223344) + u64(0x10000), "READ_REQ: rkey, raddr")
v.seal()

v = inv("payload_beyond_length", "WRITE with offset 32 + 16 payload bytes > length 40.", "MALFORMED")
base(v, "WRITE", 0, 7, B, declare=False)
seqmsg(v, 1001, 996, 5, 3, 77, 32, 40, declare=False)
v.seg(u32(0x00ABCDEF) + u64(0x7F0000001020), "WRITE: rkey, raddr")
v.seg(bytes(16), "16 bytes of payload")
v.seal()

v = inv("offset_overflow", """
READ_RESP with offset 0xfffffff8 and 16 bytes: offset + payload exceeds 2^32 (and length);
the sum must be computed without wrapping.
""", "MALFORMED")
base(v, "READ_RESP", 0, 5, A, declare=False)
seqmsg(v, 302, 290, 1, 6, 10, 0xFFFFFFF8, 0xFFFFFFFF, declare=False)
v.seg(bytes(16), "16 bytes of payload")
v.seal()

v = inv("empty_nonempty_message", "SEND_IMM without payload in a message of length 24.", "MALFORMED")
base(v, "SEND_IMM", 0, 0, B, declare=False)
seqmsg(v, 0, 0, 1, 1, 0, 24, 24, declare=False)
v.seg(u32(0) + u32(0), "SEND_IMM: rsn, imm")
v.seal()

v = inv("nack_reason_0", "NACK with reason 0 (unassigned).", "MALFORMED")
base(v, "NACK", 0, 2, A, declare=False)
nack_body(v, 41, 5, 9, 0, 0, declare=False)
v.seal()

v = inv("nack_reason_6", "NACK with reason 6 (unassigned).", "MALFORMED")
base(v, "NACK", 0, 2, A, declare=False)
nack_body(v, 41, 5, 9, 6, 0, declare=False)
v.seal()

v = inv("open_zero_paths", "OPEN offering 0 paths.", "MALFORMED")
base(v, "OPEN", 0, 0, 0, declare=False)
open_body(v, A, 0, 4096, 400000, declare=False)
v.seal()

v = inv("open_ack_conn_zero", "OPEN_ACK with src_conn 0 (reserved).", "MALFORMED")
base(v, "OPEN_ACK", 0, 0, A, declare=False)
open_body(v, 0, 4, 1024, 100000, declare=False)
v.seal()

v = inv("open_mtu_63", """
OPEN offering mtu 63: below the minimum payload of 64 (wire.md 2.12), so MALFORMED; paths and
src_conn are valid, so only the mtu check can reject it.
""", "MALFORMED")
base(v, "OPEN", 0, 0, 0, declare=False)
open_body(v, A, 8, 63, 400000, declare=False)
v.seal()

# Connection manager (cm.md section 1): vectors in spec/vectors/cm/, checked by the CM
# codec's tests (transport/src/cm/tests.rs), not by the packet codec of sections 2-3.
CM_OPCODES = {"CM_REQ": 0x40, "CM_REP": 0x41, "CM_RTU": 0x42, "CM_REJ": 0x43, "CM_DREQ": 0x44,
              "CM_DREP": 0x45, "CM_SIDR_REQ": 0x46, "CM_SIDR_REP": 0x47}
CM_OUT = []


def cm_new(name, comment, error=None):
    v = Vec(name, comment)
    v.error = error
    CM_OUT.append(v)
    return v


def cm_base(v, op, dst, src):
    v.f("opcode", op)
    v.f("dst_comm", "0x%08x" % dst)
    v.f("src_comm", "0x%08x" % src)
    v.seg(u8(1) + u8(CM_OPCODES[op]) + u8(0) + u8(0) + u32(dst),
          "base: version 1, opcode 0x%02x %s, flags 0, path 0, dst_comm 0x%08x" % (CM_OPCODES[op], op, dst))
    v.seg(u32(src), "src_comm 0x%08x" % src)


def cm_req(v, src, ps, dport, sport, rr, qpn, psn, idepth, retry, rnr, dst_addr, pd, pd_len=None):
    cm_base(v, "CM_REQ", 0, src)
    n = len(pd) if pd_len is None else pd_len
    v.seg(u16(ps) + u16(dport) + u16(sport) + u8(n) + u8(rr) + u32(qpn) + u32(psn) + u8(idepth)
          + u8(retry) + u8(rnr) + u8(0) + bytes(dst_addr),
          "port_space 0x%04x, dst_port %d, src_port %d, pd_len %d, responder_resources %d, qpn 0x%06x, "
          "start_psn 0x%06x, initiator_depth %d, retry %d, rnr_retry %d, reserved, dst_addr %s"
          % (ps, dport, sport, n, rr, qpn, psn, idepth, retry, rnr, ".".join(map(str, dst_addr))))
    if pd:
        v.seg(pd, "private data, %d bytes" % len(pd))


def cm_rep(v, dst, src, qpn, psn, rr, idepth, rnr, pd):
    cm_base(v, "CM_REP", dst, src)
    v.seg(u32(qpn) + u32(psn) + u8(rr) + u8(idepth) + u8(rnr) + u8(len(pd)),
          "qpn 0x%06x, start_psn 0x%06x, responder_resources %d, initiator_depth %d, rnr_retry %d, pd_len %d"
          % (qpn, psn, rr, idepth, rnr, len(pd)))
    if pd:
        v.seg(pd, "private data, %d bytes" % len(pd))


def cm_short(v, op, dst, src, pd, reason=None):
    cm_base(v, op, dst, src)
    if op == "CM_REJ":
        v.seg(u16(reason) + u8(0) + u8(len(pd)), "reason %d, reserved, pd_len %d" % (reason, len(pd)))
    else:
        v.seg(u8(len(pd)) + bytes(3), "pd_len %d, reserved 3 B" % len(pd))
    if pd:
        v.seg(pd, "private data, %d bytes" % len(pd))


def cm_sidr_req(v, src, ps, dport, sport, dst_addr, pd, dst=0):
    cm_base(v, "CM_SIDR_REQ", dst, src)
    v.seg(u16(ps) + u16(dport) + u16(sport) + u8(len(pd)) + u8(0) + bytes(dst_addr),
          "port_space 0x%04x, dst_port %d, src_port %d, pd_len %d, reserved, dst_addr %s"
          % (ps, dport, sport, len(pd), ".".join(map(str, dst_addr))))
    if pd:
        v.seg(pd, "private data, %d bytes" % len(pd))


def cm_sidr_rep(v, dst, src, status, qpn, qkey, pd, pd_len=None):
    cm_base(v, "CM_SIDR_REP", dst, src)
    n = len(pd) if pd_len is None else pd_len
    v.seg(u8(status) + u8(n) + u16(0) + u32(qpn) + u32(qkey),
          "status %d, pd_len %d, reserved 2 B, qpn 0x%06x, qkey 0x%08x" % (status, n, qpn, qkey))
    if pd:
        v.seg(pd, "private data, %d bytes" % len(pd))


B_ADDR = [198, 18, 0, 12]
v = cm_new("cm_req", "REQ for RDMA_PS_TCP port 7174 with 5 bytes of private data.")
cm_req(v, 0x1a2b3c4d, 0x0106, 7174, 40001, 1, 0x00abcd, 0x000123, 1, 7, 7, B_ADDR, b"hello")
v.seal()
v = cm_new("cm_req_pd_56", "REQ with the most private data it carries (56 B).")
cm_req(v, 0x00000001, 0x0106, 18515, 1, 16, 0xffffff, 0xffffff, 16, 0, 0, B_ADDR, bytes(range(56)))
v.seal()
v = cm_new("cm_rep", "REP answering cm_req, 5 bytes of private data.")
cm_rep(v, 0x1a2b3c4d, 0x55667788, 0x000321, 0x000042, 1, 1, 7, b"world")
v.seal()
v = cm_new("cm_rtu", "RTU, no private data.")
cm_short(v, "CM_RTU", 0x55667788, 0x1a2b3c4d, b"")
v.seal()
v = cm_new("cm_rej_no_listener", "REJ of a REQ for a port nobody listens on: reason 8 (invalid service id).")
cm_short(v, "CM_REJ", 0x1a2b3c4d, 0x00000009, b"", reason=8)
v.seal()
v = cm_new("cm_rej_consumer", "REJ by the application (reason 28) with 2 bytes of private data.")
cm_short(v, "CM_REJ", 0x1a2b3c4d, 0x55667788, b"no", reason=28)
v.seal()
v = cm_new("cm_dreq", "DREQ with 3 bytes of private data.")
cm_short(v, "CM_DREQ", 0x55667788, 0x1a2b3c4d, b"bye")
v.seal()
v = cm_new("cm_drep", "DREP.")
cm_short(v, "CM_DREP", 0x1a2b3c4d, 0x55667788, b"")
v.seal()
v = cm_new("cm_req_pd_57", "REQ claiming 57 B of private data (limit 56).", "MALFORMED")
cm_req(v, 1, 0x0106, 1, 1, 0, 1, 1, 0, 0, 0, B_ADDR, bytes(57))
v.seal()
v = cm_new("cm_req_pd_len_short", "REQ whose pd_len says 6 but carries 5 bytes.", "MALFORMED")
cm_req(v, 1, 0x0106, 1, 1, 0, 1, 1, 0, 0, 0, B_ADDR, b"hello", pd_len=6)
v.seal()
v = cm_new("cm_req_dst_comm", "REQ with a dst_comm (must be 0).", "MALFORMED")
v.seg(u8(1) + u8(0x40) + u8(0) + u8(0) + u32(5), "base: REQ with dst_comm 5")
v.seg(u32(1), "src_comm 1")
v.seg(u16(0x0106) + u16(1) + u16(1) + u8(0) + u8(0) + u32(1) + u32(1) + bytes(4) + bytes(B_ADDR), "REQ fields")
v.seal()
v = cm_new("cm_req_retry_8", "REQ with retry_count 8 (0..7).", "MALFORMED")
cm_req(v, 1, 0x0106, 1, 1, 0, 1, 1, 0, 8, 0, B_ADDR, b"")
v.seal()
v = cm_new("cm_rtu_src_0", "RTU with src_comm 0.", "MALFORMED")
cm_short(v, "CM_RTU", 5, 0, b"")
v.seal()
v = cm_new("cm_rep_bad_crc", "REP with a corrupted trailer.", "BAD_CRC")
cm_rep(v, 1, 2, 3, 4, 0, 0, 0, b"")
v.seal(corrupt=True)
v = cm_new("cm_sidr_req", "SIDR_REQ for RDMA_PS_UDP port 7174 with 5 bytes of private data.")
cm_sidr_req(v, 0x1a2b3c4d, 0x0111, 7174, 40001, B_ADDR, b"hello")
v.seal()
v = cm_new("cm_sidr_req_pd_180", "SIDR_REQ with the most private data it carries (180 B).")
cm_sidr_req(v, 0x00000001, 0x0111, 18515, 1, B_ADDR, bytes(i & 0xff for i in range(180)))
v.seal()
v = cm_new("cm_sidr_rep", "SIDR_REP answering cm_sidr_req: QP valid, QPN 0x000321, Q_Key 0x01234567, 5 bytes of private data.")
cm_sidr_rep(v, 0x1a2b3c4d, 0x55667788, 0, 0x000321, 0x01234567, b"world")
v.seal()
v = cm_new("cm_sidr_rep_no_listener", "SIDR_REP of a SIDR_REQ for a port nobody listens on: status 1.")
cm_sidr_rep(v, 0x1a2b3c4d, 0x00000009, 1, 0, 0, b"")
v.seal()
v = cm_new("cm_sidr_req_pd_181", "SIDR_REQ claiming 181 B of private data (limit 180).", "MALFORMED")
cm_sidr_req(v, 1, 0x0111, 1, 1, B_ADDR, bytes(181))
v.seal()
v = cm_new("cm_sidr_req_dst_comm", "SIDR_REQ with a dst_comm (must be 0).", "MALFORMED")
cm_sidr_req(v, 1, 0x0111, 1, 1, B_ADDR, b"", dst=5)
v.seal()
v = cm_new("cm_sidr_rep_pd_len_long", "SIDR_REP whose pd_len says 3 but carries 2 bytes.", "MALFORMED")
cm_sidr_rep(v, 1, 2, 0, 1, 1, b"no", pd_len=3)
v.seal()
v = cm_new("cm_sidr_rep_qpn_25_bits", "SIDR_REP with a QPN over 24 bits.", "MALFORMED")
cm_sidr_rep(v, 1, 2, 0, 0x01000000, 1, b"")
v.seal()
v = cm_new("cm_sidr_rep_dst_0", "SIDR_REP with dst_comm 0.", "MALFORMED")
cm_sidr_rep(v, 0, 2, 0, 1, 1, b"")
v.seal()
v = cm_new("cm_drep_truncated", "DREP cut before its pd_len byte.", "TRUNCATED")
v.seg(u8(1) + u8(0x45) + u8(0) + u8(0) + u32(5) + u32(6), "base and src_comm only")
v.seg(u32(0), "4 bytes where a trailer would be")


if __name__ == "__main__":
    names = set()
    for v in OUT:
        assert v.name not in names, v.name
        names.add(v.name)
        v.write()
    os.makedirs(os.path.join(HERE, "cm"), exist_ok=True)
    for v in CM_OUT:
        assert v.name not in names, v.name
        names.add(v.name)
        path = v.write()
        os.replace(path, os.path.join(HERE, "cm", v.name + ".vec"))
    valid = sum(1 for v in OUT if v.error is None)
    print("wrote %d vectors (%d valid, %d invalid) to %s" % (len(OUT), valid, len(OUT) - valid, HERE))
