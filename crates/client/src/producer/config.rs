//! [`ProducerConfig`]: the cluster layer's [`ClientConfig`] plus the producer's settings, under
//! Kafka's property names and with the Java client's defaults and checks.
//!
//! Idempotence is on by default, as in Kafka 3.0+. As in the Java client, a setting that
//! contradicts idempotence (`acks` other than `all`, more than five requests in flight)
//! turns it off when idempotence was left at its default, and is a configuration error when
//! `enable.idempotence=true` was set explicitly or a `transactional.id` is given.

use std::time::Duration;

use kafka_protocol::records::Compression;

use crate::config::{ClientConfig, ClientConfigBuilder};
use crate::error::Error;
use crate::producer::accumulator::AccumulatorConfig;

/// `acks`: how many replicas must have a batch before the broker answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker does not answer; offsets are unknown (-1).
    None,
    /// `acks=1`: the leader has written it.
    Leader,
    /// `acks=all` (`-1`): every in-sync replica has it (Shoal: fsynced).
    All,
}

impl Acks {
    /// The value of ProduceRequest's `acks` field.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Largest `batch.size` and `buffer.memory` accepted: a batch must fit in one request frame.
pub const BATCH_SIZE_MAX: usize = 256 * 1024 * 1024;
/// Kafka's limit on requests in flight per partition with idempotence.
pub const IDEMPOTENT_IN_FLIGHT_MAX: usize = 5;

/// The producer's settings (see the module docs). Build with [`ProducerConfig::builder`] or
/// [`ProducerConfig::from_properties`].
#[derive(Clone, Debug, PartialEq)]
pub struct ProducerConfig {
    client: ClientConfig,
    acks: Acks,
    idempotence: bool,
    compression: Compression,
    transactional_id: Option<String>,
    transaction_timeout: Duration,
    two_phase_commit: bool,
    max_block: Duration,
    accumulator: AccumulatorConfig,
}

impl ProducerConfig {
    /// A builder over `client` with the producer's defaults.
    pub fn builder(client: ClientConfig) -> ProducerConfigBuilder {
        ProducerConfigBuilder {
            client: None,
            base: client,
            acks: None,
            idempotence: None,
            compression: Compression::None,
            transactional_id: None,
            transaction_timeout: Duration::from_millis(60_000),
            two_phase_commit: false,
            max_block: Duration::from_millis(60_000),
            linger: Duration::from_millis(5),
            batch_size: 16_384,
            buffer_memory: 32 * 1024 * 1024,
            delivery_timeout: Duration::from_millis(120_000),
            max_in_flight: 5,
        }
    }

    /// A config from Kafka property names: the cluster layer's keys ([`ClientConfig`]) and
    /// the producer's (`acks`, `enable.idempotence`, `linger.ms`, `batch.size`,
    /// `buffer.memory`, `max.block.ms`, `delivery.timeout.ms`,
    /// `max.in.flight.requests.per.connection`, `compression.type`, `transactional.id`,
    /// `transaction.timeout.ms`, `transaction.two.phase.commit.enable`).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown key, a value that does not parse or is out of range,
    /// or settings that contradict each other.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ProducerConfig, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut builder =
            ProducerConfigBuilder::from_client_builder(ClientConfig::builder(Vec::<String>::new()));
        for (key, value) in properties {
            builder.set(key.as_ref(), value.as_ref())?;
        }
        builder.build()
    }

