//! The RoCEv2 baseline of `bench loss`: IBTA RC (go-back-N) from `ferroce_transport::roce`.
//!
//! Everything engine-specific lives in [`engine`], compiled with the `roce` feature (on by
//! default); a build without it reports the RoCEv2 rows as not run and the rest of the suite
//! runs unchanged.

use ferroce_transport::Transport;

/// Which local ACK timeout the RoCEv2 requester uses. IBTA: the timeout is
/// 4.096 µs × 2^exponent; the retry count is 7 ("retry forever", as rxe treats it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckTimeout {
    /// What perftest (`ib_write_bw`) asks for by default and rxe honours: exponent 14,
    /// 67.1 ms.
    RxeDefault,
    /// Its best case on this fabric: exponent 4, 65.5 µs (≈ 4.7 base RTTs of the reference
    /// fabric, below the native transport's 100 µs minimum RTO), short enough to recover tail
    /// losses fast, long enough not to fire spuriously behind a full 1-BDP queue.
    Aggressive,
}

impl AckTimeout {
    pub const ALL: [AckTimeout; 2] = [AckTimeout::RxeDefault, AckTimeout::Aggressive];

    /// The IBTA exponent.
    pub fn exponent(self) -> u8 {
        match self {
            AckTimeout::RxeDefault => 14,
            AckTimeout::Aggressive => 4,
        }
    }

    /// The timeout in ns: 4096 ns × 2^exponent.
    pub fn ns(self) -> u64 {
        4096u64 << self.exponent()
    }

    /// Mode name in tables and CSV.
    pub fn mode(self) -> &'static str {
        match self {
            AckTimeout::RxeDefault => "rocev2-rxe-timeout",
            AckTimeout::Aggressive => "rocev2-aggressive-timeout",
        }
    }
}

/// Whether this build has the RoCEv2 engine.
pub const AVAILABLE: bool = cfg!(feature = "roce");

/// A RoCEv2 engine for the host at `ip`, or `None` when this build has none.
#[cfg(not(feature = "roce"))]
pub fn engine(_timeout: AckTimeout, _mtu: u16, _ip: [u8; 4]) -> Option<Box<dyn Transport>> {
    None
}

/// A RoCEv2 engine for the host at `ip`: RC, path MTU `mtu`, local ACK timeout `timeout`,
/// retry count 7 (forever); everything else at the engine's rxe-like defaults (128 unacked
/// PSNs per QP, AckReq on the last packet of a message and every 64 packets).
#[cfg(feature = "roce")]
pub fn engine(timeout: AckTimeout, mtu: u16, ip: [u8; 4]) -> Option<Box<dyn Transport>> {
    use ferroce_transport::roce::{RoceConfig, RoceEndpoint};
    let mut cfg = RoceConfig::new(std::net::Ipv4Addr::from(ip));
    cfg.mtu = mtu as u32;
    cfg.timeout = timeout.exponent();
    cfg.retry_cnt = 7;
    Some(Box::new(RoceEndpoint::new(cfg)))
}
