//! The compliance target profile (spec/compliance.md): what an endpoint under
//! `ferroce compliance` sets up on every connection a peer opens to it, so the suite knows the
//! stream, the receives and the regions it may name. Only the keys differ between targets (they
//! are drawn, SEC-4); the target prints them and the suite takes them as `--rkeys`.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::{RecvWr, Sge};

/// The one reliable stream of every accepted connection: id 1 at both ends.
pub const STREAM: u32 = 1;
/// Protection domain of the stream and of every region below.
pub const PD: u32 = 1;
/// Receives kept posted on the stream (reposted as each completes).
pub const RECVS: u32 = 8;
/// Length of each receive buffer.
pub const RECV_LEN: u32 = 1024;

/// One region of the profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSpec {
    pub name: &'static str,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// REMOTE_WRITE and REMOTE_READ: writes land here and are read back.
pub const WRITE: RegionSpec = RegionSpec {
    name: "write",
    addr: 0x1000_0000,
    len: 4096,
    access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
};
/// REMOTE_READ only; byte `i` holds [`read_byte`]`(i)`.
pub const READ: RegionSpec = RegionSpec {
    name: "read",
    addr: 0x2000_0000,
    len: 4096,
    access: access::REMOTE_READ,
};
/// REMOTE_ATOMIC only: eight 8-byte targets.
pub const ATOMIC: RegionSpec = RegionSpec {
    name: "atomic",
    addr: 0x3000_0000,
    len: 64,
    access: access::LOCAL_WRITE | access::REMOTE_ATOMIC,
};
/// The receive buffers (LOCAL_WRITE only: no remote access at all).
pub const RECV: RegionSpec = RegionSpec {
    name: "recv",
    addr: 0x5000_0000,
    len: (RECVS * RECV_LEN) as u64,
    access: access::LOCAL_WRITE,
};

pub const REGIONS: [RegionSpec; 4] = [WRITE, READ, ATOMIC, RECV];

/// Content of the READ region.
pub fn read_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// The keys a target's registration got, in [`REGIONS`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProfileKeys {
    pub write: u32,
    pub read: u32,
    pub atomic: u32,
    pub recv: u32,
}

impl ProfileKeys {
    /// The `--rkeys` argument of `ferroce compliance`: `write=0x…,read=0x…,atomic=0x…,recv=0x…`.
    pub fn to_arg(&self) -> String {
        format!(
            "write={:#x},read={:#x},atomic={:#x},recv={:#x}",
            self.write, self.read, self.atomic, self.recv
        )
    }

    pub fn parse(s: &str) -> Result<ProfileKeys, String> {
        let mut k = ProfileKeys::default();
        let mut seen = [false; 4];
        for kv in s.split(',').filter(|x| !x.is_empty()) {
            let (name, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("{kv:?}: want NAME=KEY"))?;
            let v = v.trim();
            let key = match v.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|_| format!("{name}: {v:?} is not a 32-bit key"))?;
            let i = REGIONS
                .iter()
                .position(|r| r.name == name)
                .ok_or_else(|| format!("unknown region {name:?} (write, read, atomic, recv)"))?;
            seen[i] = true;
            *[&mut k.write, &mut k.read, &mut k.atomic, &mut k.recv][i] = key;
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!("no key for region {}", REGIONS[i].name));
        }
        Ok(k)
    }
}

/// Register the profile's regions into `mem` (READ filled with its pattern).
pub fn register(mem: &mut Regions) -> ProfileKeys {
    let mut keys = [0u32; 4];
    for (k, r) in keys.iter_mut().zip(REGIONS) {
        *k = mem.register(PD, r.addr, r.len as usize, r.access);
    }
    if let Some(r) = mem.region_mut(keys[1]) {
        for (i, b) in r.data.iter_mut().enumerate() {
            *b = read_byte(i as u64);
        }
    }
    ProfileKeys {
        write: keys[0],
        read: keys[1],
        atomic: keys[2],
        recv: keys[3],
    }
}

/// Receive `slot` (0..RECVS) of the profile; its `wr_id` is the slot, so a completion says
/// which buffer to post again.
pub fn recv_wr(keys: &ProfileKeys, slot: u32) -> RecvWr {
    let addr = RECV.addr + (slot % RECVS) as u64 * RECV_LEN as u64;
    RecvWr {
        wr_id: slot as u64,
        sgl: [Sge {
            lkey: keys.recv,
            addr,
            len: RECV_LEN,
        }]
        .into_iter()
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_argument_round_trips_and_names_what_is_missing() {
        let k = ProfileKeys {
            write: 1,
            read: 0xdead_beef,
            atomic: 3,
            recv: 4,
        };
        assert_eq!(ProfileKeys::parse(&k.to_arg()), Ok(k));
        assert!(ProfileKeys::parse("write=1,read=2,atomic=3")
            .unwrap_err()
            .contains("recv"));
        assert!(ProfileKeys::parse("write=1,bogus=2").is_err());
        assert!(ProfileKeys::parse("write=0x1_0000_0000").is_err());
    }
}