    pub fn client(&self) -> &ClientConfig {
        &self.client
    }
    pub fn acks(&self) -> Acks {
        self.acks
    }
    /// `enable.idempotence` as in effect (see the module docs).
    pub fn idempotence(&self) -> bool {
        self.idempotence
    }
    /// `compression.type`.
    pub fn compression(&self) -> Compression {
        self.compression
    }
    pub fn transactional_id(&self) -> Option<&str> {
        self.transactional_id.as_deref()
    }
    pub fn transaction_timeout(&self) -> Duration {
        self.transaction_timeout
    }
    /// `transaction.two.phase.commit.enable` (KIP-939): the producer's transactions are
    /// decided by an external transaction manager ([`Producer::prepare_transaction`]), never
    /// time out on the broker, and survive a restart of the producer
    /// ([`Producer::init_transactions_keep_prepared`]).
    ///
    /// [`Producer::prepare_transaction`]: super::Producer::prepare_transaction
    /// [`Producer::init_transactions_keep_prepared`]: super::Producer::init_transactions_keep_prepared
    pub fn two_phase_commit(&self) -> bool {
        self.two_phase_commit
    }
    /// `max.block.ms`: how long `send` waits for metadata and for `buffer.memory`.
    pub fn max_block(&self) -> Duration {
        self.max_block
    }
    /// The batching settings (`batch.size`, `linger.ms`, `buffer.memory`,
    /// `max.in.flight.requests.per.connection`, `delivery.timeout.ms`, `retry.backoff.*`).
    pub fn accumulator(&self) -> &AccumulatorConfig {
        &self.accumulator
    }
}

/// Builds a [`ProducerConfig`]; validated in [`build`](Self::build).
#[derive(Clone, Debug)]
pub struct ProducerConfigBuilder {
    /// Set when built from properties: the client keys go to it.
    client: Option<ClientConfigBuilder>,
    base: ClientConfig,
    acks: Option<Acks>,
    idempotence: Option<bool>,
    compression: Compression,
    transactional_id: Option<String>,
    transaction_timeout: Duration,
    two_phase_commit: bool,
    max_block: Duration,
    linger: Duration,
    batch_size: usize,
    buffer_memory: usize,
    delivery_timeout: Duration,
    max_in_flight: usize,
}

fn bad(key: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        key: key.into(),
        reason: reason.into(),
    }
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, Error> {
    value
        .trim()
        .parse()
        .map_err(|_| bad(key, format!("cannot parse {value:?}")))
}

/// Milliseconds between 0 and `i32::MAX`, as Kafka's int settings are.
fn millis(key: &str, value: &str) -> Result<Duration, Error> {
    let ms: i64 = parse(key, value)?;
    if !(0..=i64::from(i32::MAX)).contains(&ms) {
        return Err(bad(key, format!("{ms} is outside 0-{}", i32::MAX)));
    }
    Ok(Duration::from_millis(ms as u64))
}

fn bytes(key: &str, value: &str, min: usize) -> Result<usize, Error> {
    let n: i64 = parse(key, value)?;
    usize::try_from(n)
        .ok()
        .filter(|n| (min..=BATCH_SIZE_MAX).contains(n))
        .ok_or_else(|| bad(key, format!("{n} is outside {min}-{BATCH_SIZE_MAX}")))
}

/// Kafka's `compression.type` names.
pub fn compression_from_name(name: &str) -> Option<Compression> {
    Some(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        _ => return None,
    })
}

impl ProducerConfigBuilder {
    fn from_client_builder(client: ClientConfigBuilder) -> ProducerConfigBuilder {
        let mut b = ProducerConfig::builder(ClientConfig::default());
        b.client = Some(client);
        b
    }

    /// Sets one producer setting, or (when built by [`ProducerConfig::from_properties`]) a
    /// cluster-layer one, by its Kafka property name.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown key or a value that does not parse or is out of range.
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, Error> {
        match key {
            "acks" => {
                self.acks = Some(match value.trim() {
                    "0" => Acks::None,
                    "1" => Acks::Leader,
                    "all" | "-1" => Acks::All,
                    other => return Err(bad(key, format!("{other:?} is not 0, 1 or all"))),
                })
            }
            "enable.idempotence" => self.idempotence = Some(parse(key, value)?),
            "linger.ms" => self.linger = millis(key, value)?,
            "batch.size" => self.batch_size = bytes(key, value, 1)?,
            "buffer.memory" => self.buffer_memory = bytes(key, value, 1)?,
            "max.block.ms" => self.max_block = millis(key, value)?,
            "delivery.timeout.ms" => self.delivery_timeout = millis(key, value)?,
            "max.in.flight.requests.per.connection" => {
                let n: i64 = parse(key, value)?;
                self.max_in_flight = usize::try_from(n)
                    .ok()
                    .filter(|n| (1..=1_000).contains(n))
                    .ok_or_else(|| bad(key, format!("{n} is outside 1-1000")))?;
            }
            "compression.type" => {
                self.compression = compression_from_name(value.trim()).ok_or_else(|| {
                    bad(
                        key,
                        format!("{value:?} is not none, gzip, snappy, lz4 or zstd"),
                    )
                })?
            }
            "transactional.id" => {
                self.transactional_id = Some(value.to_owned()).filter(|v| !v.is_empty())
            }
            "transaction.two.phase.commit.enable" => self.two_phase_commit = parse(key, value)?,
            "transaction.timeout.ms" => {
                self.transaction_timeout = millis(key, value)?;
                if self.transaction_timeout.is_zero() {
                    return Err(bad(key, "must be positive"));
                }
            }
            _ => match self.client.as_mut() {
                Some(client) => {
                    client.set(key, value)?;
                }
                None => return Err(bad(key, "unknown to the producer")),
            },
        }
        Ok(self)
    }

