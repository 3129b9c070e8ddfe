#!/usr/bin/env python3
"""IBTA CM MAD vectors (spec/rocev2.md section 10) for ferroce's RoCEv2 connection manager.

Written from the IBTA vol. 1 chapter 12 / 13.4 layouts alone (MAD common header, tables
106-113), byte and bit positions in the "Byte[Bit]" notation of the tables (bit 0 = the most
significant bit of the byte), not from ferroce's codec, so the vectors check the codec.
Also writes roce-cm-sample.pcap: every valid vector as a RoCEv2 UD SEND to QP1, for tshark's
InfiniBand dissector (see README.md). Run from this directory: python3 gen_roce_cm.py
"""
import os
import struct
import zlib

MAD_LEN = 256
HDR = 24  # MAD common header; the tables' offsets are after it

ATTRS = {"REQ": 0x0010, "MRA": 0x0011, "REJ": 0x0012, "REP": 0x0013, "RTU": 0x0014,
         "DREQ": 0x0015, "DREP": 0x0016, "SIDR_REQ": 0x0017, "SIDR_REP": 0x0018}
# Private data: (offset in the CM data, bytes)
PD = {"REQ": (140, 92), "MRA": (10, 222), "REJ": (84, 148), "REP": (36, 196), "RTU": (8, 224),
      "DREQ": (12, 220), "DREP": (8, 224), "SIDR_REQ": (16, 216), "SIDR_REP": (96, 136)}


class Mad:
    def __init__(self, name, comment, attr=None, error=None):
        self.name, self.comment, self.attr, self.error = name, comment, attr, error
        self.b = bytearray(MAD_LEN)
        self.fields = []
        self.notes = []

    def f(self, k, v):
        self.fields.append((k, v))

    # Setters on CM-data offsets (after the common header), bit offsets from the MSB.
    def bits(self, name, byte, bit, width, value):
        assert 0 <= value < (1 << width)
        shift = 8 - bit - width
        mask = ((1 << width) - 1) << shift
        at = HDR + byte
        assert self.b[at] & mask == 0, "overlap at %s" % name
        self.b[at] |= value << shift
        self.f(name, value if width < 8 else value)
        self.notes.append((at, name))

    def be(self, name, byte, nbytes, value, top_bits=None):
        """A big-endian field of nbytes; top_bits: only the first top_bits bits (rest 0)."""
        at = HDR + byte
        if top_bits is None:
            raw = value
        else:
            assert value < (1 << top_bits)
            raw = value << (nbytes * 8 - top_bits)
        for i, x in enumerate(raw.to_bytes(nbytes, "big")):
            assert self.b[at + i] & x == 0, "overlap at %s" % name
            self.b[at + i] |= x
        self.f(name, "0x%x" % value)
        self.notes.append((at, name))

    def raw(self, name, byte, data, listed=True):
        at = HDR + byte
        self.b[at:at + len(data)] = data
        if listed:
            self.f(name, data.hex())
        self.notes.append((at, name))

    def header(self, attr, tid, method=0x03, status=0, base=1, mgmt=0x07, cv=2, attr_mod=0):
        if isinstance(attr, str):
            self.attr = attr
        struct.pack_into(">BBBBHHQHHI", self.b, 0, base, mgmt, cv, method, status, 0, tid,
                         ATTRS.get(attr, attr if isinstance(attr, int) else 0), 0, attr_mod)
        self.f("tid", "0x%016x" % tid)
        self.f("status", "0x%04x" % status)
        self.f("attr_mod", "0x%08x" % attr_mod)
        self.notes.append((0, "common header: base version %d, class 0x%02x, class version %d, "
                              "method 0x%02x, status, class-specific, TID, attribute ID, reserved, "
                              "attribute modifier" % (base, mgmt, cv, method)))

    def pd(self, data):
        off, n = PD[self.attr]
        assert len(data) <= n
        self.raw("private_data", off, data.ljust(n, b"\0"), listed=False)
        # Listed without its trailing zeros (the area is fixed-size).
        self.f("private_data", data.rstrip(b"\0").hex())

    def write(self, out):
        lines = ["# " + self.comment, "name: " + self.name]
        if self.error:
            lines.append("error: " + self.error)
        else:
            lines.append("attr: " + self.attr)
            lines += ["%s: %s" % kv for kv in self.fields]
        lines.append("# %d bytes (the UD payload); the comment gives each line's offset" % len(self.b))
        for i in range(0, len(self.b), 16):
            chunk = self.b[i:i + 16]
            names = [n for (at, n) in self.notes if i <= at < i + 16]
            c = "@%d" % i + (": " + ", ".join(names) if names else "")
            lines.append("hex: " + " ".join("%02x" % x for x in chunk).ljust(48) + "  # " + c)
        with open(os.path.join(out, self.name + ".vec"), "w") as fh:
            fh.write("\n".join(lines) + "\n")


