//! [`ShareConsumerConfig`]: the cluster layer's [`ClientConfig`] plus the share consumer's
//! settings, under Kafka's property names and with the Java client's defaults.
//!
//! `group.id` is required. `max.partition.fetch.bytes` is accepted for compatibility with
//! Java's property files, but ShareFetch v1+ has no per-partition limit on the wire; it only
//! bounds what this client decodes of one partition's answer.

use std::time::Duration;

use crate::config::{ClientConfig, ClientConfigBuilder};
use crate::error::Error;
use crate::share_consumer::acknowledgements::AcknowledgementMode;

/// `share.acquire.mode` (KIP-1206, ShareFetch v2): how the broker bounds what one fetch
/// acquires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcquireMode {
    /// Whole batches, `max.poll.records` a soft limit (the only mode of ShareFetch v1).
    #[default]
    BatchOptimized,
    /// At most `max.poll.records` records, splitting batches; needs ShareFetch v2.
    RecordLimit,
}

impl AcquireMode {
    /// ShareFetch's `ShareAcquireMode` field.
    pub fn wire(self) -> i8 {
        match self {
            AcquireMode::BatchOptimized => 0,
            AcquireMode::RecordLimit => 1,
        }
    }
}

/// Largest `fetch.max.bytes` and `max.partition.fetch.bytes` accepted.
pub const FETCH_BYTES_MAX: usize = 1 << 30;
/// Largest `max.poll.records` accepted.
pub const POLL_RECORDS_MAX: usize = 1 << 20;

/// The share consumer's settings. Build with [`ShareConsumerConfig::from_properties`] or
/// [`ShareConsumerConfig::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShareConsumerConfig {
    client: ClientConfig,
    group_id: String,
    acknowledgement_mode: AcknowledgementMode,
    acquire_mode: AcquireMode,
    max_poll_records: usize,
    fetch_max_wait: Duration,
    fetch_min_bytes: usize,
    fetch_max_bytes: usize,
    max_partition_fetch_bytes: usize,
}

fn bad(key: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        key: key.into(),
        reason: reason.into(),
    }
}

fn int(key: &str, value: &str, min: usize, max: usize) -> Result<usize, Error> {
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| bad(key, format!("cannot parse {value:?}")))?;
    usize::try_from(n)
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| bad(key, format!("{n} is outside {min}-{max}")))
}

impl ShareConsumerConfig {
    /// The defaults over `client` for `group_id`.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty group id.
    pub fn new(client: ClientConfig, group_id: impl Into<String>) -> Result<Self, Error> {
        let group_id = group_id.into();
        if group_id.is_empty() {
            return Err(bad("group.id", "is required"));
        }
        Ok(ShareConsumerConfig {
            client,
            group_id,
            acknowledgement_mode: AcknowledgementMode::Implicit,
            acquire_mode: AcquireMode::BatchOptimized,
            max_poll_records: 500,
            fetch_max_wait: Duration::from_millis(500),
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
        })
    }

    /// A config from Kafka property names: the cluster layer's keys ([`ClientConfig`]) and
    /// `group.id`, `share.acknowledgement.mode` (implicit, explicit), `share.acquire.mode`
    /// (batch_optimized, record_limit), `max.poll.records`, `fetch.max.wait.ms`,
    /// `fetch.min.bytes`, `fetch.max.bytes`, `max.partition.fetch.bytes`.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown key, a value that does not parse or is out of range,
    /// or no `group.id`.
    pub fn from_properties<I, K, V>(properties: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut client = ClientConfig::builder(Vec::<String>::new());
        let mut c = ShareConsumerConfig::new(ClientConfig::default(), "-")?;
        c.group_id.clear();
        for (key, value) in properties {
            c.set(&mut client, key.as_ref(), value.as_ref())?;
        }
        if c.group_id.is_empty() {
            return Err(bad("group.id", "is required"));
        }
        c.client = client.build()?;
        Ok(c)
    }

