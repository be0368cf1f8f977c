//! Sign-in throttling (approval-page.md): a token bucket per client address, so nobody
//! guesses tokens at speed. Each sign-in attempt takes a token; a bucket holds [`BURST`]
//! and gets one back every [`REFILL`]. An empty bucket refuses the attempt (429) with the
//! wait. IPv6 addresses are grouped by their /64 (one host usually has a whole /64).
//!
//! The clock is passed in ([`Throttle::take`]), so the tests drive it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Attempts one address may make at once.
pub(crate) const BURST: u32 = 5;
/// How often an address gets one attempt back.
pub(crate) const REFILL: Duration = Duration::from_secs(10);
/// The most addresses tracked at once; past it (after forgetting the full buckets) a new
/// address is refused rather than let through untracked.
pub(crate) const MAX_ADDRESSES: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: u32,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

/// The buckets, by client address.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    buckets: HashMap<IpAddr, Bucket>,
}

/// The key of an address: itself, or for IPv6 its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                for seg in s.iter_mut().skip(4) {
                    *seg = 0;
                }
                IpAddr::V6(s.into())
            }
        },
    }
}

impl Bucket {
    /// Brings the bucket up to `now`.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        let earned = elapsed.as_nanos() / REFILL.as_nanos().max(1);
        if earned == 0 {
            return;
        }
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(earned).min(BURST);
        self.at = if self.tokens == BURST {
            now
        } else {
            self.at + REFILL * earned
        };
    }
}

impl Throttle {
    /// Takes one attempt for `ip` at `now`; `Err(wait)` when its bucket is empty (try again
    /// after `wait`).
    pub(crate) fn take(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let k = key(ip);
        if !self.buckets.contains_key(&k) && self.buckets.len() >= MAX_ADDRESSES {
            // Forget the buckets that are full again: they hold nothing.
            self.buckets.retain(|_, b| {
                b.refill(now);
                b.tokens < BURST
            });
            if self.buckets.len() >= MAX_ADDRESSES {
                return Err(REFILL);
            }
        }
        let b = self.buckets.entry(k).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        b.refill(now);
        if b.tokens == 0 {
            let next = (b.at + REFILL).saturating_duration_since(now);
            return Err(next.max(Duration::from_secs(1)));
        }
        b.tokens -= 1;
        if b.tokens + 1 == BURST {
            // The refill clock starts at the first token taken from a full bucket.
            b.at = now;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn issue20_an_address_gets_a_burst_then_one_attempt_per_refill() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for i in 0..BURST {
            assert!(t.take(a, t0).is_ok(), "attempt {i}");
        }
        let wait = t.take(a, t0).unwrap_err();
        assert_eq!(wait, REFILL);
        // Another address is not slowed down.
        assert!(t.take(ip("192.0.2.2"), t0).is_ok());
        // Just before the refill: still refused; at it: one attempt, then refused again.
        assert!(t.take(a, t0 + REFILL - Duration::from_millis(1)).is_err());
        assert!(t.take(a, t0 + REFILL).is_ok());
        let wait = t.take(a, t0 + REFILL).unwrap_err();
        assert_eq!(wait, REFILL);
        // After a long pause the bucket is full again, never fuller.
        let later = t0 + REFILL * 100;
        for _ in 0..BURST {
            assert!(t.take(a, later).is_ok());
        }
        assert!(t.take(a, later).is_err());
    }

    #[test]
    fn issue20_ipv6_addresses_are_throttled_by_their_64() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        for i in 0..BURST {
            assert!(t.take(ip(&format!("2001:db8:1:2::{i:x}")), t0).is_ok());
        }
        assert!(t.take(ip("2001:db8:1:2:ffff::1"), t0).is_err());
        assert!(t.take(ip("2001:db8:1:3::1"), t0).is_ok());
        // An IPv4-mapped address is its IPv4 address.
        for _ in 0..BURST {
            assert!(t.take(ip("::ffff:192.0.2.9"), t0).is_ok());
        }
        assert!(t.take(ip("192.0.2.9"), t0).is_err());
    }

    #[test]
    fn issue20_the_table_is_bounded_and_fails_closed() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        for i in 0..MAX_ADDRESSES {
            let n = u32::try_from(i).unwrap();
            assert!(t.take(IpAddr::V4(n.into()), t0).is_ok());
        }
        // Full, and nobody's bucket is full again yet: a new address is refused.
        assert!(t.take(ip("203.0.113.1"), t0).is_err());
        assert_eq!(t.buckets.len(), MAX_ADDRESSES);
        // Once their buckets refill, they are forgotten and the new address gets in.
        assert!(t.take(ip("203.0.113.1"), t0 + REFILL).is_ok());
        assert_eq!(t.buckets.len(), 1);
    }
}
