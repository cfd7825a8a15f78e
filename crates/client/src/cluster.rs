//! [`Cluster`]: the connection layer every other part of the client stands on.
//!
//! Owns: the bootstrap list, the metadata cache ([`Metadata`]) and its refreshes — waited for
//! when a lookup needs a topic the cache lacks or the cache was marked stale
//! ([`Cluster::invalidate_metadata`]), fetched in the background when an update is requested
//! ([`Cluster::request_metadata_update`], after a broker could not be reached) or the cache is
//! older than `metadata.max.age.ms`, while lookups go on using the cache — one
//! [`BrokerConnection`] per broker for data requests plus one per coordinator (so group and
//! transaction requests never queue behind a long fetch on the same socket, as in the Java
//! client), the coordinator cache (FindCoordinator), reconnection with
//! `reconnect.backoff.ms`, and the retry loop ([`Cluster::retry`]) with `retry.backoff.ms`,
//! `retries` and `default.api.timeout.ms`.
//!
//! The decisions are the sans-IO parts' ([`crate::versions`], [`crate::backoff`],
//! [`crate::metadata`]); this module reads the clock, sleeps and owns the sockets.
//!
//! Locks: `std::sync::Mutex` for the caches (never held across an await); one
//! `tokio::sync::Mutex` per connection slot, held only while it connects (so concurrent
//! callers share one connection attempt). Connections are pipelined: requests on one
//! connection do not wait for each other's answers ([`Cluster::submit_at_most`] returns once
//! the request is written).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use crate::backoff::{Backoff, Decision, Jitter, RetryBudget};
use crate::broker::{BrokerConnection, PendingResponse};
use crate::config::ClientConfig;
use crate::error::Error;
use crate::metadata::{Metadata, TopicInfo, TOPICS_MAX};
use crate::versions::ApiVersions;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::{Request, StrBytes};
use shoal_protocol::{ApiKey, ErrorCode};

/// The coordinator kinds of FindCoordinator's `key_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorType {
    /// Classic, consumer and share groups: the key is the group id.
    Group,
    /// The key is the transactional id.
    Transaction,
    /// The share coordinator (KIP-932): the key is `group:topic_id:partition`.
    Share,
}

impl CoordinatorType {
    fn key_type(self) -> i8 {
        match self {
            CoordinatorType::Group => 0,
            CoordinatorType::Transaction => 1,
            CoordinatorType::Share => 2,
        }
    }
}

/// Counters of what the cluster layer did, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Metadata requests sent (bootstrap included).
    pub metadata_requests: u64,
    /// Connections opened (each with its ApiVersions exchange).
    pub connections_opened: u64,
    /// Failed attempts that [`Cluster::retry`] retried.
    pub retries: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SlotKey {
    Bootstrap(usize),
    Broker(i32),
    Coordinator(i32),
}

