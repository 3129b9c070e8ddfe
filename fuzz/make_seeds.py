#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/seeds/<target>/ (committed; re-run after
the vectors change): the native packets and CM messages of spec/vectors/ for `native`; the
RoCEv2 UDP payloads of the rxe capture spec/vectors/rxe-sample.pcap for `roce`; that
capture's Ethernet frames plus the native vectors framed to the fuzzed engine's address, and an
ARP request for it, for `frame`; a few ibv_send_wr images (x86_64 layout) for `verbs_wr`; the
CM MADs of spec/vectors/roce_cm/ for `roce_cm`."""
import glob, os, struct, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")
# What fuzz_targets/frame.rs parses for.
MAC = bytes([0x02, 0, 0, 0, 0, 0x0B])
IP = bytes([198, 18, 1, 11])
PEER_MAC = bytes([0x02, 0, 0, 0, 0, 0x0C])
PEER_IP = bytes([198, 18, 1, 12])


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def vec_bytes(path):
    hexes = []
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line.startswith("hex:"):
            hexes.append(line[4:])
    return bytes.fromhex(" ".join(hexes))


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def udp_frame(payload, dport):
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + udp_len, 1, 0x4000, 64, 17, 0, PEER_IP, IP)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    pseudo = PEER_IP + IP + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", 49152, dport, udp_len, 0) + payload
    c = csum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    return MAC + PEER_MAC + b"\x08\x00" + ip + udp


def pcap_frames(path):
    d = open(path, "rb").read()
    magic = struct.unpack("<I", d[:4])[0]
    e = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(d):
        _, _, incl, _ = struct.unpack(e + "IIII", d[off:off + 16])
        yield d[off + 16:off + 16 + incl]
        off += 16 + incl


def main():
    vecs = sorted(glob.glob(os.path.join(ROOT, "spec", "vectors", "*.vec")))
    vecs += sorted(glob.glob(os.path.join(ROOT, "spec", "vectors", "cm", "*.vec")))
    for p in vecs:
        b = vec_bytes(p)
        name = os.path.basename(p)[:-4]
        put("native", name, b)
        put("frame", "native_" + name, udp_frame(b, 4792))
    n = 0
    for fr in pcap_frames(os.path.join(ROOT, "spec", "vectors", "rxe-sample.pcap")):
        if len(fr) < 42 or fr[12:14] != b"\x08\x00":
            continue
        ihl = (fr[14] & 0xF) * 4
        if fr[23] != 17:
            continue
        udp = fr[14 + ihl:]
        if struct.unpack("!H", udp[2:4])[0] != 4791:
            continue
        put("roce", "rxe_%03d" % n, udp[8:])
        if n < 16:
            put("frame", "rxe_%03d" % n, fr)
        n += 1
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, PEER_MAC, PEER_IP, b"\0" * 6, IP)
    put("frame", "arp_request", b"\xff" * 6 + PEER_MAC + b"\x08\x06" + arp)
    # ibv_send_wr on x86_64: wr_id@0 next@8 sg_list@16 num_sge@24 opcode@28 send_flags@32
    # imm_data@36 wr (rdma: remote_addr@40 rkey@48; atomic: remote_addr@40 compare_add@48
    # swap@56 rkey@64) qp_type@72 ...; 128 bytes; then ibv_sge {addr u64, length u32, lkey u32}.
    def wr(opcode, flags, nsge, words):
        b = bytearray(128)
        struct.pack_into("<QQQiII", b, 0, 7, 0, 0, nsge, opcode, flags)
        for at, fmt, v in words:
            struct.pack_into(fmt, b, at, v)
        sges = b"".join(struct.pack("<QII", 0x1000 * (i + 1), 64 << i, i + 1) for i in range(nsge))
        return bytes(b) + sges
    put("verbs_wr", "write", wr(0, 2, 1, [(40, "<Q", 0x2000_0000), (48, "<I", 5)]))
    put("verbs_wr", "write_imm_inline", wr(1, 2 | 8, 2, [(36, ">I", 0xABC), (40, "<Q", 1), (48, "<I", 5)]))
    put("verbs_wr", "send", wr(2, 0, 1, []))
    put("verbs_wr", "send_imm_solicited", wr(3, 4, 0, [(36, ">I", 7)]))
    put("verbs_wr", "read", wr(4, 2, 3, [(40, "<Q", 0x3000_0000), (48, "<I", 9)]))
    put("verbs_wr", "cmp_swap", wr(5, 2, 1, [(40, "<Q", 8), (48, "<Q", 1), (56, "<Q", 2), (64, "<I", 3)]))
    put("verbs_wr", "fetch_add", wr(6, 1, 1, [(40, "<Q", 8), (48, "<Q", 1), (64, "<I", 3)]))
    put("verbs_wr", "bad_opcode", wr(99, 0, 1, []))
    # The IBTA CM MAD vectors (spec/vectors/roce_cm/) for `roce_cm`.
    for v in sorted(glob.glob(os.path.join(ROOT, "spec", "vectors", "roce_cm", "*.vec"))):
        put("roce_cm", os.path.basename(v)[:-4], vec_bytes(v))
    print("seeds in %s: %s" % (OUT, ", ".join(
        "%s %d" % (t, len(os.listdir(os.path.join(OUT, t)))) for t in sorted(os.listdir(OUT)))))


if __name__ == "__main__":
    sys.exit(main())