def gid4(a):
    """The IPv4-mapped GID RoCEv2 uses for an IPv4 address."""
    return bytes(10) + b"\xff\xff" + bytes(a)


def cma_hdr(sport, src, dst):
    """rdma_cm's private-data header: version 0, IP version in bits 7:4, the initiator's
    port, then source and destination as 16-byte fields (IPv4: 12 zero bytes, address)."""
    return (bytes([0x00, 0x40]) + struct.pack(">H", sport) + bytes(12) + bytes(src)
            + bytes(12) + bytes(dst))


def req(m, tid, comm, sid, guid, qkey, qpn, rr, idepth, rcrt, tst, e2e, psn, lcrt, retry,
        pkey, mtu, rdc, rnr, maxr, srq, ext, pri, alt, sap, pd):
    m.header("REQ", tid)
    m.be("local_comm_id", 0, 4, comm)
    m.be("service_id", 8, 8, sid)
    m.be("local_ca_guid", 16, 8, guid)
    m.be("local_qkey", 28, 4, qkey)
    m.be("local_qpn", 32, 3, qpn)
    m.bits("responder_resources", 35, 0, 8, rr)
    m.be("local_eecn", 36, 3, 0)
    m.bits("initiator_depth", 39, 0, 8, idepth)
    m.be("remote_eecn", 40, 3, 0)
    m.bits("remote_cm_response_timeout", 43, 0, 5, rcrt)
    m.bits("transport_service_type", 43, 5, 2, tst)
    m.bits("end_to_end_flow_control", 43, 7, 1, e2e)
    m.be("starting_psn", 44, 3, psn)
    m.bits("local_cm_response_timeout", 47, 0, 5, lcrt)
    m.bits("retry_count", 47, 5, 3, retry)
    m.be("pkey", 48, 2, pkey)
    m.bits("path_mtu", 50, 0, 4, mtu)
    m.bits("rdc_exists", 50, 4, 1, rdc)
    m.bits("rnr_retry_count", 50, 5, 3, rnr)
    m.bits("max_cm_retries", 51, 0, 4, maxr)
    m.bits("srq", 51, 4, 1, srq)
    m.bits("extended_transport_type", 51, 5, 3, ext)
    for p, base, v in (("primary_", 52, pri), ("alternate_", 96, alt)):
        m.be(p + "local_lid", base + 0, 2, v["llid"])
        m.be(p + "remote_lid", base + 2, 2, v["rlid"])
        m.raw(p + "local_gid", base + 4, v["lgid"])
        m.raw(p + "remote_gid", base + 20, v["rgid"])
        m.be(p + "flow_label", base + 36, 4, v["flow"], top_bits=20)
        m.bits(p + "packet_rate", base + 39, 2, 6, v["rate"])
        m.bits(p + "traffic_class", base + 40, 0, 8, v["tc"])
        m.bits(p + "hop_limit", base + 41, 0, 8, v["hop"])
        m.bits(p + "sl", base + 42, 0, 4, v["sl"])
        m.bits(p + "subnet_local", base + 42, 4, 1, v["local"])
        m.bits(p + "local_ack_timeout", base + 43, 0, 5, v["ackto"])
    m.bits("sap_supported", 139, 5, 1, sap)
    m.pd(pd)


def no_path():
    return dict(llid=0, rlid=0, lgid=bytes(16), rgid=bytes(16), flow=0, rate=0, tc=0, hop=0,
                sl=0, local=0, ackto=0)


def mra(m, tid, local, remote, mraed, st, pd):
    m.header("MRA", tid)
    m.be("local_comm_id", 0, 4, local)
    m.be("remote_comm_id", 4, 4, remote)
    m.bits("message_mraed", 8, 0, 2, mraed)
    m.bits("service_timeout", 9, 0, 5, st)
    m.pd(pd)