#[derive(Debug, Default)]
struct Slot {
    conn: Option<Arc<BrokerConnection>>,
    failures: u32,
    retry_at: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Coordinator {
    node_id: i32,
    addr: String,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    retry_backoff: Backoff,
    reconnect_backoff: Backoff,
    jitter: Mutex<Jitter>,
    metadata: Mutex<Metadata>,
    /// Topics metadata is kept for (at most [`TOPICS_MAX`]).
    topics: Mutex<BTreeSet<String>>,
    /// Single-flight metadata fetches: concurrent callers wait for one refresh.
    refresh: tokio::sync::Mutex<()>,
    /// Whether the background updater task runs ([`Cluster::request_metadata_update`]).
    updating: AtomicBool,
    slots: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<Slot>>>>,
    coordinators: Mutex<HashMap<(CoordinatorType, String), Coordinator>>,
    closed: AtomicBool,
    metadata_requests: AtomicU64,
    connections_opened: AtomicU64,
    retries: AtomicU64,
}

/// A handle on the cluster: cheap to clone, `Send + Sync`, shared by every component built on
/// it. [`Cluster::close`] closes every connection of every clone.
#[derive(Debug, Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a cache lock leaves a consistent value (every update
    // is a single assignment or insert); keep going rather than poison every caller.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// Connects to the cluster: reaches one bootstrap server and fetches metadata (the broker
    /// list), retrying every server within `default.api.timeout.ms`.
    ///
    /// # Errors
    /// [`Error::NoBrokerAvailable`] with the last failure when no server answered in time.
    pub async fn connect(config: ClientConfig) -> Result<Cluster, Error> {
        let inner = Inner {
            retry_backoff: Backoff::new(config.retry_backoff(), config.retry_backoff_max()),
            reconnect_backoff: Backoff::new(
                config.reconnect_backoff(),
                config.reconnect_backoff_max(),
            ),
            jitter: Mutex::new(Jitter::from_entropy()),
            metadata: Mutex::new(Metadata::new()),
            topics: Mutex::new(BTreeSet::new()),
            refresh: tokio::sync::Mutex::new(()),
            updating: AtomicBool::new(false),
            slots: Mutex::new(HashMap::new()),
            coordinators: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            metadata_requests: AtomicU64::new(0),
            connections_opened: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            config,
        };
        let cluster = Cluster {
            inner: Arc::new(inner),
        };
        cluster.refresh_metadata().await?;
        Ok(cluster)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    pub fn stats(&self) -> ClusterStats {
        let i = &self.inner;
        ClusterStats {
            metadata_requests: i.metadata_requests.load(Ordering::Relaxed),
            connections_opened: i.connections_opened.load(Ordering::Relaxed),
            retries: i.retries.load(Ordering::Relaxed),
        }
    }

    /// A copy of the metadata cache as it is now.
    pub fn metadata(&self) -> Metadata {
        lock(&self.inner.metadata).clone()
    }

    /// Marks metadata stale; the next lookup fetches it (and waits for it).
    pub fn invalidate_metadata(&self) {
        lock(&self.inner.metadata).invalidate();
    }

    /// Requests a metadata update without marking the cache stale (Kafka's
    /// `Metadata.requestUpdate`): lookups of known topics and partitions go on using the cache
    /// without waiting, while a background task fetches metadata — no sooner than
    /// `retry.backoff.ms` after the last fetch, growing to `retry.backoff.max.ms` while no
    /// broker answers. For a broker that cannot be reached: its partitions may have moved.
    pub fn request_metadata_update(&self) {
        lock(&self.inner.metadata).request_update();
        self.spawn_updater();
    }

    /// Starts the background updater unless it runs (or there is no runtime to run it on).
    fn spawn_updater(&self) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.inner.updating.swap(true, Ordering::AcqRel) {
            return;
        }
        runtime.spawn(serve_updates(Arc::downgrade(&self.inner)));
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs `op` until it succeeds, fails with an error that is not retriable, or the budget
    /// (`retries`, `default.api.timeout.ms`) runs out; then returns its last error. Before a
    /// retry it sleeps `retry.backoff.ms` growing to `retry.backoff.max.ms` with jitter, and
    /// marks metadata stale when the error says it is, or requests an update in the
    /// background when a broker could not be reached (the retry uses the cache meanwhile;
    /// the update, once it arrives, names the partitions' new leaders).
    ///
    /// # Errors
    /// The last error of `op`.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let deadline = Instant::now() + self.inner.config.default_api_timeout();
        let mut budget = RetryBudget::new(self.inner.config.retries(), deadline);
        loop {
            self.check_open()?;
            let error = match op().await {
                Ok(value) => return Ok(value),
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) => e,
            };
            if error.requires_metadata_refresh() {
                self.invalidate_metadata();
            } else if error.requires_metadata_update() {
                self.request_metadata_update();
            }
            let unit = lock(&self.inner.jitter).next_unit();
            match budget.after_failure(Instant::now(), &self.inner.retry_backoff, unit) {
                Decision::RetryAfter(delay) => {
                    self.inner.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                }
                Decision::GiveUp => return Err(error),
            }
        }
    }

    /// Fetches metadata now for every topic of interest, from any reachable broker (falling
    /// back to the bootstrap servers when no known broker answers), retrying rounds over all
    /// of them within `retries` and `default.api.timeout.ms`.
    ///
    /// # Errors
    /// [`Error::NoBrokerAvailable`] with the last failure when none answered; a fatal error
    /// (an api the broker lacks) at once.
    pub async fn refresh_metadata(&self) -> Result<(), Error> {
        let deadline = Instant::now() + self.inner.config.default_api_timeout();
        let mut budget = RetryBudget::new(self.inner.config.retries(), deadline);
        loop {
            let last = match self.refresh_metadata_once().await {
                Err(Error::NoBrokerAvailable { last }) => last,
                result => return result,
            };
            let unit = lock(&self.inner.jitter).next_unit();
            match budget.after_failure(Instant::now(), &self.inner.retry_backoff, unit) {
                Decision::RetryAfter(delay) => tokio::time::sleep(delay).await,
                Decision::GiveUp => return Err(Error::NoBrokerAvailable { last }),
            }
        }
    }

    /// One round of [`Cluster::refresh_metadata`]: each candidate broker once. Concurrent
    /// callers share one fetch (the second returns when the first has refreshed).
    async fn refresh_metadata_once(&self) -> Result<(), Error> {
        self.check_open()?;
        let started = Instant::now();
        let _single = self.inner.refresh.lock().await;
        if let Some(updated) = self.metadata_updated_after(started) {
            return updated;
        }
        let topics: Vec<String> = lock(&self.inner.topics).iter().cloned().collect();
        let request = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(self.inner.config.allow_auto_create_topics());
        let mut last = Error::UnknownBroker { node_id: -1 };
        for key in self.metadata_candidates() {
            self.inner.metadata_requests.fetch_add(1, Ordering::Relaxed);
            match self.send_on(key, &request).await {
                Ok(response) => {
                    let applied = lock(&self.inner.metadata).apply(Instant::now(), &response);
                    match applied {
                        Ok(_) => return Ok(()),
                        Err(reason) => {
                            last = Error::MalformedResponse {
                                addr: String::new(),
                                api: ApiKey::Metadata,
                                version: -1,
                                reason,
                            }
                        }
                    }
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(Error::NoBrokerAvailable {
            last: Box::new(last),
        })
    }

    /// `Some(Ok)` when another caller refreshed metadata while this one waited for the lock.
    fn metadata_updated_after(&self, started: Instant) -> Option<Result<(), Error>> {
        let m = lock(&self.inner.metadata);
        let fresh = !m.needs_refresh(Instant::now(), self.inner.config.metadata_max_age(), &[]);
        (fresh && m.updated_at().is_some_and(|at| at > started)).then_some(Ok(()))
    }

    /// Known brokers first (in id order), then the bootstrap servers.
    fn metadata_candidates(&self) -> Vec<SlotKey> {
        let m = lock(&self.inner.metadata);
        let mut keys: Vec<SlotKey> = m.brokers().map(|b| SlotKey::Broker(b.node_id)).collect();
        keys.extend((0..self.inner.config.bootstrap_servers().len()).map(SlotKey::Bootstrap));
        keys
    }

    /// Metadata of `topic`, fetched (and waited for) when the cache lacks it or is stale —
    /// a cache older than `metadata.max.age.ms` or with an update requested is used while it
    /// is updated in the background — retried while the
    /// broker answers with a retriable error (UNKNOWN_TOPIC_OR_PARTITION while a topic is
    /// being created, LEADER_NOT_AVAILABLE during an election).
    ///
    /// # Errors
    /// [`Error::Kafka`] with the topic's error code once retries run out, or a non-retriable
    /// one (TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION) at once.
    pub async fn topic(&self, topic: &str) -> Result<TopicInfo, Error> {
        self.retry(|| self.try_topic(topic)).await
    }

    /// One attempt of [`Cluster::topic`], for use inside a [`Cluster::retry`] of the caller's
    /// own (retry loops do not nest).
    ///
    /// # Errors
    /// As [`Cluster::topic`], without retries.
    pub async fn try_topic(&self, topic: &str) -> Result<TopicInfo, Error> {
        self.topic_once(topic).await
    }

    /// The leader's node id of a partition, with the retries of [`Cluster::topic`].
    ///
    /// # Errors
    /// As [`Cluster::topic`]; UNKNOWN_TOPIC_OR_PARTITION for a partition the topic lacks,
    /// LEADER_NOT_AVAILABLE while it has no leader.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<i32, Error> {
        self.retry(|| self.try_leader(topic, partition)).await
    }

    /// One attempt of [`Cluster::leader`], for use inside a [`Cluster::retry`]: a producer's
    /// send looks the leader up, sends, and on NOT_LEADER_OR_FOLLOWER returns the error, which
    /// makes the retry refresh metadata before the next attempt.
    ///
    /// # Errors
    /// As [`Cluster::leader`], without retries.
    pub async fn try_leader(&self, topic: &str, partition: i32) -> Result<i32, Error> {
        let info = self.topic_once(topic).await?;
        let p = usize::try_from(partition)
            .ok()
            .and_then(|p| info.partitions.get(p))
            .ok_or_else(|| topic_error(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, topic))?;
        if !p.error.is_ok() && p.error != ErrorCode::REPLICA_NOT_AVAILABLE {
            return Err(topic_error(p.error, topic));
        }
        p.leader
            .ok_or_else(|| topic_error(ErrorCode::LEADER_NOT_AVAILABLE, topic))
    }

    async fn topic_once(&self, topic: &str) -> Result<TopicInfo, Error> {
        {
            let mut topics = lock(&self.inner.topics);
            if !topics.contains(topic) {
                if topics.len() >= TOPICS_MAX {
                    return Err(Error::Config {
                        key: "topics".into(),
                        reason: format!("more than {TOPICS_MAX} topics of interest"),
                    });
                }
                topics.insert(topic.to_owned());
            }
        }
        let (wait, update) = {
            let m = lock(&self.inner.metadata);
            let update = m.needs_refresh(
                Instant::now(),
                self.inner.config.metadata_max_age(),
                &[topic],
            );
            (m.must_wait(&[topic]), update)
        };
        if wait {
            self.refresh_metadata_once().await?;
        } else if update {
            // Old, or an update requested: used as it is while the updater fetches it.
            self.spawn_updater();
        }
        let m = lock(&self.inner.metadata);
        match m.topic(topic) {
            Some(info) => Ok(info.clone()),
            None => Err(m
                .topic_error(topic)
                .map(|code| topic_error(code, topic))
                .unwrap_or_else(|| topic_error(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, topic))),
        }
    }

    /// Sends `request` to broker `node_id` once, at the negotiated version.
    ///
    /// # Errors
    /// [`Error::UnknownBroker`] when metadata does not name it; [`Error::UnsupportedVersion`]
    /// (nothing sent); the connection errors of [`BrokerConnection::send_at`].
    pub async fn send<R: Request>(&self, node_id: i32, request: &R) -> Result<R::Response, Error> {
        self.check_open()?;
        self.send_on(SlotKey::Broker(node_id), request).await
    }

    /// Sends `request` once to any reachable broker (for requests any broker answers:
    /// Metadata, CreateTopics, DescribeCluster...).
    ///
    /// # Errors
    /// The last broker's error when none answered.
    pub async fn send_any<R: Request>(&self, request: &R) -> Result<R::Response, Error> {
        self.check_open()?;
        let mut last = Error::NoBrokerAvailable {
            last: Box::new(Error::UnknownBroker { node_id: -1 }),
        };
        for key in self.metadata_candidates() {
            match self.send_on(key, request).await {
                Err(e) if e.is_retriable() => last = e,
                result => return result,
            }
        }
        Err(last)
    }

    /// The versions negotiated with broker `node_id` (connecting if needed).
    ///
    /// # Errors
    /// As [`Cluster::send`].
    pub async fn api_versions(&self, node_id: i32) -> Result<ApiVersions, Error> {
        self.check_open()?;
        let conn = self.connection(SlotKey::Broker(node_id)).await?;
        Ok(conn.versions().clone())
    }

    /// The coordinator's node id for `key`, from the cache or FindCoordinator (retried).
    ///
    /// # Errors
    /// The FindCoordinator error once retries run out (COORDINATOR_NOT_AVAILABLE while
    /// the coordinator loads), or a non-retriable one (GROUP_AUTHORIZATION_FAILED).
    pub async fn coordinator(&self, kind: CoordinatorType, key: &str) -> Result<i32, Error> {
        if let Some(c) = lock(&self.inner.coordinators).get(&(kind, key.to_owned())) {
            return Ok(c.node_id);
        }
        let found = self.retry(|| self.find_coordinator(kind, key)).await?;
        let node_id = found.node_id;
        lock(&self.inner.coordinators).insert((kind, key.to_owned()), found);
        Ok(node_id)
    }

    /// The versions negotiated with the coordinator of `key`. A coordinator that cannot be
    /// reached is forgotten, so the next call looks it up again (it may have moved).
    ///
    /// # Errors
    /// As [`Cluster::coordinator`] and [`Cluster::api_versions`].
    pub async fn coordinator_versions(
        &self,
        kind: CoordinatorType,
        key: &str,
    ) -> Result<ApiVersions, Error> {
        let node_id = self.coordinator(kind, key).await?;
        let versions = self.api_versions(node_id).await;
        if let Err(e) = &versions {
            if e.requires_coordinator_lookup() {
                self.invalidate_coordinator(kind, key);
            }
        }
        versions
    }

    /// Forgets the cached coordinator of `key` (after NOT_COORDINATOR or
    /// COORDINATOR_NOT_AVAILABLE in a response, or a failed connection to it).
    pub fn invalidate_coordinator(&self, kind: CoordinatorType, key: &str) {
        lock(&self.inner.coordinators).remove(&(kind, key.to_owned()));
    }

    /// Sends `request` once to the coordinator of `key`, on the coordinator's own
    /// connection. A failure that says the coordinator moved forgets it, so a
    /// [`Cluster::retry`] around this call looks it up again.
    ///
    /// # Errors
    /// As [`Cluster::coordinator`] and [`Cluster::send`].
    pub async fn send_to_coordinator<R: Request>(
        &self,
        kind: CoordinatorType,
        key: &str,
        request: &R,
    ) -> Result<R::Response, Error> {
        self.send_to_coordinator_at_most(kind, key, None, request)
            .await
    }

    async fn find_coordinator(
        &self,
        kind: CoordinatorType,
        key: &str,
    ) -> Result<Coordinator, Error> {
        let request = FindCoordinatorRequest::default()
            .with_key_type(kind.key_type())
            .with_key(StrBytes::from_string(key.to_owned()))
            .with_coordinator_keys(vec![StrBytes::from_string(key.to_owned())]);
        let mut last = None;
        for slot in self.metadata_candidates() {
            let conn = match self.connection(slot).await {
                Ok(conn) => conn,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let addr = conn.addr().to_owned();
            let version = conn.versions().version(ApiKey::FindCoordinator)?;
            // v4+ batches keys; v1-3 carry one key in the top-level fields.
            let mut request = request.clone();
            if version >= 4 {
                request.key = StrBytes::default();
            } else {
                request.coordinator_keys.clear();
            }
            let response = match conn.send_at(version, &request).await {
                Ok(r) => r,
                Err(e) if e.is_retriable() => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (code, message, node_id, host, port) = if version >= 4 {
                let c = response
                    .coordinators
                    .first()
                    .ok_or_else(|| Error::MalformedResponse {
                        addr: addr.clone(),
                        api: ApiKey::FindCoordinator,
                        version,
                        reason: "no coordinator in the answer".into(),
                    })?;
                (
                    c.error_code,
                    c.error_message.clone(),
                    c.node_id.0,
                    c.host.clone(),
                    c.port,
                )
            } else {
                (
                    response.error_code,
                    response.error_message.clone(),
                    response.node_id.0,
                    response.host.clone(),
                    response.port,
                )
            };
            if let Some(e) = Error::from_code(ApiKey::FindCoordinator, code, message.as_deref()) {
                return Err(e);
            }
            let port = u16::try_from(port).ok().filter(|p| *p != 0);
            let (Some(port), true) = (port, node_id >= 0 && !host.is_empty()) else {
                return Err(Error::MalformedResponse {
                    addr: addr.clone(),
                    api: ApiKey::FindCoordinator,
                    version,
                    reason: format!("coordinator {node_id} at {host}:{port:?}"),
                });
            };
            return Ok(Coordinator {
                node_id,
                addr: format!("{host}:{port}"),
            });
        }
        Err(last.unwrap_or(Error::NoBrokerAvailable {
            last: Box::new(Error::UnknownBroker { node_id: -1 }),
        }))
    }

    /// One attempt on one slot's connection.
    async fn send_on<R: Request>(&self, key: SlotKey, request: &R) -> Result<R::Response, Error> {
        self.send_on_at_most(key, None, request).await
    }

    async fn send_on_at_most<R: Request>(
        &self,
        key: SlotKey,
        version_max: Option<i16>,
        request: &R,
    ) -> Result<R::Response, Error> {
        let conn = self.connection(key).await?;
        let version = conn.version_at_most::<R>(version_max)?;
        conn.send_at(version, request).await
    }

    /// Writes `request` to broker `node_id` (at no higher version than `version_max`) and
    /// returns once it is written: the answer is awaited with [`PendingResponse::response`],
    /// while later requests go out on the same connection. Requests submitted one after the
    /// other to one broker reach it, and are answered, in that order.
    ///
    /// # Errors
    /// As [`Cluster::send`], for the write.
    pub async fn submit_at_most<R: Request>(
        &self,
        node_id: i32,
        version_max: Option<i16>,
        request: &R,
    ) -> Result<PendingResponse<R>, Error> {
        self.check_open()?;
        let conn = self.connection(SlotKey::Broker(node_id)).await?;
        let version = conn.version_at_most::<R>(version_max)?;
        conn.submit_at(version, request).await
    }

    /// As [`Cluster::send`], at no higher version than `version_max` (see
    /// [`BrokerConnection::version_at_most`]).
    ///
    /// # Errors
    /// As [`Cluster::send`].
    pub async fn send_at_most<R: Request>(
        &self,
        node_id: i32,
        version_max: Option<i16>,
        request: &R,
    ) -> Result<R::Response, Error> {
        self.check_open()?;
        self.send_on_at_most(SlotKey::Broker(node_id), version_max, request)
            .await
    }

    /// Sends a request the broker does not answer (Produce with `acks=0`) to broker
    /// `node_id`, at no higher version than `version_max`.
    ///
    /// # Errors
    /// As [`Cluster::send`], except that no answer is awaited.
    pub async fn send_without_response<R: Request>(
        &self,
        node_id: i32,
        version_max: Option<i16>,
        request: &R,
    ) -> Result<(), Error> {
        self.check_open()?;
        let conn = self.connection(SlotKey::Broker(node_id)).await?;
        let version = conn.version_at_most::<R>(version_max)?;
        conn.send_without_response_at(version, request).await
    }

    /// As [`Cluster::send_to_coordinator`], at no higher version than `version_max`.
    ///
    /// # Errors
    /// As [`Cluster::send_to_coordinator`].
    pub async fn send_to_coordinator_at_most<R: Request>(
        &self,
        kind: CoordinatorType,
        key: &str,
        version_max: Option<i16>,
        request: &R,
    ) -> Result<R::Response, Error> {
        self.check_open()?;
        let node_id = self.coordinator(kind, key).await?;
        let result = self
            .send_on_at_most(SlotKey::Coordinator(node_id), version_max, request)
            .await;
        if let Err(e) = &result {
            if e.requires_coordinator_lookup() {
                self.invalidate_coordinator(kind, key);
            }
        }
        result
    }

    fn slot(&self, key: &SlotKey) -> Arc<tokio::sync::Mutex<Slot>> {
        lock(&self.inner.slots)
            .entry(key.clone())
            .or_default()
            .clone()
    }

    fn addr_of(&self, key: &SlotKey) -> Result<(String, i32), Error> {
        match key {
            SlotKey::Bootstrap(i) => self
                .inner
                .config
                .bootstrap_servers()
                .get(*i)
                .map(|a| (a.clone(), -1))
                .ok_or(Error::UnknownBroker { node_id: -1 }),
            SlotKey::Broker(node_id) => lock(&self.inner.metadata)
                .broker(*node_id)
                .map(|b| (b.addr(), *node_id))
                .ok_or(Error::UnknownBroker { node_id: *node_id }),
            SlotKey::Coordinator(node_id) => {
                let coordinators = lock(&self.inner.coordinators);
                coordinators
                    .values()
                    .find(|c| c.node_id == *node_id)
                    .map(|c| (c.addr.clone(), *node_id))
                    .ok_or(Error::UnknownBroker { node_id: *node_id })
            }
        }
    }

    /// The slot's connection, connected (again) if needed — when there is none or it broke —
    /// after the reconnect backoff of earlier failures.
    async fn connection(&self, key: SlotKey) -> Result<Arc<BrokerConnection>, Error> {
        let slot = self.slot(&key);
        let mut guard = slot.lock().await;
        self.check_open()?;
        match &guard.conn {
            Some(conn) if !conn.is_broken() => return Ok(conn.clone()),
            Some(_) => guard.conn = None,
            None => {}
        }
        if let Some(at) = guard.retry_at {
            tokio::time::sleep_until(at.into()).await;
        }
        let (addr, node_id) = self.addr_of(&key)?;
        self.inner
            .connections_opened
            .fetch_add(1, Ordering::Relaxed);
        match BrokerConnection::connect(&addr, node_id, &self.inner.config).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                guard.conn = Some(conn.clone());
                guard.failures = 0;
                guard.retry_at = None;
                Ok(conn)
            }
            Err(e) => {
                let unit = lock(&self.inner.jitter).next_unit();
                let delay = self.inner.reconnect_backoff.delay(guard.failures, unit);
                guard.failures = guard.failures.saturating_add(1);
                guard.retry_at = Some(Instant::now() + delay);
                Err(e)
            }
        }
    }

    /// Closes every connection; a request still in flight keeps its connection until it is
    /// answered (bounded by `request.timeout.ms`). Every later call on any clone fails with
    /// [`Error::Closed`].
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let slots: Vec<_> = lock(&self.inner.slots).values().cloned().collect();
        for slot in slots {
            slot.lock().await.conn = None;
        }
    }
}