    pub fn acks(&mut self, acks: Acks) -> &mut Self {
        self.acks = Some(acks);
        self
    }
    pub fn idempotence(&mut self, enable: bool) -> &mut Self {
        self.idempotence = Some(enable);
        self
    }
    pub fn compression(&mut self, compression: Compression) -> &mut Self {
        self.compression = compression;
        self
    }
    pub fn transactional_id(&mut self, id: impl Into<String>) -> &mut Self {
        self.transactional_id = Some(id.into());
        self
    }
    /// `transaction.two.phase.commit.enable` (see [`ProducerConfig::two_phase_commit`]).
    pub fn two_phase_commit(&mut self, enable: bool) -> &mut Self {
        self.two_phase_commit = enable;
        self
    }
    pub fn linger(&mut self, linger: Duration) -> &mut Self {
        self.linger = linger;
        self
    }

    /// Validates and returns the config.
    ///
    /// # Errors
    /// [`Error::Config`]: the client config's errors; idempotence asked for (explicitly or
    /// by a `transactional.id`) with `acks` other than `all` or more than five requests in
    /// flight; a transactional id with idempotence off; `delivery.timeout.ms` below
    /// `linger.ms + request.timeout.ms` (Kafka's rule).
    pub fn build(&self) -> Result<ProducerConfig, Error> {
        let client = match &self.client {
            Some(b) => b.build()?,
            None => self.base.clone(),
        };
        let transactional = self.transactional_id.is_some();
        if transactional && self.idempotence == Some(false) {
            return Err(bad(
                "enable.idempotence",
                "a transactional.id needs idempotence",
            ));
        }
        if self.two_phase_commit && !transactional {
            return Err(bad(
                "transaction.two.phase.commit.enable",
                "two-phase commit needs a transactional.id",
            ));
        }
        let required = transactional || self.idempotence == Some(true);
        let acks = self.acks.unwrap_or(Acks::All);
        let conflict = if acks != Acks::All {
            Some(("acks", "idempotence needs acks=all"))
        } else if self.max_in_flight > IDEMPOTENT_IN_FLIGHT_MAX {
            Some((
                "max.in.flight.requests.per.connection",
                "idempotence allows at most 5",
            ))
        } else {
            None
        };
        let idempotence = match (conflict, required) {
            (Some((key, reason)), true) => return Err(bad(key, reason)),
            (Some(_), false) => false,
            (None, _) => self.idempotence.unwrap_or(true),
        };
        let linger_ms = self.linger.as_millis() as i64;
        let delivery_timeout_ms = self.delivery_timeout.as_millis() as i64;
        let request_timeout_ms = client.request_timeout().as_millis() as i64;
        if delivery_timeout_ms < linger_ms + request_timeout_ms {
            return Err(bad(
                "delivery.timeout.ms",
                format!(
                    "{delivery_timeout_ms} is below linger.ms + request.timeout.ms \
                     ({linger_ms} + {request_timeout_ms})"
                ),
            ));
        }
        let accumulator = AccumulatorConfig {
            batch_size: self.batch_size,
            linger_ms,
            buffer_memory: self.buffer_memory,
            max_in_flight: self.max_in_flight,
            delivery_timeout_ms,
            retry_backoff_ms: client.retry_backoff().as_millis() as i64,
            retry_backoff_max_ms: client.retry_backoff_max().as_millis() as i64,
        };
        Ok(ProducerConfig {
            client,
            acks,
            idempotence,
            compression: self.compression,
            transactional_id: self.transactional_id.clone(),
            transaction_timeout: self.transaction_timeout,
            two_phase_commit: self.two_phase_commit,
            max_block: self.max_block,
            accumulator,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(extra: &[(&str, &str)]) -> Result<ProducerConfig, Error> {
        let mut all = vec![("bootstrap.servers", "h:1")];
        all.extend_from_slice(extra);
        ProducerConfig::from_properties(all)
    }

    fn key_of(r: Result<ProducerConfig, Error>) -> String {
        match r {
            Err(Error::Config { key, .. }) => key,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_kafkas_with_idempotence_on() {
        let c = props(&[]).unwrap();
        assert_eq!(c.acks(), Acks::All);
        assert!(c.idempotence());
        assert_eq!(c.compression(), Compression::None);
        assert_eq!(*c.accumulator(), AccumulatorConfig::default());
        assert_eq!(c.max_block(), Duration::from_secs(60));
        assert_eq!(c.transactional_id(), None);
    }

    #[test]
    fn producer_and_client_keys_mix() {
        let c = props(&[
            ("acks", "1"),
            ("linger.ms", "20"),
            ("batch.size", "1000"),
            ("compression.type", "zstd"),
            ("client.id", "p"),
            ("max.in.flight.requests.per.connection", "10"),
        ])
        .unwrap();
        assert_eq!(c.acks(), Acks::Leader);
        // acks=1 with idempotence left at its default turns idempotence off.
        assert!(!c.idempotence());
        assert_eq!(c.accumulator().linger_ms, 20);
        assert_eq!(c.accumulator().batch_size, 1000);
        assert_eq!(c.accumulator().max_in_flight, 10);
        assert_eq!(c.compression(), Compression::Zstd);
        assert_eq!(c.client().client_id(), "p");
    }

    #[test]
    fn the_builder_takes_a_client_config_and_typed_settings() {
        let client = ClientConfig::builder(["h:1"]).build().unwrap();
        let c = ProducerConfig::builder(client.clone())
            .compression(Compression::Lz4)
            .linger(Duration::from_millis(50))
            .transactional_id("t")
            .build()
            .unwrap();
        assert_eq!(c.client(), &client);
        assert_eq!(c.compression(), Compression::Lz4);
        assert_eq!(c.accumulator().linger_ms, 50);
        assert_eq!(c.transactional_id(), Some("t"));
        assert!(c.idempotence());
        // Client keys belong to the ClientConfig given.
        let mut b = ProducerConfig::builder(client);
        assert!(matches!(b.set("client.id", "x"), Err(Error::Config { .. })));
        assert!(b.acks(Acks::Leader).idempotence(true).build().is_err());
    }

    #[test]
    fn contradictions_and_out_of_range_values_are_typed_errors() {
        assert_eq!(key_of(props(&[("acks", "2")])), "acks");
        assert_eq!(
            key_of(props(&[("acks", "0"), ("enable.idempotence", "true")])),
            "acks"
        );
        assert_eq!(
            key_of(props(&[("acks", "1"), ("transactional.id", "t")])),
            "acks"
        );
        assert_eq!(
            key_of(props(&[
                ("max.in.flight.requests.per.connection", "6"),
                ("enable.idempotence", "true")
            ])),
            "max.in.flight.requests.per.connection"
        );
        assert_eq!(
            key_of(props(&[
                ("transactional.id", "t"),
                ("enable.idempotence", "false")
            ])),
            "enable.idempotence"
        );
        assert_eq!(
            key_of(props(&[("compression.type", "brotli")])),
            "compression.type"
        );
        assert_eq!(key_of(props(&[("batch.size", "0")])), "batch.size");
        assert_eq!(key_of(props(&[("linger.ms", "-1")])), "linger.ms");
        assert_eq!(
            key_of(props(&[("delivery.timeout.ms", "1000")])),
            "delivery.timeout.ms"
        );
        assert_eq!(
            key_of(props(&[("transaction.timeout.ms", "0")])),
            "transaction.timeout.ms"
        );
        assert_eq!(key_of(props(&[("lingerms", "1")])), "lingerms");
    }
}
