//! Connection limits, enforced the way Kafka enforces them:
//!
//! - `max.connections`: when the broker holds that many client connections, the listener
//!   stops taking new ones; a connection it accepted meanwhile waits (unanswered, like the
//!   ones in the kernel's backlog) until another closes. Nothing is refused.
//! - `max.connections.per.ip`, with `max.connections.per.ip.overrides` (`host:count,...`):
//!   a connection from an address that already has its maximum is closed at once.
//!
//! All three keys are dynamic (cluster-wide, IncrementalAlterConfigs); the listener reads the
//! configuration in force at every accept. [`ConnectionCounts`] is the shared tally; a
//! [`Slot`] is one admitted connection and gives its place back when dropped.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::config::{parse_overrides, BrokerConfig};

/// The limits in force, parsed from the broker configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// `max.connections`.
    pub total: usize,
    /// `max.connections.per.ip`.
    pub per_ip: usize,
    /// `max.connections.per.ip.overrides`, host names resolved when parsed.
    pub overrides: HashMap<IpAddr, usize>,
}

impl Limits {
    /// The limits of `config`. Override hosts that do not resolve are left out (logged).
    pub fn from_config(config: &BrokerConfig) -> Limits {
        let total = usize::try_from(config.long("max.connections")).unwrap_or(0);
        let per_ip = usize::try_from(config.long("max.connections.per.ip")).unwrap_or(0);
        let mut overrides = HashMap::new();
        for (host, count) in
            parse_overrides(config.get("max.connections.per.ip.overrides")).unwrap_or_default()
        {
            match resolve(&host) {
                Some(ip) => {
                    overrides.insert(ip, count);
                }
                None => tracing::warn!(
                    host,
                    "max.connections.per.ip.overrides: host does not resolve; ignored"
                ),
            }
        }
        Limits {
            total,
            per_ip,
            overrides,
        }
    }

    /// The most connections `ip` may hold.
    pub fn for_ip(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }
}

/// [`Limits::from_config`] redone only when one of the three keys changed, so that host
/// names in the overrides are not resolved at every accept.
#[derive(Debug, Default)]
pub struct LimitsCache {
    /// The three keys' values `limits` was parsed from; `None` before the first call.
    source: Option<(i64, i64, String)>,
    limits: Limits,
}

impl LimitsCache {
    /// The limits of `config`.
    pub fn get(&mut self, config: &BrokerConfig) -> &Limits {
        let source = (
            config.long("max.connections"),
            config.long("max.connections.per.ip"),
            config.get("max.connections.per.ip.overrides").to_string(),
        );
        if self.source.as_ref() != Some(&source) {
            self.limits = Limits::from_config(config);
            self.source = Some(source);
        }
        &self.limits
    }
}

fn resolve(host: &str) -> Option<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip);
    }
    (host, 0u16)
        .to_socket_addrs()
        .ok()?
        .next()
        .map(|addr| addr.ip())
}

/// Kafka's rule across the two per-address keys: a default of 0 (refuse every address) is
/// allowed only beside overrides that let some in.
///
/// # Errors
/// The message Kafka's refusal carries.
pub fn check_together(per_ip: &str, overrides: &str) -> Result<(), String> {
    if per_ip.trim() == "0" && parse_overrides(overrides).map_or(true, |o| o.is_empty()) {
        return Err(
            "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides is set"
                .to_string(),
        );
    }
    Ok(())
}

/// Why a connection was closed on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The address already holds `limit` connections.
    PerIp { limit: usize },
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open client connections, in all and per address.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    counts: Mutex<Counts>,
    freed: Notify,
}

impl ConnectionCounts {
    pub fn new() -> Arc<ConnectionCounts> {
        Arc::new(ConnectionCounts::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().expect("connection counts lock poisoned")
    }

    /// Connections open now.
    pub fn total(&self) -> usize {
        self.lock().total
    }

    /// Connections open now from `ip`.
    pub fn from_ip(&self, ip: IpAddr) -> usize {
        self.lock().per_ip.get(&ip).copied().unwrap_or(0)
    }

    /// Waits until fewer than `max_total()` connections are open. `max_total` is asked
    /// again after every close and at least every second, so a raised limit takes effect.
    pub async fn wait_for_room(&self, max_total: impl Fn() -> usize) {
        loop {
            let notified = self.freed.notified();
            if self.total() < max_total() {
                return;
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), notified).await;
        }
    }

    /// Admits a connection from `ip` unless that address is at its limit.
    ///
    /// # Errors
    /// [`Refused::PerIp`].
    pub fn admit(self: &Arc<Self>, ip: IpAddr, limits: &Limits) -> Result<Slot, Refused> {
        let limit = limits.for_ip(ip);
        let mut counts = self.lock();
        let from_ip = counts.per_ip.entry(ip).or_insert(0);
        if *from_ip >= limit {
            if *from_ip == 0 {
                counts.per_ip.remove(&ip);
            }
            return Err(Refused::PerIp { limit });
        }
        *from_ip += 1;
        counts.total += 1;
        Ok(Slot {
            counts: Arc::clone(self),
            ip,
        })
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<ConnectionCounts>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
        drop(counts);
        self.counts.freed.notify_one();
    }
}
