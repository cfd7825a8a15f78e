//! [`ClientConfig`]: the settings of the cluster layer, under Kafka's property names.
//!
//! Build one with [`ClientConfig::builder`] (typed setters) or [`ClientConfig::from_properties`]
//! (Kafka's keys and string values, as in a Java client's `.properties` file). Values are
//! validated when built: a typo in a key or a value out of range is an [`Error::Config`], not a
//! silently ignored setting.
//!
//! Keys the producer, share consumer and admin take will join this table with those
//! components; until then a key this crate does not know is refused.

use std::time::Duration;

use crate::error::Error;
use crate::security::Security;

/// Settings of the cluster connection layer. Defaults are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    bootstrap_servers: Vec<String>,
    client_id: String,
    request_timeout: Duration,
    default_api_timeout: Duration,
    socket_connection_setup_timeout: Duration,
    retry_backoff: Duration,
    retry_backoff_max: Duration,
    reconnect_backoff: Duration,
    reconnect_backoff_max: Duration,
    metadata_max_age: Duration,
    retries: u32,
    allow_auto_create_topics: bool,
    receive_message_max_bytes: usize,
    security: Security,
}

/// Kafka's `receive.message.max.bytes` (librdkafka's name; Kafka's Java client has no limit):
/// the largest response frame read. Above it the connection is closed, as for any malformed
/// response, and nothing of that size is allocated.
pub const RECEIVE_MESSAGE_MAX_BYTES_DEFAULT: usize = 100 * 1024 * 1024;

/// Smallest accepted `receive.message.max.bytes`: an ApiVersions answer must fit.
pub const RECEIVE_MESSAGE_MAX_BYTES_MIN: usize = 64 * 1024;

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: "shoal-client".into(),
            request_timeout: Duration::from_millis(30_000),
            default_api_timeout: Duration::from_millis(60_000),
            socket_connection_setup_timeout: Duration::from_millis(10_000),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1_000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1_000),
            metadata_max_age: Duration::from_millis(300_000),
            retries: i32::MAX as u32,
            allow_auto_create_topics: true,
            receive_message_max_bytes: RECEIVE_MESSAGE_MAX_BYTES_DEFAULT,
            security: Security::default(),
        }
    }
}

impl ClientConfig {
    /// A builder with Kafka's defaults and the one required setting, the bootstrap servers
    /// (`host:port`, as in `bootstrap.servers`).
    pub fn builder<I, S>(bootstrap_servers: I) -> ClientConfigBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientConfigBuilder {
            config: ClientConfig {
                bootstrap_servers: bootstrap_servers.into_iter().map(Into::into).collect(),
                ..ClientConfig::default()
            },
        }
    }

    /// A config from Kafka property names and values (`bootstrap.servers` is required).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown key, a value that does not parse or is out of range,
    /// or a missing `bootstrap.servers`.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ClientConfig, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut builder = ClientConfig::builder(Vec::<String>::new());
        for (key, value) in properties {
            builder.set(key.as_ref(), value.as_ref())?;
        }
        builder.build()
    }

    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
    /// `request.timeout.ms`: how long one request waits for its response.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }
    /// `default.api.timeout.ms`: the bound on an operation with all its retries.
    pub fn default_api_timeout(&self) -> Duration {
        self.default_api_timeout
    }
    /// `socket.connection.setup.timeout.ms`: TCP connect plus the ApiVersions handshake.
    pub fn socket_connection_setup_timeout(&self) -> Duration {
        self.socket_connection_setup_timeout
    }
    pub fn retry_backoff(&self) -> Duration {
        self.retry_backoff
    }
    pub fn retry_backoff_max(&self) -> Duration {
        self.retry_backoff_max
    }
    pub fn reconnect_backoff(&self) -> Duration {
        self.reconnect_backoff
    }
    pub fn reconnect_backoff_max(&self) -> Duration {
        self.reconnect_backoff_max
    }
    /// `metadata.max.age.ms`: metadata older than this is refreshed before use.
    pub fn metadata_max_age(&self) -> Duration {
        self.metadata_max_age
    }
    pub fn retries(&self) -> u32 {
        self.retries
    }
    pub fn allow_auto_create_topics(&self) -> bool {
        self.allow_auto_create_topics
    }
    /// `security.protocol` and its SASL and TLS settings.
    pub fn security(&self) -> &Security {
        &self.security
    }

    pub fn receive_message_max_bytes(&self) -> usize {
        self.receive_message_max_bytes
    }
}