/// The background updater: fetches metadata while an update is wanted
/// ([`Metadata::update_wait`]), then ends; at most one runs per cluster. It holds the cluster
/// only while it fetches, so a cluster dropped without [`Cluster::close`] ends it too.
async fn serve_updates(inner: Weak<Inner>) {
    let mut failures: u32 = 0;
    loop {
        loop {
            let Some(cluster) = inner.upgrade().map(|inner| Cluster { inner }) else {
                return;
            };
            let i = &cluster.inner;
            if i.closed.load(Ordering::Acquire) {
                break;
            }
            let wait = lock(&i.metadata).update_wait(
                Instant::now(),
                i.config.metadata_max_age(),
                i.config.retry_backoff(),
            );
            let delay = match wait {
                None => break,
                Some(delay) if !delay.is_zero() => delay,
                Some(_) => match cluster.refresh_metadata_once().await {
                    Ok(()) => {
                        failures = 0;
                        continue;
                    }
                    // Closed, or a broker without Metadata: no retry helps; the next
                    // request starts another updater.
                    Err(e) if e.is_fatal() => {
                        i.updating.store(false, Ordering::Release);
                        return;
                    }
                    Err(_) => {
                        let unit = lock(&i.jitter).next_unit();
                        let delay = i.retry_backoff.delay(failures, unit);
                        failures = failures.saturating_add(1);
                        delay
                    }
                },
            };
            drop(cluster);
            tokio::time::sleep(delay).await;
        }
        let Some(i) = inner.upgrade() else {
            return;
        };
        i.updating.store(false, Ordering::Release);
        // An update requested between the last check and the flag's clearing found the
        // updater running: serve it here, unless another updater has started meanwhile.
        let wanted = lock(&i.metadata).update_requested();
        if !wanted || i.closed.load(Ordering::Acquire) || i.updating.swap(true, Ordering::AcqRel) {
            return;
        }
    }
}

fn topic_error(code: ErrorCode, topic: &str) -> Error {
    Error::Kafka {
        code,
        api: ApiKey::Metadata,
        message: Some(format!("topic {topic}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;

    /// Handles are shared across tasks, and every operation's future can be spawned: no
    /// `std::sync` guard is held across an await.
    #[test]
    fn handles_and_futures_are_send() {
        fn send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
        send_sync::<Cluster>();
        fn spawnable<F: Future + Send>(_: F) {}
        fn check(c: &Cluster) {
            let request = MetadataRequest::default();
            spawnable(Cluster::connect(c.config().clone()));
            spawnable(c.topic("t"));
            spawnable(c.leader("t", 0));
            spawnable(c.send(1, &request));
            spawnable(c.send_any(&request));
            spawnable(c.coordinator(CoordinatorType::Group, "g"));
            spawnable(c.send_to_coordinator(CoordinatorType::Group, "g", &request));
            spawnable(c.retry(|| c.try_leader("t", 0)));
            spawnable(c.api_versions(1));
            spawnable(c.close());
        }
        let _ = check;
    }
}