def rej(m, tid, local, remote, msg, reason, ari, pd, ari_len=None):
    m.header("REJ", tid)
    m.be("local_comm_id", 0, 4, local)
    m.be("remote_comm_id", 4, 4, remote)
    m.bits("message_rejected", 8, 0, 2, msg)
    m.bits("rejected_info_length", 9, 0, 7, len(ari) if ari_len is None else ari_len)
    m.be("reason", 10, 2, reason)
    m.raw("ari", 12, ari.ljust(72, b"\0"), listed=False)
    m.f("ari", ari.hex())
    m.pd(pd)


def rep(m, tid, local, remote, qkey, qpn, psn, rr, idepth, tad, fo, e2e, rnr, srq, guid, pd):
    m.header("REP", tid)
    m.be("local_comm_id", 0, 4, local)
    m.be("remote_comm_id", 4, 4, remote)
    m.be("local_qkey", 8, 4, qkey)
    m.be("local_qpn", 12, 3, qpn)
    m.be("local_eecn", 16, 3, 0)
    m.be("starting_psn", 20, 3, psn)
    m.bits("responder_resources", 24, 0, 8, rr)
    m.bits("initiator_depth", 25, 0, 8, idepth)
    m.bits("target_ack_delay", 26, 0, 5, tad)
    m.bits("failover_accepted", 26, 5, 2, fo)
    m.bits("end_to_end_flow_control", 26, 7, 1, e2e)
    m.bits("rnr_retry_count", 27, 0, 3, rnr)
    m.bits("srq", 27, 3, 1, srq)
    m.be("local_ca_guid", 28, 8, guid)
    m.pd(pd)


def short(m, attr, tid, local, remote, pd, qpn=None):
    m.header(attr, tid)
    m.be("local_comm_id", 0, 4, local)
    m.be("remote_comm_id", 4, 4, remote)
    if qpn is not None:
        m.be("remote_qpn_eecn", 8, 3, qpn)
    m.pd(pd)


def sidr_req(m, tid, rid, pkey, sid, pd):
    # Table 119: request ID, P_Key, reserved 2 bytes, service ID, private data.
    m.header("SIDR_REQ", tid)
    m.be("request_id", 0, 4, rid)
    m.be("pkey", 4, 2, pkey)
    m.be("service_id", 8, 8, sid)
    m.pd(pd)


def sidr_rep(m, tid, rid, status, qpn, sid, qkey, info, pd, info_len=None):
    # Table 120: request ID, status, additional-information length, reserved, QPN (24 bits)
    # and a reserved byte, service ID, Q_Key, additional information (72), private data.
    m.header("SIDR_REP", tid)
    m.be("request_id", 0, 4, rid)
    m.bits("sidr_status", 4, 0, 8, status)
    m.bits("info_length", 5, 0, 8, len(info) if info_len is None else info_len)
    m.be("qpn", 8, 3, qpn)
    m.be("service_id", 12, 8, sid)
    m.be("qkey", 20, 4, qkey)
    m.raw("info", 24, info.ljust(72, b"\0"), listed=False)
    m.f("info", info.hex())
    m.pd(pd)


A = [198, 18, 0, 11]
B = [198, 18, 0, 12]
OUT = []


def new(name, comment, attr=None, error=None):
    m = Mad(name, comment, attr, error)
    OUT.append(m)
    return m


def roce_path(src, dst):
    # What Linux rdma_cm puts in a RoCEv2 REQ: permissive LIDs (not subnet-local), the
    # IPv4-mapped GIDs, the IPv4 TTL as hop limit.
    return dict(llid=0xffff, rlid=0xffff, lgid=gid4(src), rgid=gid4(dst), flow=0, rate=3,
                tc=0, hop=64, sl=0, local=0, ackto=18)


m = new("req", "REQ of rdma_connect to 198.18.0.12 port 7174 (RDMA_PS_TCP) over RoCEv2, as "
        "Linux rdma_cm sends it: the cma_hdr then 5 bytes of user private data.", "REQ")
m.f("cma_version", 0)
m.f("cma_ip_version", 4)
m.f("cma_src_port", 40001)
m.f("cma_src_ip", "198.18.0.11")
m.f("cma_dst_ip", "198.18.0.12")
req(m, tid=0x0000_1234_5678_9abc, comm=0x1a2b3c4d, sid=0x0000_0000_0106_1c06,
    guid=0x0211_22ff_fe33_4455, qkey=0, qpn=0x000011, rr=1, idepth=1, rcrt=20, tst=0, e2e=1,
    psn=0x00abcd, lcrt=20, retry=7, pkey=0xffff, mtu=3, rdc=0, rnr=7, maxr=15, srq=0, ext=0,
    pri=roce_path(A, B), alt=no_path(), sap=0, pd=cma_hdr(40001, A, B) + b"hello")