/// Builds a [`ClientConfig`]; non-consuming setters, validated in [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct ClientConfigBuilder {
    config: ClientConfig,
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, Error> {
    value.trim().parse().map_err(|_| Error::Config {
        key: key.into(),
        reason: format!("cannot parse {value:?}"),
    })
}

fn millis(key: &str, value: &str) -> Result<Duration, Error> {
    let ms: i64 = parse(key, value)?;
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| Error::Config {
            key: key.into(),
            reason: format!("{ms} is negative"),
        })
}

impl ClientConfigBuilder {
    /// Sets one setting by its Kafka property name.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown key or a value that does not parse.
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, Error> {
        let c = &mut self.config;
        if c.security.set(key, value)? {
            return Ok(self);
        }
        match key {
            "bootstrap.servers" => {
                c.bootstrap_servers = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            "client.id" => c.client_id = value.to_owned(),
            "request.timeout.ms" => c.request_timeout = millis(key, value)?,
            "default.api.timeout.ms" => c.default_api_timeout = millis(key, value)?,
            "socket.connection.setup.timeout.ms" => {
                c.socket_connection_setup_timeout = millis(key, value)?
            }
            "retry.backoff.ms" => c.retry_backoff = millis(key, value)?,
            "retry.backoff.max.ms" => c.retry_backoff_max = millis(key, value)?,
            "reconnect.backoff.ms" => c.reconnect_backoff = millis(key, value)?,
            "reconnect.backoff.max.ms" => c.reconnect_backoff_max = millis(key, value)?,
            "metadata.max.age.ms" => c.metadata_max_age = millis(key, value)?,
            "retries" => {
                let n: i64 = parse(key, value)?;
                c.retries = u32::try_from(n.clamp(0, i32::MAX as i64)).unwrap_or(0);
            }
            "allow.auto.create.topics" => c.allow_auto_create_topics = parse(key, value)?,
            "receive.message.max.bytes" => c.receive_message_max_bytes = parse(key, value)?,
            _ => {
                return Err(Error::Config {
                    key: key.into(),
                    reason: "unknown to shoal-client".into(),
                })
            }
        }
        Ok(self)
    }

    pub fn client_id(&mut self, client_id: impl Into<String>) -> &mut Self {
        self.config.client_id = client_id.into();
        self
    }
    pub fn request_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.request_timeout = timeout;
        self
    }
    pub fn default_api_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.default_api_timeout = timeout;
        self
    }
    pub fn socket_connection_setup_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.socket_connection_setup_timeout = timeout;
        self
    }
    pub fn retry_backoff(&mut self, initial: Duration, max: Duration) -> &mut Self {
        self.config.retry_backoff = initial;
        self.config.retry_backoff_max = max;
        self
    }
    pub fn reconnect_backoff(&mut self, initial: Duration, max: Duration) -> &mut Self {
        self.config.reconnect_backoff = initial;
        self.config.reconnect_backoff_max = max;
        self
    }
    pub fn metadata_max_age(&mut self, age: Duration) -> &mut Self {
        self.config.metadata_max_age = age;
        self
    }
    pub fn retries(&mut self, retries: u32) -> &mut Self {
        self.config.retries = retries;
        self
    }
    pub fn allow_auto_create_topics(&mut self, allow: bool) -> &mut Self {
        self.config.allow_auto_create_topics = allow;
        self
    }
    pub fn receive_message_max_bytes(&mut self, bytes: usize) -> &mut Self {
        self.config.receive_message_max_bytes = bytes;
        self
    }

    /// Validates and returns the config.
    ///
    /// # Errors
    /// [`Error::Config`]: no bootstrap server, a server not of the form `host:port`, a zero
    /// timeout, or a `receive.message.max.bytes` below [`RECEIVE_MESSAGE_MAX_BYTES_MIN`] or
    /// above what a frame can carry.
    pub fn build(&self) -> Result<ClientConfig, Error> {
        let c = &self.config;
        let bad = |key: &str, reason: String| Error::Config {
            key: key.into(),
            reason,
        };
        if c.bootstrap_servers.is_empty() {
            return Err(bad("bootstrap.servers", "no server given".into()));
        }
        for server in &c.bootstrap_servers {
            let port_ok = server
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                return Err(bad(
                    "bootstrap.servers",
                    format!("{server:?} is not host:port"),
                ));
            }
        }
        for (key, value) in [
            ("request.timeout.ms", c.request_timeout),
            ("default.api.timeout.ms", c.default_api_timeout),
            (
                "socket.connection.setup.timeout.ms",
                c.socket_connection_setup_timeout,
            ),
        ] {
            if value.is_zero() {
                return Err(bad(key, "must be positive".into()));
            }
        }
        if c.receive_message_max_bytes < RECEIVE_MESSAGE_MAX_BYTES_MIN
            || c.receive_message_max_bytes > i32::MAX as usize
        {
            return Err(bad(
                "receive.message.max.bytes",
                format!(
                    "{} is outside {RECEIVE_MESSAGE_MAX_BYTES_MIN}-{}",
                    c.receive_message_max_bytes,
                    i32::MAX
                ),
            ));
        }
        Ok(c.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_use_kafka_names() {
        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:9092, b:9093"),
            ("client.id", "me"),
            ("request.timeout.ms", "1500"),
            ("retry.backoff.ms", "10"),
            ("retry.backoff.max.ms", "200"),
            ("retries", "3"),
            ("allow.auto.create.topics", "false"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap_servers(), ["a:9092", "b:9093"]);
        assert_eq!(c.client_id(), "me");
        assert_eq!(c.request_timeout(), Duration::from_millis(1500));
        assert_eq!(c.retry_backoff_max(), Duration::from_millis(200));
        assert_eq!(c.retries(), 3);
        assert!(!c.allow_auto_create_topics());
        assert_eq!(c.metadata_max_age(), Duration::from_secs(300));
    }

    #[test]
    fn builder_and_properties_agree() {
        let built = ClientConfig::builder(["h:1"])
            .request_timeout(Duration::from_millis(5))
            .build()
            .unwrap();
        let parsed = ClientConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("request.timeout.ms", "5"),
        ])
        .unwrap();
        assert_eq!(built, parsed);
    }

    #[test]
    fn bad_settings_are_refused() {
        let err =
            |props: &[(&str, &str)]| match ClientConfig::from_properties(props.iter().copied()) {
                Err(Error::Config { key, .. }) => key,
                other => panic!("{other:?}"),
            };
        assert_eq!(err(&[]), "bootstrap.servers");
        assert_eq!(err(&[("bootstrap.servers", "nohost")]), "bootstrap.servers");
        assert_eq!(
            err(&[("bootstrap.servers", "h:1"), ("linger.mss", "5")]),
            "linger.mss"
        );
        assert_eq!(
            err(&[("bootstrap.servers", "h:1"), ("request.timeout.ms", "-1")]),
            "request.timeout.ms"
        );
        assert_eq!(
            err(&[("bootstrap.servers", "h:1"), ("request.timeout.ms", "0")]),
            "request.timeout.ms"
        );
        assert_eq!(
            err(&[
                ("bootstrap.servers", "h:1"),
                ("receive.message.max.bytes", "10")
            ]),
            "receive.message.max.bytes"
        );
    }
}
