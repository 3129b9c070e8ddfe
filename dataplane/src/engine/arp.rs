//! Neighbour resolution: answering ARP requests, learning replies, asking for unknown
//! next hops, and sending what waited for an address once it is known.

use super::*;

impl Engine {
    pub(super) fn handle_arp(&mut self, now: u64, a: &Arp) {
        if a.op == 2 {
            self.counters.rx_arp_replies += 1;
        } else {
            self.counters.rx_arp_requests += 1;
        }
        if a.target_ip != self.p.ip {
            self.counters.rx_arp_other += 1;
            return;
        }
        if a.sender_ip != Ipv4Addr::UNSPECIFIED {
            self.learn(now, a.sender_ip, a.sender_mac);
        }
        if a.op == 1 {
            let reply = Arp {
                op: 2,
                sender_mac: self.mac,
                sender_ip: self.p.ip,
                target_mac: a.sender_mac,
                target_ip: a.sender_ip,
            };
            if let Some(mut mb) = self.pool.alloc() {
                let n = net::write_arp(mb.room_mut(), a.sender_mac, self.mac, &reply);
                mb.set_len(n);
                self.counters.tx_arp_replies += 1;
                self.txq.push(mb);
            } else {
                self.counters.tx_no_mbuf += 1;
            }
        }
    }

    pub(super) fn learn(&mut self, _now: u64, ip: Ipv4Addr, mac: [u8; 6]) {
        let new = self.neighbors.insert(ip, mac) != Some(mac);
        if new {
            self.counters.arp_resolved += 1;
        }
        self.arp_last_req.remove(&ip);
        // Send what waited for this address, in order.
        let mut keep = VecDeque::with_capacity(self.arp_queue.len());
        for (dst, mut mb, t) in self.arp_queue.drain(..) {
            if dst == ip {
                mb.data_mut()[0..6].copy_from_slice(&mac);
                self.txq.push(mb);
            } else {
                keep.push_back((dst, mb, t));
            }
        }
        self.arp_queue = keep;
    }

    pub(super) fn arp_request(&mut self, now: u64, ip: Ipv4Addr) {
        if let Some(&t) = self.arp_last_req.get(&ip) {
            if now.saturating_sub(t) < ARP_RETRY_NS {
                return;
            }
        }
        self.arp_last_req.insert(ip, now);
        let req = Arp {
            op: 1,
            sender_mac: self.mac,
            sender_ip: self.p.ip,
            target_mac: [0; 6],
            target_ip: ip,
        };
        if let Some(mut mb) = self.pool.alloc() {
            let n = net::write_arp(mb.room_mut(), net::BROADCAST, self.mac, &req);
            mb.set_len(n);
            self.counters.tx_arp_requests += 1;
            self.txq.push(mb);
        } else {
            self.counters.tx_no_mbuf += 1;
        }
    }
}