    fn set(
        &mut self,
        client: &mut ClientConfigBuilder,
        key: &str,
        value: &str,
    ) -> Result<(), Error> {
        match key {
            "group.id" => self.group_id = value.trim().to_owned(),
            "share.acknowledgement.mode" => {
                self.acknowledgement_mode = match value.trim() {
                    "implicit" => AcknowledgementMode::Implicit,
                    "explicit" => AcknowledgementMode::Explicit,
                    other => {
                        return Err(bad(key, format!("{other:?} is not implicit or explicit")))
                    }
                }
            }
            "share.acquire.mode" => {
                self.acquire_mode = match value.trim() {
                    "batch_optimized" => AcquireMode::BatchOptimized,
                    "record_limit" => AcquireMode::RecordLimit,
                    other => {
                        return Err(bad(
                            key,
                            format!("{other:?} is not batch_optimized or record_limit"),
                        ))
                    }
                }
            }
            "max.poll.records" => self.max_poll_records = int(key, value, 1, POLL_RECORDS_MAX)?,
            "fetch.max.wait.ms" => {
                let ms = int(key, value, 0, i32::MAX as usize)?;
                self.fetch_max_wait = Duration::from_millis(ms as u64);
            }
            "fetch.min.bytes" => self.fetch_min_bytes = int(key, value, 0, FETCH_BYTES_MAX)?,
            "fetch.max.bytes" => self.fetch_max_bytes = int(key, value, 1, FETCH_BYTES_MAX)?,
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = int(key, value, 1, FETCH_BYTES_MAX)?
            }
            _ => {
                client.set(key, value)?;
            }
        }
        Ok(())
    }

    pub fn client(&self) -> &ClientConfig {
        &self.client
    }
    pub fn group_id(&self) -> &str {
        &self.group_id
    }
    pub fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.acknowledgement_mode
    }
    pub fn acquire_mode(&self) -> AcquireMode {
        self.acquire_mode
    }
    pub fn max_poll_records(&self) -> usize {
        self.max_poll_records
    }
    pub fn fetch_max_wait(&self) -> Duration {
        self.fetch_max_wait
    }
    pub fn fetch_min_bytes(&self) -> usize {
        self.fetch_min_bytes
    }
    pub fn fetch_max_bytes(&self) -> usize {
        self.fetch_max_bytes
    }
    pub fn max_partition_fetch_bytes(&self) -> usize {
        self.max_partition_fetch_bytes
    }

    /// `share.acknowledgement.mode`.
    pub fn with_acknowledgement_mode(mut self, mode: AcknowledgementMode) -> Self {
        self.acknowledgement_mode = mode;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_use_kafka_names_and_defaults() {
        let c = ShareConsumerConfig::from_properties([
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("group.id", "g"),
            ("share.acknowledgement.mode", "explicit"),
            ("share.acquire.mode", "record_limit"),
            ("max.poll.records", "10"),
            ("fetch.max.wait.ms", "100"),
        ])
        .unwrap();
        assert_eq!(c.group_id(), "g");
        assert_eq!(c.acknowledgement_mode(), AcknowledgementMode::Explicit);
        assert_eq!(c.acquire_mode(), AcquireMode::RecordLimit);
        assert_eq!(c.max_poll_records(), 10);
        assert_eq!(c.fetch_max_wait(), Duration::from_millis(100));
        assert_eq!(c.fetch_max_bytes(), 52_428_800);
        assert_eq!(c.client().bootstrap_servers(), ["127.0.0.1:9092"]);
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        let key = |props: &[(&str, &str)]| match ShareConsumerConfig::from_properties(
            props.iter().copied(),
        ) {
            Err(Error::Config { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        let b = ("bootstrap.servers", "h:1");
        assert_eq!(key(&[b]), "group.id");
        assert_eq!(key(&[b, ("group.id", "")]), "group.id");
        let g = ("group.id", "g");
        assert_eq!(
            key(&[b, g, ("share.acknowledgement.mode", "auto")]),
            "share.acknowledgement.mode"
        );
        assert_eq!(
            key(&[b, g, ("share.acquire.mode", "x")]),
            "share.acquire.mode"
        );
        assert_eq!(key(&[b, g, ("max.poll.records", "0")]), "max.poll.records");
        assert_eq!(key(&[b, g, ("fetch.max.bytes", "-1")]), "fetch.max.bytes");
        assert_eq!(key(&[b, g, ("no.such.key", "1")]), "no.such.key");
    }
}
