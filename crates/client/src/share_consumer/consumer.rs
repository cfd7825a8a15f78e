//! [`ShareConsumer`]: the async shell over the share consumer's sans-IO parts. It owns the
//! heartbeat task ([`membership`]), one share session per partition
//! leader, and the acknowledgement book ([`acknowledgements`](super::acknowledgements)).
//!
//! A poll takes the book's pending acknowledgements of each partition and piggybacks them on
//! that leader's ShareFetch (session epoch 0 opens the session, then 1, 2, ...), decodes the
//! acquired records ([`records`]) and delivers them into the book.
//! `commit_sync` and `commit_async` send ShareAcknowledge on the same sessions; `close`
//! sends the book's closing acknowledgements with epoch -1 (closing each session), then
//! leaves the group with member epoch -1.
//!
//! Each session sits behind its own async mutex, so a request's epoch is always the
//! session's next one: a `commit_async` in flight holds its session until answered, and the
//! next fetch to that leader waits for it. Its outcome is applied to the book at the next
//! poll, commit or close.
//!
//! Leaders are fetched one after another; the first waits up to `fetch.max.wait.ms`, the
//! others not at all, so a poll's wait does not add up over leaders.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::share::share_acknowledge::{AcknowledgePartition, AcknowledgeTopic};
use shoal_protocol::share::share_fetch::{FetchPartition, FetchTopic, ForgottenTopic};
use shoal_protocol::share::{
    AcknowledgementBatch, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
};
use shoal_protocol::uuid::Uuid;
use shoal_protocol::{ApiKey, ErrorCode};
use tokio::task::JoinHandle;

use super::acknowledgements::{AckBatch, AcknowledgeType, Acknowledgements, Acquired};
use super::config::{AcquireMode, ShareConsumerConfig};
use super::membership::{self, generate_member_id, lock, Membership, Shared};
use super::records::{self, ShareRecord, TopicIdPartition};
use super::transactional::{ShareAcknowledgements, ShareGroupMetadata};
use crate::cluster::Cluster;
use crate::error::Error;

/// One leader's share session.
#[derive(Debug)]
struct Session {
    leader: i32,
    /// The next request's epoch: 0 until opened.
    epoch: i32,
    partitions: BTreeSet<TopicIdPartition>,
}

impl Session {
    fn new(leader: i32) -> Arc<tokio::sync::Mutex<Session>> {
        Arc::new(tokio::sync::Mutex::new(Session {
            leader,
            epoch: 0,
            partitions: BTreeSet::new(),
        }))
    }
    fn advance(&mut self) {
        // Epochs go 1, 2, ... i32::MAX, then 1 again, as Kafka's ShareSessionEpoch.next.
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
    }
    fn reset(&mut self) {
        self.epoch = 0;
        self.partitions.clear();
    }
}

type AckResults = Arc<Mutex<Vec<(TopicIdPartition, Vec<AckBatch>, i16)>>>;

/// A share group consumer (KIP-932). See the module docs.
#[derive(Debug)]
pub struct ShareConsumer {
    config: ShareConsumerConfig,
    cluster: Cluster,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    heartbeat: Option<JoinHandle<()>>,
    book: Acknowledgements<TopicIdPartition>,
    sessions: HashMap<i32, Arc<tokio::sync::Mutex<Session>>>,
    /// The leader whose session delivered a partition's records: their acknowledgements go
    /// there, even after the partition moved.
    held_by: HashMap<TopicIdPartition, i32>,
    async_results: AckResults,
    async_tasks: Vec<JoinHandle<()>>,
}

fn wire_batches(batches: &[AckBatch]) -> Vec<AcknowledgementBatch> {
    batches
        .iter()
        .map(|b| AcknowledgementBatch {
            first_offset: b.first_offset,
            last_offset: b.last_offset,
            acknowledge_types: b.types.iter().map(|t| t.code()).collect(),
            ..Default::default()
        })
        .collect()
}

fn has_renew(batches: &[AckBatch]) -> bool {
    batches
        .iter()
        .any(|b| b.types.contains(&AcknowledgeType::Renew))
}