m = new("req_fields_max", "REQ with every sub-byte field at its largest value (bit positions "
        "do not overlap), a full private data area.", "REQ")
req(m, tid=0xffff_ffff_ffff_ffff, comm=0xffffffff, sid=0xffff_ffff_ffff_ffff,
    guid=0xffff_ffff_ffff_ffff, qkey=0xffffffff, qpn=0xffffff, rr=255, idepth=255, rcrt=31,
    tst=3, e2e=1, psn=0xffffff, lcrt=31, retry=7, pkey=0xffff, mtu=15, rdc=1, rnr=7, maxr=15,
    srq=1, ext=7,
    pri=dict(llid=0xffff, rlid=0xffff, lgid=bytes([0xff] * 16), rgid=bytes([0xfe] * 16),
             flow=0xfffff, rate=63, tc=255, hop=255, sl=15, local=1, ackto=31),
    alt=dict(llid=0x1234, rlid=0x5678, lgid=bytes(range(16)), rgid=bytes(range(16, 32)),
             flow=0x54321, rate=42, tc=0xb8, hop=1, sl=9, local=1, ackto=17),
    sap=1, pd=bytes(range(1, 93)))

m = new("mra", "MRA of a REQ (message MRAed 0), service timeout 23.", "MRA")
mra(m, 0x0000_1234_5678_9abc, 0x55667788, 0x1a2b3c4d, 0, 23, b"")

m = new("rej_no_listener", "REJ of a REQ nobody listens for: reason 8 (invalid service ID), "
        "no comm ID of its own.", "REJ")
rej(m, 0x0000_1234_5678_9abc, 0, 0x1a2b3c4d, 0, 8, b"", b"")

m = new("rej_consumer", "REJ by the application (rdma_reject, reason 28) with private data; "
        "message rejected 1 (a REP), 4 bytes of ARI.", "REJ")
rej(m, 0x0000_0000_0000_0042, 0x55667788, 0x1a2b3c4d, 1, 28, b"\x01\x02\x03\x04", b"busy")

m = new("rep", "REP answering req, 5 bytes of private data.", "REP")
rep(m, 0x0000_1234_5678_9abc, 0x55667788, 0x1a2b3c4d, 0, 0x000012, 0x00dcba, 1, 1, 15, 0, 1,
    7, 0, 0x0233_44ff_fe55_6677, b"world")

m = new("rep_fields_max", "REP with every sub-byte field at its largest value.", "REP")
rep(m, 0xffff_ffff_ffff_ffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffff, 0xffffff, 255, 255,
    31, 3, 1, 7, 1, 0xffff_ffff_ffff_ffff, bytes([0xff] * 196))

m = new("rtu", "RTU, no private data.", "RTU")
short(m, "RTU", 0x0000_1234_5678_9abc, 0x1a2b3c4d, 0x55667788, b"")

m = new("dreq", "DREQ naming the receiver's QPN, 3 bytes of private data.", "DREQ")
short(m, "DREQ", 0x0000_0000_0000_0777, 0x1a2b3c4d, 0x55667788, b"bye", qpn=0x000012)

m = new("drep", "DREP answering dreq.", "DREP")
short(m, "DREP", 0x0000_0000_0000_0777, 0x55667788, 0x1a2b3c4d, b"")

m = new("sidr_req", "SIDR_REQ of rdma_connect on an RDMA_PS_UDP id to 198.18.0.12 port 7174, "
        "as Linux rdma_cm sends it: the cma_hdr then 5 bytes of user private data.", "SIDR_REQ")
m.f("cma_version", 0)
m.f("cma_ip_version", 4)
m.f("cma_src_port", 40001)
m.f("cma_src_ip", "198.18.0.11")
m.f("cma_dst_ip", "198.18.0.12")
sidr_req(m, 0x0000_1234_5678_9abd, 0x1a2b3c4e, 0xffff, 0x0000_0000_0111_1c06,
         cma_hdr(40001, A, B) + b"hello")

m = new("sidr_rep", "SIDR_REP answering sidr_req: QP valid, QPN 0x000012, rdma_cm's UDP "
        "Q_Key 0x01234567, 5 bytes of private data.", "SIDR_REP")
