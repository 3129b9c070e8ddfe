#!/usr/bin/env python3
"""XRC packet vectors (spec/rocev2.md section 3, XRC and 6.10) for ferroce's RoCEv2 codec.

Written from the IBTA vol. 1 layouts alone (BTH 9.2, XRCETH 9.3.9: a reserved byte and the
24-bit XRC SRQ number, right after the BTH of every XRC request; RETH, AtomicETH, AETH,
AtomicAckETH, ImmDt, IETH as for RC; XRC opcodes = transport prefix 101 + the RC operation),
not from ferroce's codec, so the vectors check the codec. Every packet is a whole UDP payload
(BTH .. ICRC) whose ICRC is computed over ferroce's canonical IPv4/UDP headers
(spec/rocev2.md section 5) from `src` to `dst`, UDP source port `sport`.
Also writes roce-xrc-sample.pcap (the valid vectors as Ethernet frames) for tshark's
InfiniBand dissector (README.md). Run from this directory: python3 gen_roce_xrc.py
"""
import os
import struct
import zlib

SRC, DST, SPORT = bytes([198, 18, 7, 1]), bytes([198, 18, 7, 2]), 0xC0DE
XRC = 0xA0
OUT = []


def canonical(src, dst, sport, n):
    """ferroce's canonical IPv4 and UDP headers for a UDP payload of n bytes."""
    udp_len = 8 + n
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0x02, 20 + udp_len, 0, 0x4000, 64, 17, 0, src, dst)
    s = sum(struct.unpack(">10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack(">H", (~s) & 0xFFFF) + ip[12:]
    return ip, struct.pack(">HHHH", sport, 4791, udp_len, 0)


def icrc(ip, udp, ib):
    """IBTA Annex A17: CRC-32 over 8 bytes of ones, the IPv4 header with TOS, TTL and
    checksum as ones, the UDP header with its checksum as ones, the BTH with byte 4 as ones,
    the rest; little-endian on the wire."""
    mip = bytearray(ip)
    mip[1] = 0xFF
    mip[8] = 0xFF
    mip[10:12] = b"\xff\xff"
    mudp = bytearray(udp)
    mudp[6:8] = b"\xff\xff"
    mib = bytearray(ib)
    mib[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(mip) + bytes(mudp) + bytes(mib)))


class Vec:
    def __init__(self, name, comment, op, psn, qp=0x00C0FE, srqn=None, se=False, ackreq=True,
                 payload=b"", error=None):
        self.name, self.comment, self.error = name, comment, error
        self.fields = [("opcode", "0x%02x" % op), ("dest_qp", "0x%06x" % qp),
                       ("psn", "0x%06x" % psn), ("ack_req", int(ackreq))]
        pad = (4 - len(payload) % 4) % 4
        b1 = (0x80 if se else 0) | (pad << 4)
        self.parts = [("BTH: opcode, SE/M/pad/TVer, P_Key, reserved+DestQP, A+PSN",
                       struct.pack(">BBHII", op, b1, 0xFFFF, qp, (0x80000000 if ackreq else 0) | psn))]
        if srqn is not None:
            self.fields.append(("xrc_srqn", "0x%06x" % srqn))
            self.parts.append(("XRCETH: reserved, XRC SRQ number", struct.pack(">I", srqn)))
        self.payload, self.pad = payload, pad

    def reth(self, va, rkey, dlen):
        self.fields += [("reth_va", "0x%x" % va), ("reth_rkey", "0x%08x" % rkey), ("reth_len", dlen)]
        self.parts.append(("RETH: VA, R_Key, DMA length", struct.pack(">QII", va, rkey, dlen)))
        return self

    def atomic(self, va, rkey, swap_add, compare):
        self.fields += [("atomic_va", "0x%x" % va), ("atomic_rkey", "0x%08x" % rkey),
                        ("atomic_swap_add", "0x%x" % swap_add), ("atomic_compare", "0x%x" % compare)]
        self.parts.append(("AtomicETH: VA, R_Key, swap/add, compare",
                           struct.pack(">QIQQ", va, rkey, swap_add, compare)))
        return self

    def aeth(self, syndrome, msn):
        self.fields += [("aeth_syndrome", "0x%02x" % syndrome), ("aeth_msn", "0x%06x" % msn)]
        self.parts.append(("AETH: syndrome, MSN", struct.pack(">I", syndrome << 24 | msn)))
        return self

    def atomic_ack(self, orig):
        self.fields.append(("atomic_ack", "0x%x" % orig))
        self.parts.append(("AtomicAckETH: original data", struct.pack(">Q", orig)))
        return self

    def imm(self, v):
        self.fields.append(("imm", "0x%08x" % v))
        self.parts.append(("ImmDt", struct.pack(">I", v)))
        return self

    def ieth(self, v):
        self.fields.append(("ieth", "0x%08x" % v))
        self.parts.append(("IETH: R_Key to invalidate", struct.pack(">I", v)))
        return self

    def bytes(self, truncate=None):
        ib = b"".join(p for _, p in self.parts) + self.payload + b"\x00" * self.pad
        if truncate is not None:
            ib = ib[:truncate]
        ip, udp = canonical(SRC, DST, SPORT, len(ib) + 4)
        return ib + icrc(ip, udp, ib)

    def done(self, truncate=None):
        self.truncate = truncate
        OUT.append(self)
        return self

    def write(self, d):
        data = self.bytes(self.truncate)
        with open(os.path.join(d, self.name + ".vec"), "w") as f:
            f.write("# %s\n" % self.comment)
            f.write("name: %s\n" % self.name)
            f.write("src: 198.18.7.1\ndst: 198.18.7.2\nsport: 0x%04x\n" % SPORT)
            if self.error:
                f.write("error: %s\n" % self.error)
            else:
                for k, v in self.fields:
                    f.write("%s: %s\n" % (k, v))
                f.write("payload: %s\n" % self.payload.hex())
            f.write("# %d bytes: the UDP payload (BTH .. ICRC)\n" % len(data))
            at, body = 0, len(data) - 4
            for what, p in self.parts:
                if at >= body:
                    break
                chunk = data[at:min(at + len(p), body)]
                f.write("hex: %s   # @%d: %s\n" % (" ".join("%02x" % x for x in chunk), at, what))
                at += len(chunk)
            rest = data[at:body]
            for i in range(0, len(rest), 16):
                f.write("hex: %s   # @%d: payload and pad\n"
                        % (" ".join("%02x" % x for x in rest[i:i + 16]), at + i))
            f.write("hex: %s   # @%d: ICRC (little-endian)\n"
                    % (" ".join("%02x" % x for x in data[-4:]), len(data) - 4))


P = bytes(range(0x41, 0x41 + 13))  # 13 bytes: pad 3
Vec("xrc_send_only", "XRC SEND ONLY (0xA4) to XRC SRQ 0x000123, 13-byte payload, pad 3",
    XRC | 0x04, 0x000100, srqn=0x000123, payload=P, se=True).done()
Vec("xrc_send_first", "XRC SEND FIRST (0xA0), SRQ 0xabcdef, 16 bytes, no AckReq",
    XRC | 0x00, 0x000200, srqn=0xABCDEF, payload=bytes(16), ackreq=False).done()
Vec("xrc_send_last_imm", "XRC SEND LAST with immediate (0xA3): XRCETH before ImmDt",
    XRC | 0x03, 0x000201, srqn=0xABCDEF, payload=b"tail").imm(0xFEEDF00D).done()
Vec("xrc_send_only_inv", "XRC SEND ONLY with invalidate (0xB7): XRCETH before IETH",
    XRC | 0x17, 0x000300, srqn=0x000001, payload=b"x").ieth(0x11223344).done()
Vec("xrc_write_only_imm", "XRC RDMA WRITE ONLY with immediate (0xAB): XRCETH, RETH, ImmDt",
    XRC | 0x0B, 0x000400, srqn=0x00F00D, payload=b"abcdefgh").reth(0x7F0000001000, 0x00C0FFEE, 8).imm(7).done()
Vec("xrc_write_middle", "XRC RDMA WRITE MIDDLE (0xA7): XRCETH only (the SRQ number is in every packet)",
    XRC | 0x07, 0xFFFFFF, srqn=0x00F00D, payload=bytes(range(32)), ackreq=False).done()
Vec("xrc_read_request", "XRC RDMA READ REQUEST (0xAC): XRCETH, RETH",
    XRC | 0x0C, 0x000500, srqn=0x000042).reth(0x2000, 0x12345678, 3000).done()
Vec("xrc_cmp_swap", "XRC CMP_SWAP (0xB3): XRCETH, AtomicETH",
    XRC | 0x13, 0x000600, srqn=0x000042).atomic(0x8008, 0x0BADCAFE, 0x1111, 0x2222).done()
Vec("xrc_fetch_add", "XRC FETCH_ADD (0xB4): XRCETH, AtomicETH (compare 0)",
    XRC | 0x14, 0x000601, srqn=0xFFFFFF).atomic(0x8010, 0x0BADCAFE, 5, 0).done()
Vec("xrc_ack", "XRC ACKNOWLEDGE (0xB1): AETH, no XRCETH (responses carry none)",
    XRC | 0x11, 0x000601, ackreq=False).aeth(0x1F, 0x000009).done()
Vec("xrc_atomic_ack", "XRC ATOMIC ACKNOWLEDGE (0xB2): AETH, AtomicAckETH",
    XRC | 0x12, 0x000601, ackreq=False).aeth(0x1F, 0x00000A).atomic_ack(0x0102030405060708).done()
Vec("xrc_read_response_first", "XRC RDMA READ RESPONSE FIRST (0xAD): AETH, payload",
    XRC | 0x0D, 0x000500, ackreq=False, payload=bytes(range(64))).aeth(0x1F, 0x000003).done()
Vec("xrc_read_response_middle", "XRC RDMA READ RESPONSE MIDDLE (0xAE): no extended header",
    XRC | 0x0E, 0x000501, ackreq=False, payload=bytes(range(64, 128))).done()
# Invalid.
Vec("xrc_opcode_b5", "prefix 101 with operation 0x15 (reserved, as in RC): unknown opcode",
    XRC | 0x15, 0x000700, srqn=0x000001, error="UNKNOWN_OPCODE").done()
Vec("xrc_opcode_c4", "prefix 110 (reserved transport): unknown opcode",
    0xC4, 0x000700, srqn=0x000001, payload=b"abcd", error="UNKNOWN_OPCODE").done()
Vec("xrc_read_request_truncated", "XRC READ REQUEST cut inside its RETH: truncated",
    XRC | 0x0C, 0x000800, srqn=0x000042, error="TRUNCATED").reth(0x2000, 1, 8).done(truncate=12 + 4 + 8)
Vec("xrc_fetch_add_with_payload", "XRC FETCH_ADD with 4 bytes after its headers: malformed",
    XRC | 0x14, 0x000900, srqn=0x000042, payload=b"oops", error="MALFORMED").atomic(8, 1, 1, 0).done()


def pcap(path, vecs):
    recs = []
    for i, v in enumerate(vecs):
        ib = v.bytes()
        ip, udp = canonical(SRC, DST, SPORT, len(ib))
        frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]) + b"\x08\x00" + ip + udp + ib
        recs.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(recs))


here = os.path.dirname(os.path.abspath(__file__))
for v in OUT:
    v.write(here)
pcap(os.path.join(here, "roce-xrc-sample.pcap"), [v for v in OUT if not v.error])