fn session_lost(code: i16) -> bool {
    code == ErrorCode::SHARE_SESSION_NOT_FOUND.0 || code == ErrorCode::INVALID_SHARE_SESSION_EPOCH.0
}

impl ShareConsumer {
    /// Connects to the cluster and starts the heartbeat task (it joins once
    /// [`subscribe`](Self::subscribe) names topics).
    ///
    /// # Errors
    /// As [`Cluster::connect`].
    pub async fn new(config: ShareConsumerConfig) -> Result<ShareConsumer, Error> {
        let cluster = Cluster::connect(config.client().clone()).await?;
        let shared = Arc::new(Shared {
            membership: Mutex::new(Membership::new(config.group_id(), generate_member_id())),
            wake: tokio::sync::Notify::new(),
            error: Mutex::new(None),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = tokio::spawn(membership::run(
            cluster.clone(),
            shared.clone(),
            stop.clone(),
        ));
        Ok(ShareConsumer {
            book: Acknowledgements::new(config.acknowledgement_mode()),
            config,
            cluster,
            shared,
            stop,
            heartbeat: Some(heartbeat),
            sessions: HashMap::new(),
            held_by: HashMap::new(),
            async_results: Arc::default(),
            async_tasks: Vec::new(),
        })
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Subscribes to `topics` (replacing the subscription); the next heartbeat carries it.
    pub fn subscribe<I, S>(&mut self, topics: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let topics: BTreeSet<String> = topics.into_iter().map(Into::into).collect();
        lock(&self.shared.membership).subscribe(topics);
        self.shared.wake.notify_one();
    }

    /// The group, member id and epoch as the last heartbeat left them.
    pub fn share_group_metadata(&self) -> ShareGroupMetadata {
        let m = lock(&self.shared.membership);
        ShareGroupMetadata {
            group_id: m.group_id().to_owned(),
            member_id: m.member_id().to_owned(),
            member_epoch: m.epoch(),
        }
    }

    /// Drains the pending ACCEPT / REJECT acknowledgements for a transaction (KIP-1289 §4);
    /// explicit mode only. The consumer never sends them (not on fetch, commit or close).
    /// It walks every record the consumer holds, so call it once per poll or per
    /// transaction, not once per record (the `exactly_once_pipeline` example spent an eighth
    /// of its CPU time here when it did).
    ///
    /// # Errors
    /// [`Error::ShareAcknowledgement`] in implicit mode or when a RELEASE or RENEW is pending;
    /// nothing drained.
    pub fn acknowledgements_for_transaction(&mut self) -> Result<ShareAcknowledgements, Error> {
        let batches = self
            .book
            .for_transaction()
            .map_err(Error::ShareAcknowledgement)?;
        let metadata = self.cluster.metadata();
        Ok(ShareAcknowledgements::from_batches(batches, |id| {
            metadata.topic_name(id).map(str::to_owned)
        }))
    }

    /// Acknowledges a record of the last poll (explicit mode); it is sent with the next
    /// fetch to its leader or commit.
    ///
    /// # Errors
    /// [`Error::ShareAcknowledgement`]: implicit mode, GAP, or a record not waiting.
    pub fn acknowledge(
        &mut self,
        record: &ShareRecord,
        ack_type: AcknowledgeType,
    ) -> Result<(), Error> {
        self.book
            .acknowledge(
                &(record.topic_id, record.partition),
                record.offset,
                ack_type,
            )
            .map_err(Error::ShareAcknowledgement)
    }

    /// Fetches records, waiting up to `timeout` for some. Implicit mode first accepts every
    /// record of the last poll. Not cancellation-safe: a dropped poll may leave a session
    /// to be reopened, and its records come back after their lock times out.
    ///
    /// # Errors
    /// [`Error::ShareAcknowledgement`] in explicit mode while a record of the last poll is
    /// unacknowledged; a heartbeat error that is not retriable (GROUP_AUTHORIZATION_FAILED,
    /// ...); a fetch error that is not retriable.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ShareRecord>, Error> {
        self.apply_async_results();
        if let Some((code, message)) = lock(&self.shared.error).clone() {
            return Err(Error::Kafka {
                code,
                api: ApiKey::ShareGroupHeartbeat,
                message: Some(message),
            });
        }
        self.book
            .begin_poll()
            .map_err(Error::ShareAcknowledgement)?;
        let deadline = Instant::now() + timeout;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let (records, fetched) = self
                .fetch_once(wait.min(self.config.fetch_max_wait()))
                .await?;
            if !records.is_empty() || Instant::now() >= deadline {
                return Ok(records);
            }
            if !fetched {
                // Nothing assigned yet: wait for the heartbeat task.
                let nap = Duration::from_millis(20).min(wait);
                tokio::time::sleep(nap).await;
            }
        }
    }

    /// The assigned partitions by leader, plus the leaders of sessions holding records or
    /// partitions to forget (an entry of no partitions).
    async fn plan(&mut self) -> Result<BTreeMap<i32, BTreeSet<TopicIdPartition>>, Error> {
        let assignment = lock(&self.shared.membership).assignment().clone();
        let mut plan: BTreeMap<i32, BTreeSet<TopicIdPartition>> = BTreeMap::new();
        for (topic_id, partitions) in assignment {
            let Some(name) = self.topic_name(topic_id).await else {
                continue;
            };
            for p in partitions {
                match self.cluster.leader(&name, p).await {
                    Ok(leader) => {
                        plan.entry(leader).or_default().insert((topic_id, p));
                    }
                    Err(e) if e.is_retriable() || e.requires_metadata_refresh() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        for leader in self.held_by.values().chain(self.sessions.keys()) {
            plan.entry(*leader).or_default();
        }
        Ok(plan)
    }

    /// A topic's name from metadata, fetching the subscribed topics' metadata once when the
    /// id is unknown (a topic just created).
    async fn topic_name(&self, topic_id: Uuid) -> Option<String> {
        if let Some(n) = self.cluster.metadata().topic_name(topic_id) {
            return Some(n.to_owned());
        }
        let subscription = lock(&self.shared.membership).subscription().clone();
        for t in &subscription {
            if let Ok(info) = self.cluster.topic(t).await {
                if info.topic_id == topic_id {
                    return Some(info.name);
                }
            }
        }
        None
    }

    /// One round of fetches, one per leader; `fetched` is whether any request was sent.
    async fn fetch_once(&mut self, wait: Duration) -> Result<(Vec<ShareRecord>, bool), Error> {
        let plan = self.plan().await?;
        let mut out = Vec::new();
        let mut fetched = false;
        for (leader, partitions) in plan {
            let wait = if fetched || !out.is_empty() {
                Duration::ZERO
            } else {
                wait
            };
            fetched |= self.fetch_from(leader, partitions, wait, &mut out).await?;
        }
        Ok((out, fetched))
    }

    /// One ShareFetch to `leader`: acknowledgements piggybacked, records delivered.
    async fn fetch_from(
        &mut self,
        leader: i32,
        partitions: BTreeSet<TopicIdPartition>,
        wait: Duration,
        out: &mut Vec<ShareRecord>,
    ) -> Result<bool, Error> {
        let session = self.session(leader);
        let mut session = session.lock().await;
        self.apply_async_results();
        let acking: BTreeSet<TopicIdPartition> = self
            .book
            .keys_pending()
            .into_iter()
            .filter(|k| self.held_by.get(k) == Some(&leader))
            .collect();
        let forgotten: Vec<TopicIdPartition> = session
            .partitions
            .iter()
            .filter(|k| !partitions.contains(k) && !acking.contains(k))
            .copied()
            .collect();
        if partitions.is_empty() && acking.is_empty() && forgotten.is_empty() {
            return Ok(false);
        }
        let versions = match self.cluster.api_versions(leader).await {
            Ok(versions) => versions,
            // The leader cannot be reached (nothing was sent, nothing taken from the book):
            // its partitions may have moved, which the requested metadata update tells; the
            // next round plans with it.
            Err(e) if e.is_retriable() => {
                if e.requires_metadata_update() {
                    self.cluster.request_metadata_update();
                }
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let version = versions.version(ApiKey::ShareFetch)?;
        if self.config.acquire_mode() == AcquireMode::RecordLimit && version < 2 {
            return Err(Error::Config {
                key: "share.acquire.mode".into(),
                reason: format!(
                    "record_limit needs ShareFetch v2; broker {leader} serves v{version}"
                ),
            });
        }
        let keys: BTreeSet<TopicIdPartition> = partitions.union(&acking).copied().collect();
        let (request, sent) = self.fetch_request(session.epoch, version, wait, &keys, &forgotten);
        let response = match self.cluster.send(leader, &request).await {
            Ok(r) => r,
            Err(e) => {
                // The answer is lost: whether the acknowledgements landed is unknown.
                for (key, batches) in &sent {
                    self.book.on_sent(key, batches, e.code().0);
                }
                self.session_lost(leader, &mut session);
                if e.requires_metadata_update() {
                    // The leader could not be reached: its partitions may have moved.
                    self.cluster.request_metadata_update();
                }
                if e.is_retriable() {
                    return Ok(true);
                }
                return Err(e);
            }
        };
        self.on_fetch_response(leader, &mut session, response, sent, keys, out)
    }

    /// A ShareFetch on a session at `epoch` for `keys` (each with its pending
    /// acknowledgements taken from the book), forgetting `forgotten`.
    fn fetch_request(
        &mut self,
        epoch: i32,
        version: i16,
        wait: Duration,
        keys: &BTreeSet<TopicIdPartition>,
        forgotten: &[TopicIdPartition],
    ) -> (ShareFetchRequest, BTreeMap<TopicIdPartition, Vec<AckBatch>>) {
        let mut sent: BTreeMap<TopicIdPartition, Vec<AckBatch>> = BTreeMap::new();
        let mut topics: BTreeMap<Uuid, Vec<FetchPartition>> = BTreeMap::new();
        for key in keys {
            let batches = self.book.take(key);
            topics.entry(key.0).or_default().push(FetchPartition {
                partition_index: key.1,
                acknowledgement_batches: wire_batches(&batches),
                ..Default::default()
            });
            sent.insert(*key, batches);
        }
        let mut forgotten_topics: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        for (t, p) in forgotten {
            forgotten_topics.entry(*t).or_default().push(*p);
        }
        // A fetch carrying RENEW acknowledges only and fetches nothing (KIP-1222): its
        // limits must be zero, as the Java client sends them.
        let renewing = sent.values().any(|b| has_renew(b));
        let limit = |n: usize| {
            if renewing {
                0
            } else {
                i32::try_from(n).unwrap_or(i32::MAX)
            }
        };
        let request = ShareFetchRequest {
            group_id: Some(GroupId(StrBytes::from_string(
                self.config.group_id().into(),
            ))),
            member_id: Some(StrBytes::from_string(
                lock(&self.shared.membership).member_id().to_owned(),
            )),
            share_session_epoch: epoch,
            max_wait_ms: limit(wait.as_millis() as usize),
            min_bytes: limit(self.config.fetch_min_bytes()),
            max_bytes: limit(self.config.fetch_max_bytes()),
            max_records: limit(self.config.max_poll_records()),
            batch_size: i32::try_from(self.config.max_poll_records()).unwrap_or(i32::MAX),
            share_acquire_mode: if version >= 2 {
                self.config.acquire_mode().wire()
            } else {
                0
            },
            is_renew_ack: renewing,
            topics: topics
                .into_iter()
                .map(|(topic_id, partitions)| FetchTopic {
                    topic_id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            forgotten_topics_data: forgotten_topics
                .into_iter()
                .map(|(topic_id, partitions)| ForgottenTopic {
                    topic_id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        (request, sent)
    }

    /// Applies a ShareFetch answer: the acknowledgements' outcomes to the book, the session's
    /// epoch, the acquired records delivered into `out`.
    fn on_fetch_response(
        &mut self,
        leader: i32,
        session: &mut Session,
        response: shoal_protocol::share::ShareFetchResponse,
        sent: BTreeMap<TopicIdPartition, Vec<AckBatch>>,
        keys: BTreeSet<TopicIdPartition>,
        out: &mut Vec<ShareRecord>,
    ) -> Result<bool, Error> {
        if response.error_code != 0 {
            for (key, batches) in &sent {
                self.book.on_sent(key, batches, response.error_code);
            }
            if session_lost(response.error_code) {
                self.session_lost(leader, session);
                return Ok(true);
            }
            let Some(e) = Error::from_code(
                ApiKey::ShareFetch,
                response.error_code,
                response.error_message.as_deref(),
            ) else {
                return Ok(true);
            };
            if e.requires_metadata_refresh() {
                self.cluster.invalidate_metadata();
            }
            return if e.is_retriable() { Ok(true) } else { Err(e) };
        }
        session.advance();
        session.partitions = keys;
        let mut answered: BTreeSet<TopicIdPartition> = BTreeSet::new();
        let lock_timeout =
            Duration::from_millis(u64::try_from(response.acquisition_lock_timeout_ms).unwrap_or(0));
        for topic in &response.responses {
            for p in &topic.partitions {
                let key = (topic.topic_id, p.partition_index);
                if let Some(batches) = sent.get(&key) {
                    if answered.insert(key) {
                        self.book.on_sent(&key, batches, p.acknowledge_error_code);
                    }
                }
                if p.error_code != 0 {
                    let e = Error::from_code(ApiKey::ShareFetch, p.error_code, None);
                    if e.is_some_and(|e| e.requires_metadata_refresh()) {
                        self.cluster.invalidate_metadata();
                    }
                    continue;
                }
                self.deliver(leader, key, p, lock_timeout, out);
            }
        }
        for (key, batches) in &sent {
            if !answered.contains(key) {
                self.book
                    .on_sent(key, batches, ErrorCode::UNKNOWN_SERVER_ERROR.0);
            }
        }
        Ok(true)
    }

    /// The acquired records of one partition of an answer, into the book and `out`. An
    /// answer that does not decode delivers nothing: its records come back when their lock
    /// times out.
    fn deliver(
        &mut self,
        leader: i32,
        key: TopicIdPartition,
        p: &shoal_protocol::share::share_fetch::PartitionData,
        lock_timeout: Duration,
        out: &mut Vec<ShareRecord>,
    ) {
        if p.acquired_records.is_empty() {
            return;
        }
        let acquired: Vec<Acquired> = p
            .acquired_records
            .iter()
            .map(|a| Acquired {
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                delivery_count: a.delivery_count,
            })
            .collect();
        let inflated_max = self
            .config
            .fetch_max_bytes()
            .max(self.config.max_partition_fetch_bytes());
        let Ok(decoded) = records::decode(p.records.clone(), &acquired, inflated_max) else {
            return;
        };
        let present: Vec<i64> = decoded.iter().map(|d| d.record.offset).collect();
        if self.book.deliver(&key, &acquired, &present).is_err() {
            return;
        }
        self.held_by.insert(key, leader);
        let topic = self
            .cluster
            .metadata()
            .topic_name(key.0)
            .unwrap_or_default()
            .to_owned();
        for records::Decoded { record: r, headers } in decoded {
            out.push(ShareRecord {
                topic: topic.clone(),
                partition: key.1,
                offset: r.offset,
                delivery_count: self.book.delivery_count(&key, r.offset).unwrap_or(1),
                key: r.key,
                value: r.value,
                headers,
                timestamp: r.timestamp,
                acquisition_lock_timeout: lock_timeout,
                topic_id: key.0,
            });
        }
    }

    /// A session the broker no longer knows: reopen it with epoch 0; what it held is gone
    /// (the broker releases it when the locks time out).
    fn session_lost(&mut self, leader: i32, session: &mut Session) {
        session.reset();
        let keys: Vec<TopicIdPartition> = self
            .held_by
            .iter()
            .filter(|(_, l)| **l == leader)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.book.forget(&k);
            self.held_by.remove(&k);
        }
    }

    fn apply_async_results(&mut self) {
        let results = std::mem::take(&mut *membership::lock(&self.async_results));
        for (key, batches, code) in results {
            self.book.on_sent(&key, &batches, code);
        }
        self.async_tasks.retain(|t| !t.is_finished());
    }

    /// Sends the pending acknowledgements (implicit mode: the last poll's records accepted
    /// first) in one ShareAcknowledge per leader, and waits for the answers.
    ///
    /// # Errors
    /// The first error of a leader or partition; the other leaders' acknowledgements are
    /// still sent and applied.
    pub async fn commit_sync(&mut self) -> Result<(), Error> {
        self.wait_async().await;
        let acks = self.book.commit();
        let by_leader = self.by_leader(acks);
        let mut first = None;
        for (leader, acks) in by_leader {
            let session = self.session(leader);
            let guard = session.lock_owned().await;
            let results =
                acknowledge(&self.cluster, &self.request_base(), guard, acks, false).await;
            for (key, batches, code) in results {
                self.book.on_sent(&key, &batches, code);
                if first.is_none() {
                    first = Error::from_code(ApiKey::ShareAcknowledge, code, None);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// As [`commit_sync`](Self::commit_sync) without waiting: the answers are applied at the
    /// next poll, commit or close. Cancellation-safe once it returns.
    pub async fn commit_async(&mut self) {
        self.apply_async_results();
        let acks = self.book.commit();
        let by_leader = self.by_leader(acks);
        for (leader, acks) in by_leader {
            let session = self.session(leader);
            // Taken here, so the next request to this leader waits for this one's epoch.
            let guard = session.lock_owned().await;
            let (cluster, base, results) = (
                self.cluster.clone(),
                self.request_base(),
                self.async_results.clone(),
            );
            self.async_tasks.push(tokio::spawn(async move {
                let r = acknowledge(&cluster, &base, guard, acks, false).await;
                membership::lock(&results).extend(r);
            }));
        }
    }

    async fn wait_async(&mut self) {
        for t in std::mem::take(&mut self.async_tasks) {
            let _ = t.await;
        }
        self.apply_async_results();
    }

    fn session(&mut self, leader: i32) -> Arc<tokio::sync::Mutex<Session>> {
        self.sessions
            .entry(leader)
            .or_insert_with(|| Session::new(leader))
            .clone()
    }

    fn request_base(&self) -> (String, String) {
        (
            self.config.group_id().to_owned(),
            lock(&self.shared.membership).member_id().to_owned(),
        )
    }

    fn by_leader(
        &self,
        acks: BTreeMap<TopicIdPartition, Vec<AckBatch>>,
    ) -> BTreeMap<i32, BTreeMap<TopicIdPartition, Vec<AckBatch>>> {
        let mut out: BTreeMap<i32, BTreeMap<TopicIdPartition, Vec<AckBatch>>> = BTreeMap::new();
        for (key, batches) in acks {
            // Every delivered partition has a leader; -1 (never) fails its batches.
            let leader = self.held_by.get(&key).copied().unwrap_or(-1);
            out.entry(leader).or_default().insert(key, batches);
        }
        out
    }

    /// Closes the consumer: the last poll's records accepted (implicit) or released
    /// (explicit) with every pending acknowledgement, in a ShareAcknowledge of epoch -1 to
    /// each leader (closing its session), then the leave heartbeat (member epoch -1).
    /// Errors are not reported: the broker releases whatever it still holds when the
    /// acquisition locks time out.
    pub async fn close(mut self) {
        self.wait_async().await;
        let acks = self.book.close();
        let mut by_leader = self.by_leader(acks);
        let leaders: BTreeSet<i32> = self.sessions.keys().copied().collect();
        for leader in leaders {
            by_leader.entry(leader).or_default();
        }
        for (leader, acks) in by_leader {
            let session = self.session(leader);
            let guard = session.lock_owned().await;
            if guard.epoch == 0 {
                continue;
            }
            acknowledge(&self.cluster, &self.request_base(), guard, acks, true).await;
        }
        self.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(task) = self.heartbeat.take() {
            let _ = task.await;
        }
        let (leave, group_id) = {
            let mut m = lock(&self.shared.membership);
            let joined = !m.subscription().is_empty();
            (joined.then(|| m.leave()), m.group_id().to_owned())
        };
        if let Some(leave) = leave {
            let _ = self
                .cluster
                .send_to_coordinator(crate::CoordinatorType::Group, &group_id, &leave)
                .await;
        }
        self.cluster.close().await;
    }
}

impl Drop for ShareConsumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}

/// One ShareAcknowledge on `session` (epoch -1 when `closing`); returns each partition's
/// batches with the broker's code for them.
async fn acknowledge(
    cluster: &Cluster,
    (group_id, member_id): &(String, String),
    mut session: tokio::sync::OwnedMutexGuard<Session>,
    acks: BTreeMap<TopicIdPartition, Vec<AckBatch>>,
    closing: bool,
) -> Vec<(TopicIdPartition, Vec<AckBatch>, i16)> {
    let fail = |acks: BTreeMap<TopicIdPartition, Vec<AckBatch>>, code: i16| {
        acks.into_iter().map(|(k, b)| (k, b, code)).collect()
    };
    if session.epoch == 0 {
        // No session to acknowledge on (it was lost): the records come back after their lock.
        return fail(acks, ErrorCode::SHARE_SESSION_NOT_FOUND.0);
    }
    let mut topics: BTreeMap<Uuid, Vec<AcknowledgePartition>> = BTreeMap::new();
    for ((topic_id, partition), batches) in &acks {
        topics
            .entry(*topic_id)
            .or_default()
            .push(AcknowledgePartition {
                partition_index: *partition,
                acknowledgement_batches: wire_batches(batches),
                ..Default::default()
            });
    }
    let request = ShareAcknowledgeRequest {
        group_id: Some(GroupId(StrBytes::from_string(group_id.clone()))),
        member_id: Some(StrBytes::from_string(member_id.clone())),
        share_session_epoch: if closing { -1 } else { session.epoch },
        is_renew_ack: acks.values().any(|b| has_renew(b)),
        topics: topics
            .into_iter()
            .map(|(topic_id, partitions)| AcknowledgeTopic {
                topic_id,
                partitions,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response: ShareAcknowledgeResponse = match cluster.send(session.leader, &request).await {
        Ok(r) => r,
        Err(e) => {
            session.reset();
            return fail(acks, e.code().0);
        }
    };
    // A close ends the session whatever the answer; a lost session is reopened by the next
    // fetch.
    if closing || session_lost(response.error_code) {
        session.reset();
    } else if response.error_code == 0 {
        session.advance();
    }
    if response.error_code != 0 {
        return fail(acks, response.error_code);
    }
    let mut out = Vec::new();
    for (key, batches) in acks {
        let code = response
            .responses
            .iter()
            .filter(|t| t.topic_id == key.0)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == key.1)
            .map_or(ErrorCode::UNKNOWN_SERVER_ERROR.0, |p| p.error_code);
        out.push((key, batches, code));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync + std::fmt::Debug>() {}
        check::<ShareConsumer>();
        check::<ShareRecord>();
        check::<ShareAcknowledgements>();
    }

    #[test]
    fn session_epochs_open_at_zero_and_wrap_to_one() {
        let session = Session::new(1);
        let mut s = session.try_lock().unwrap();
        assert_eq!(s.epoch, 0);
        s.advance();
        assert_eq!(s.epoch, 1);
        s.epoch = i32::MAX;
        s.advance();
        assert_eq!(s.epoch, 1);
        s.partitions.insert((Uuid::nil(), 0));
        s.reset();
        assert_eq!((s.epoch, s.partitions.len()), (0, 0));
    }

    #[test]
    fn acknowledgements_go_on_the_wire_as_batches() {
        let batches = [AckBatch {
            first_offset: 3,
            last_offset: 5,
            types: vec![
                AcknowledgeType::Accept,
                AcknowledgeType::Release,
                AcknowledgeType::Renew,
            ],
        }];
        let wire = wire_batches(&batches);
        assert_eq!((wire[0].first_offset, wire[0].last_offset), (3, 5));
        assert_eq!(wire[0].acknowledge_types, [1, 2, 4]);
        assert!(has_renew(&batches));
        assert!(session_lost(ErrorCode::INVALID_SHARE_SESSION_EPOCH.0));
        assert!(!session_lost(0));
    }
}