sidr_rep(m, 0x0000_1234_5678_9abd, 0x1a2b3c4e, 0, 0x000012, 0x0000_0000_0111_1c06,
         0x01234567, b"", b"world")

m = new("sidr_rep_fields_max", "SIDR_REP with every field at its largest value, 72 bytes of "
        "additional information and a full private data area.", "SIDR_REP")
sidr_rep(m, 0xffff_ffff_ffff_ffff, 0xffffffff, 255, 0xffffff, 0xffff_ffff_ffff_ffff,
         0xffffffff, bytes(range(1, 73)), bytes([0xff] * 136))

# Invalid MADs: what a receiver must report.
m = new("bad_base_version", "Base version 2 (OPA).", error="BAD_BASE_VERSION")
m.header("RTU", 1, base=2)
m = new("not_cm", "Management class 0x04 (performance management): not for the CM.",
        error="NOT_CM")
m.header("RTU", 1, mgmt=0x04)
m = new("bad_class_version", "CM class version 1.", error="BAD_CLASS_VERSION")
m.header("RTU", 1, cv=1)
m = new("bad_method", "Method 0x01 (Get): the CM sends with method Send only.",
        error="BAD_METHOD")
m.header("RTU", 1, method=0x01)
m = new("lap", "LAP (0x0019): alternate paths are not supported.",
        error="UNSUPPORTED_ATTRIBUTE")
m.header(0x0019, 1)
m = new("apr", "APR (0x001A): alternate paths are not supported.",
        error="UNSUPPORTED_ATTRIBUTE")
m.header(0x001A, 1)
m = new("sidr_rep_info_too_long", "SIDR_REP with an additional-information length of 73 "
        "(the field holds 72).", error="MALFORMED")
sidr_rep(m, 1, 2, 0, 1, 0x0000_0000_0111_1c06, 1, b"", b"", info_len=73)
m = new("rej_ari_too_long", "REJ with a rejected-info length of 73 (the ARI field holds 72).",
        error="MALFORMED")
rej(m, 1, 2, 3, 0, 1, b"", b"", ari_len=73)
m = new("truncated", "255 bytes: a MAD is 256.", error="TRUNCATED")
short(m, "RTU", 1, 2, 3, b"")
m.b = m.b[:255]


def pcap(path, mads):
    """Ethernet/IPv4/UDP 4791/BTH (UD SEND_ONLY to QP1)/DETH (GSI Q_Key, source QP 1)/MAD/ICRC."""
    recs = []
    for i, m in enumerate(mads):
        src, dst = (A, B) if i % 2 == 0 else (B, A)
        bth = struct.pack(">BBHII", 0x64, 0x00, 0xffff, 1, i)  # opcode, SE/M/pad/tver, P_Key, QP, PSN
        deth = struct.pack(">II", 0x80010000, 1)
        ib = bth + deth + bytes(m.b)
        udp_len = 8 + len(ib) + 4
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0, bytes(src),
                         bytes(dst))
        s = sum(struct.unpack(">10H", ip))
        s = (s & 0xffff) + (s >> 16)
        s = (s & 0xffff) + (s >> 16)
        ip = ip[:10] + struct.pack(">H", (~s) & 0xffff) + ip[12:]
        udp = struct.pack(">HHHH", 0xc000 + i, 4791, udp_len, 0)
        # ICRC (IBTA Annex A17): CRC-32 over 8 bytes of ones, the IPv4 header with TOS, TTL
        # and checksum as ones, the UDP header with its checksum as ones, the BTH with its
        # reserved byte as ones, the rest.
        mip = bytearray(ip)
        mip[1] = 0xff
        mip[8] = 0xff
        mip[10:12] = b"\xff\xff"
        mudp = bytearray(udp)
        mudp[6:8] = b"\xff\xff"
        mib = bytearray(ib)
        mib[4] = 0xff
        crc = zlib.crc32(b"\xff" * 8 + bytes(mip) + bytes(mudp) + bytes(mib))
        frame = (bytes([2, 0, 0, 0, 0, dst[3]]) + bytes([2, 0, 0, 0, 0, src[3]]) + b"\x08\x00"
                 + ip + udp + ib + struct.pack("<I", crc))
        recs.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1) + b"".join(recs))


here = os.path.dirname(os.path.abspath(__file__))
for m in OUT:
    m.write(here)
pcap(os.path.join(here, "roce-cm-sample.pcap"), [m for m in OUT if not m.error])
