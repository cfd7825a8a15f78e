//! ShareFetch and ShareAcknowledge (KIP-932, v1-v2): share sessions, acknowledgements, and
//! acquisition of records for share consumers.
//!
//! A ShareFetch first checks its session epoch ([`shoal_core::share_session`]), then applies
//! the acknowledgements it carries (each partition's result in AcknowledgeErrorCode, persisted
//! before the answer), then acquires records from every partition of the session: the log is
//! read from the share partition's next fetch offset up to the high watermark
//! (`share.isolation.level=read_uncommitted`) or the last stable offset (`read_committed`,
//! with the aborted transactions of the read), the machine picks what to acquire, and the
//! response carries the read batches plus the acquired ranges with their delivery counts.
//! Batches are located, not read: the machine decides from their headers (read_committed
//! included: producer ids, transactional and control flags, and the aborted transactions'
//! offsets), and the bytes go from the segment file to the socket ([`crate::outbound`]).
//! With nothing to acquire it waits up to MaxWaitMs for new data or released records.
//! Epoch -1 applies acknowledgements, fetches nothing and closes the session, releasing what
//! the member still holds. A renew-only request (v2 IsRenewAck) must ask for no records.
//!
//! Kafka's checks (KafkaApis): share.version ≥ 1 (else UNSUPPORTED_VERSION), a group id and
//! a member id (else INVALID_REQUEST), acknowledgements never on an opening (epoch 0) fetch,
//! acknowledgement batches well formed per partition (INVALID_REQUEST in that partition's
//! acknowledge error).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal_core::share_coordinator::{SharePartitionKey, TopicId};
use shoal_core::share_leader::{self, AckRefused};
use shoal_core::share_partition::{
    validate_acknowledge_batches, AbortedTransaction, AckBatch, AcquireMode, AcquireRequest,
    FetchedBatch, Isolation,
};
use shoal_core::share_session::{
    AcknowledgeContext, FetchContext, SessionError, SessionKey, TopicIdPartition,
};
use shoal_protocol::share::share_acknowledge as ack;
use shoal_protocol::share::share_fetch as sf;
use shoal_protocol::share::{AcknowledgementBatch, LeaderIdAndEpoch};
use shoal_protocol::ErrorCode;
use shoal_storage::{BatchHeader, FileRegion};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::RequestContext;
use super::{records_field, str_bytes};
use crate::broker::Broker;
use crate::producer_state::state_config;
use crate::share::{connection_id, refusal_code};

/// Longest MaxWaitMs honoured.
const SHARE_FETCH_WAIT_MAX: Duration = Duration::from_secs(30);
/// Bytes read from one partition per acquisition at most (before MaxBytes). An acquisition
/// takes about MaxRecords records (whole batches), so reading much more only costs copies;
/// the read always returns at least one whole batch, however large.
const PARTITION_READ_BYTES_MAX: usize = 1024 * 1024;

/// The leader of a share partition's topic partition, for the response's CurrentLeader.
fn leader(broker: &Broker, topic_id: Uuid, partition: i32) -> LeaderIdAndEpoch {
    let (leader_id, leader_epoch) = match broker.topic_by_id(topic_id) {
        Some(topic) => {
            let l = broker.leader(&topic.name, partition);
            (l.node_id, l.epoch)
        }
        None => (-1, -1),
    };
    LeaderIdAndEpoch {
        leader_id,
        leader_epoch,
        ..Default::default()
    }
}

fn ack_batches(batches: &[AcknowledgementBatch]) -> Vec<AckBatch> {
    batches
        .iter()
        .map(|b| AckBatch::new(b.first_offset, b.last_offset, b.acknowledge_types.clone()))
        .collect()
}

fn session_error(e: SessionError) -> ErrorCode {
    ErrorCode(e.error_code())
}

fn tip(topic_id: Uuid, partition: i32) -> TopicIdPartition {
    TopicIdPartition {
        topic_id: *topic_id.as_bytes(),
        partition,
    }
}

/// Applies one partition's acknowledgements; the error code for its response.
async fn acknowledge(
    broker: &Arc<Broker>,
    group_id: &str,
    member_id: &str,
    topic_id: Uuid,
    partition: i32,
    batches: &[AcknowledgementBatch],
    renew_allowed: bool,
) -> ErrorCode {
    let batches = ack_batches(batches);
    if let Err(e) = validate_acknowledge_batches(&batches, renew_allowed) {
        tracing::debug!(group_id, member_id, partition, error = %e, "acknowledgements refused");
        return ErrorCode(e.error_code().0);
    }
    let Some(topic) = broker.topic_by_id(topic_id) else {
        return ErrorCode::UNKNOWN_TOPIC_ID;
    };
    if let Err(code) = broker.led_partition(&topic, partition) {
        return code;
    }
    let key = SharePartitionKey::new(group_id, TopicId(*topic_id.as_bytes()), partition);
    let slot = broker.share.slot(&key);
    let mut state = slot.state.lock().await;
    match share_leader::acknowledge(state.as_mut(), member_id, &batches, broker.now_ms()) {
        Ok(acknowledged) => {
            let persisted = broker.share.persisted(broker, &key, acknowledged).await;
            drop(state);
            broker.share.released.notify_waiters();
            match persisted {
                Ok(()) => ErrorCode::NONE,
                Err(code) => code,
            }
        }
        Err(refused) => {
            tracing::debug!(group_id, member_id, partition, error = ?refused, "acknowledgements refused");
            match refused {
                AckRefused::Refused(e) => refusal_code(broker, &key, &e),
                AckRefused::NoMachine => refused.error_code(),
            }
        }
    }
}

/// What [`acquire`] does with a share partition whose state it has to initialise first (its
/// group's first fetch of it, or the first since the broker started).
///
/// Kafka initialises such a share partition asynchronously (a read from the share
/// coordinator) while the fetch waits in purgatory, and completes the fetch as soon as some
/// partition of it can deliver records: the partitions that were ready when it started, else
/// the first one whose initialisation finished. The partitions still initialising at that
/// moment deliver nothing in that answer. So a new group's first fetch of two partitions gets
/// the records of one (librdkafka's share-consumer tests count on it), the next fetch the other.
/// Shoal initialises in line, and reproduces what the client sees in two steps: first
/// [`Fresh::InitializeOnly`] over every partition, then, if none of the ready ones delivered,
/// [`Fresh::Acquire`] over the freshly initialised ones, in request order, until what they
/// delivered reaches MinBytes. (With a MinBytes that one partition does not fill, Kafka's
/// fetch waits out MaxWaitMs, by when every partition is initialised, and answers them all.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// Initialise the share partition and acquire from it in the same call.
    Acquire,
    /// Initialise the share partition and acquire nothing ([`Acquired::initialized`] set).
    InitializeOnly,
}

/// What one partition's acquisition produced.
struct Acquired {
    error: ErrorCode,
    /// Where the batches holding the acquired records are.
    region: Option<FileRegion>,
    acquired: Vec<sf::AcquiredRecords>,
    /// The share partition's state was initialised by this call and, as asked by
    /// [`Fresh::InitializeOnly`], nothing was acquired.
    initialized: bool,
}

/// Acquires records of one share partition for `member_id`, reading at most `max_bytes`.
#[allow(clippy::too_many_arguments)]
async fn acquire(
    broker: &Arc<Broker>,
    group_id: &str,
    member_id: &str,
    tp: TopicIdPartition,
    max_records: i32,
    batch_size: i32,
    mode: AcquireMode,
    max_bytes: usize,
    fresh: Fresh,
) -> Acquired {
    let empty = |error| Acquired {
        error,
        region: None,
        acquired: Vec::new(),
        initialized: false,
    };
    let topic_id = Uuid::from_bytes(tp.topic_id);
    let Some(topic) = broker.topic_by_id(topic_id) else {
        return empty(ErrorCode::UNKNOWN_TOPIC_ID);
    };
    let partition = match broker.led_partition(&topic, tp.partition) {
        Ok(p) => p,
        Err(code) => return empty(code),
    };
    let key = SharePartitionKey::new(group_id, TopicId(tp.topic_id), tp.partition);
    let slot = broker.share.slot(&key);
    let mut state = slot.state.lock().await;
    let was_initialized = state.is_some();
    if let Err(code) = broker
        .share
        .ensure_initialized(broker, &key, &mut state)
        .await
    {
        return empty(code);
    }
    if !was_initialized && fresh == Fresh::InitializeOnly {
        return Acquired {
            initialized: true,
            ..empty(ErrorCode::NONE)
        };
    }
    let Some(sp) = state.as_mut() else {
        return empty(ErrorCode::UNKNOWN_SERVER_ERROR);
    };
    if sp.violation().is_some() {
        // Stopped (logged when found): nothing to read for it.
        return empty(ErrorCode::UNKNOWN_SERVER_ERROR);
    }
    let read_committed = broker.share_group_settings(group_id).read_committed;
    let now = broker.now_ms();
    // Read under the log lock; the machine's own lock (the slot) is held throughout.
    let (read, aborted, log_start) = {
        let mut log = partition.lock();
        let log_start = log.log_start_offset();
        let max_offset = if read_committed {
            match partition.last_stable_offset(&mut log, state_config(&broker.config), now) {
                Ok(lso) => lso,
                Err(e) => return empty(ErrorCode(e.kafka_error_code())),
            }
        } else {
            log.log_end_offset()
        };
        let fetch_offset = sp.next_fetch_offset().max(log_start);
        if !sp.can_acquire_records() || fetch_offset >= max_offset {
            (None, Vec::new(), log_start)
        } else {
            match log.read_slice(fetch_offset, max_bytes.max(1), Some(max_offset), true) {
                Ok(read) => {
                    let aborted = if read_committed {
                        log.collect_aborted(fetch_offset, read.next_offset)
                    } else {
                        Vec::new()
                    };
                    let found = read.region.map(|region| (region, read.batches));
                    (found.map(|f| (fetch_offset, f)), aborted, log_start)
                }
                Err(e) => return empty(ErrorCode(e.kafka_error_code())),
            }
        }
    };
    if sp.start_offset() < log_start {
        let moved = match sp.update_log_start_offset(log_start) {
            Ok(write) => share_leader::changed(write),
            Err(e) => return empty(refusal_code(broker, &key, &e)),
        };
        if let Err(code) = broker.share.persisted(broker, &key, moved).await {
            return empty(code);
        }
    }
    let Some((fetch_offset, (region, batches))) = read else {
        return empty(ErrorCode::NONE);
    };
    let fetched: Vec<FetchedBatch> = batches
        .iter()
        .map(|(h, _)| FetchedBatch {
            base_offset: h.base_offset(),
            last_offset: h.last_offset(),
            is_control: h.is_control(),
            producer_id: h.producer_id(),
            is_transactional: h.is_transactional(),
        })
        .collect();
    let aborted: Vec<AbortedTransaction> = aborted
        .into_iter()
        .map(|(producer_id, first_offset)| AbortedTransaction {
            producer_id,
            first_offset,
        })
        .collect();
    let isolation = if read_committed {
        Isolation::ReadCommitted { aborted: &aborted }
    } else {
        Isolation::ReadUncommitted
    };
    let acquisition = match share_leader::acquire(
        sp,
        &AcquireRequest {
            member_id,
            fetch_offset,
            fetched: &fetched,
            max_records,
            batch_size,
            mode,
            isolation,
            now_ms: now,
        },
    ) {
        Ok(a) => a,
        Err(e) => return empty(refusal_code(broker, &key, &e)),
    };
    let records = match broker.share.persisted(broker, &key, acquisition).await {
        Ok(records) => records,
        Err(code) => return empty(code),
    };
    if records.is_empty() {
        return empty(ErrorCode::NONE);
    }
    // Send only the batches holding acquired records: the read may reach far past what the
    // acquisition took (MaxRecords, the record-lock cap), and clients drop the rest anyway.
    let first = records
        .iter()
        .map(|r| r.first_offset)
        .min()
        .unwrap_or(fetch_offset);
    let last = records
        .iter()
        .map(|r| r.last_offset)
        .max()
        .unwrap_or(fetch_offset);
    Acquired {
        error: ErrorCode::NONE,
        initialized: false,
        region: Some(needed_batches(&region, &batches, first, last)),
        acquired: records
            .iter()
            .map(|r| sf::AcquiredRecords {
                first_offset: r.first_offset,
                last_offset: r.last_offset,
                delivery_count: r.delivery_count,
                ..Default::default()
            })
            .collect(),
    }
}

/// The part of `region` (whose batches, at their file positions, are `batches`) holding the
/// contiguous run of whole batches that overlap offsets `first..=last`.
fn needed_batches(
    region: &FileRegion,
    batches: &[(BatchHeader, u64)],
    first: i64,
    last: i64,
) -> FileRegion {
    let mut start = None;
    let mut end = 0;
    for (header, position) in batches {
        if header.last_offset() < first {
            continue;
        }
        if header.base_offset() > last {
            break;
        }
        start.get_or_insert(*position);
        end = position + header.size_bytes() as u64;
    }
    match start {
        Some(start) if start < end && start >= region.position() => {
            region.sub((start - region.position()) as usize, (end - start) as usize)
        }
        _ => region.clone(),
    }
}

/// What a ShareFetch may still take: bytes (MaxBytes, capped by `fetch.max.bytes`) and records
/// (MaxRecords), both across all its partitions.
struct Budget {
    bytes: usize,
    records: i32,
    /// Bytes of records taken so far.
    taken: usize,
}

impl Budget {
    fn is_spent(&self) -> bool {
        self.bytes == 0 || self.records <= 0
    }
}

/// Puts one partition's acquisition into the response: its error code, and what it acquired
/// (charged to `budget`) with the records, inline or as a file region in `regions`. Returns
/// (records were acquired, the partition failed).
fn take(
    broker: &Broker,
    tp: TopicIdPartition,
    acquired: Acquired,
    budget: &mut Budget,
    results: &mut BTreeMap<(Uuid, i32), sf::PartitionData>,
    regions: &mut BTreeMap<(Uuid, i32), FileRegion>,
) -> (bool, bool) {
    let topic_id = Uuid::from_bytes(tp.topic_id);
    let data = results
        .entry((topic_id, tp.partition))
        .or_insert_with(|| sf::PartitionData {
            partition_index: tp.partition,
            current_leader: leader(broker, topic_id, tp.partition),
            ..Default::default()
        });
    data.error_code = acquired.error.code();
    let failed = !acquired.error.is_ok();
    let (false, Some(region)) = (acquired.acquired.is_empty(), acquired.region) else {
        return (false, failed);
    };
    budget.bytes = budget.bytes.saturating_sub(region.len());
    budget.taken = budget.taken.saturating_add(region.len());
    let count: i64 = acquired
        .acquired
        .iter()
        .map(|a| a.last_offset - a.first_offset + 1)
        .sum();
    budget.records = budget
        .records
        .saturating_sub(i32::try_from(count).unwrap_or(i32::MAX));
    data.acquired_records = acquired.acquired;
    match records_field(region) {
        Ok((records, sent_apart)) => {
            data.records = records;
            if let Some(region) = sent_apart {
                regions.insert((topic_id, tp.partition), region);
            }
        }
        Err(e) => {
            // The records stay acquired until their locks time out.
            tracing::error!(error = %e, "reading records failed");
            data.error_code = ErrorCode::KAFKA_STORAGE_ERROR.code();
            data.acquired_records.clear();
        }
    }
    (true, failed)
}

fn fetch_error(code: ErrorCode, message: Option<&str>) -> sf::ShareFetchResponse {
    sf::ShareFetchResponse {
        error_code: code.code(),
        error_message: message.map(str_bytes),
        ..Default::default()
    }
}

/// The checks every share request starts with (KafkaApis): share groups enabled, a group id,
/// a valid member id. Returns `(group id, member id)`, or the top-level error to answer.
fn identify(
    broker: &Broker,
    group_id: &Option<shoal_protocol::messages::GroupId>,
    member_id: Option<&shoal_protocol::StrBytes>,
) -> Result<(String, String), (ErrorCode, Option<&'static str>)> {
    if !broker.share_groups_enabled() {
        return Err((ErrorCode::UNSUPPORTED_VERSION, None));
    }
    let group_id = group_id
        .as_ref()
        .map(|g| g.0.to_string())
        .ok_or((ErrorCode::INVALID_REQUEST, Some("GroupId is required")))?;
    let member_id = member_id
        .map(|m| m.as_str())
        .filter(|m| !m.is_empty() && m.chars().count() <= 36)
        .map(str::to_string)
        .ok_or((ErrorCode::INVALID_REQUEST, Some("invalid MemberId")))?;
    Ok((group_id, member_id))
}

/// Answers a ShareFetch: the response, and the file regions its record placeholders stand for
/// (in encoding order; see [`crate::outbound::encode`]).
pub async fn share_fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    version: i16,
    r: &sf::ShareFetchRequest,
) -> (sf::ShareFetchResponse, Vec<FileRegion>) {
    let mut regions: BTreeMap<(Uuid, i32), FileRegion> = BTreeMap::new();
    let response = share_fetch_located(broker, ctx, version, r, &mut regions).await;
    // Encoding visits topics, then partitions, in the response's order; the placeholders are
    // exactly the partitions left with a region.
    let mut ordered = Vec::with_capacity(regions.len());
    for t in &response.responses {
        for p in &t.partitions {
            if let Some(region) = regions.remove(&(t.topic_id, p.partition_index)) {
                ordered.push(region);
            }
        }
    }
    (response, ordered)
}

async fn share_fetch_located(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    version: i16,
    r: &sf::ShareFetchRequest,
    regions: &mut BTreeMap<(Uuid, i32), FileRegion>,
) -> sf::ShareFetchResponse {
    let (group_id, member_id) = match identify(broker, &r.group_id, r.member_id.as_ref()) {
        Ok(ids) => ids,
        Err((code, message)) => return fetch_error(code, message),
    };
    if r.is_renew_ack
        && (r.max_bytes != 0 || r.min_bytes != 0 || r.max_records != 0 || r.max_wait_ms != 0)
    {
        return fetch_error(
            ErrorCode::INVALID_REQUEST,
            Some("a renew acknowledgement fetches nothing"),
        );
    }
    let Some(mode) = AcquireMode::from_id(r.share_acquire_mode) else {
        return fetch_error(ErrorCode::INVALID_REQUEST, Some("unknown ShareAcquireMode"));
    };
    let settings = broker.share_group_settings(&group_id);
    let renew_allowed = version >= 2 && r.is_renew_ack && settings.renew_acknowledge_enable;
    let has_acks = r
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .any(|p| !p.acknowledgement_batches.is_empty());
    let final_epoch = r.share_session_epoch == -1;
    let added: Vec<TopicIdPartition> = if final_epoch {
        Vec::new()
    } else {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| tip(t.topic_id, p.partition_index))
            })
            .collect()
    };
    let forgotten: Vec<TopicIdPartition> = r
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| tip(t.topic_id, *p)))
        .collect();
    let session_key = SessionKey {
        group_id: group_id.clone(),
        member_id: member_id.clone(),
    };
    let context = broker
        .share
        .sessions
        .lock()
        .expect("share sessions lock poisoned")
        .fetch(
            &session_key,
            r.share_session_epoch,
            connection_id(ctx.peer),
            &added,
            &forgotten,
            has_acks,
            broker.now_ms(),
        );
    let context = match context {
        Ok(c) => c,
        Err(e) => return fetch_error(session_error(e), None),
    };
    if let FetchContext::Initial {
        replaced: Some(old),
        ..
    } = &context
    {
        // The member reopened its session: what it held under the old one goes back.
        broker
            .share
            .release_member(
                broker,
                &group_id,
                &member_id,
                old.partitions.iter().copied(),
            )
            .await;
    }

    // Acknowledgements first, in request order.
    let mut results: BTreeMap<(Uuid, i32), sf::PartitionData> = BTreeMap::new();
    for t in &r.topics {
        for p in &t.partitions {
            let mut data = sf::PartitionData {
                partition_index: p.partition_index,
                current_leader: leader(broker, t.topic_id, p.partition_index),
                ..Default::default()
            };
            if !p.acknowledgement_batches.is_empty() {
                data.acknowledge_error_code = acknowledge(
                    broker,
                    &group_id,
                    &member_id,
                    t.topic_id,
                    p.partition_index,
                    &p.acknowledgement_batches,
                    renew_allowed,
                )
                .await
                .code();
            }
            results.insert((t.topic_id, p.partition_index), data);
        }
    }

    let to_fetch: Vec<TopicIdPartition> = match context {
        FetchContext::Final => {
            broker.share.close_session(broker, &session_key).await;
            Vec::new()
        }
        _ if r.is_renew_ack => Vec::new(),
        FetchContext::Initial { partitions, .. } | FetchContext::Subsequent { partitions } => {
            partitions
        }
    };

    if !to_fetch.is_empty() {
        let wait = Duration::from_millis(r.max_wait_ms.max(0) as u64).min(SHARE_FETCH_WAIT_MAX);
        let deadline = Instant::now() + wait;
        let max_records = if r.max_records > 0 {
            r.max_records
        } else {
            i32::MAX
        };
        let batch_size = if r.batch_size > 0 {
            r.batch_size
        } else {
            max_records
        };
        let fetch_bytes_max = broker.config.long("fetch.max.bytes") as usize;
        // MaxBytes 0 (a consumer with fetch.max.bytes=0) acquires nothing: the fetch waits
        // out MaxWaitMs and answers no records, as Kafka does.
        let remaining = usize::try_from(r.max_bytes)
            .unwrap_or(0)
            .min(fetch_bytes_max);
        // MaxRecords bounds the whole request, not each partition (as Kafka's
        // ShareFetchUtils does): what one partition acquired is taken from the next one's.
        let mut budget = Budget {
            bytes: remaining,
            records: max_records,
            taken: 0,
        };
        // Kafka completes a fetch once its ready partitions hold MinBytes; Shoal answers as soon
        // as it has records, and uses MinBytes only to stop taking from freshly initialised
        // share partitions (see [`Fresh`]).
        let min_bytes = usize::try_from(r.min_bytes).unwrap_or(0).max(1);
        let mut first_round = true;
        loop {
            // Register before acquiring, so data or a release in between is not missed.
            let waker = Arc::new(Notify::new());
            let released = broker.share.released.clone();
            let released_wait = released.notified();
            tokio::pin!(released_wait);
            released_wait.as_mut().enable();
            for tp in &to_fetch {
                if let Some(p) = broker
                    .topic_by_id(Uuid::from_bytes(tp.topic_id))
                    .and_then(|t| t.partition(tp.partition))
                {
                    p.watch(&waker);
                }
            }
            let mut got_any = false;
            let mut errors = false;
            // Only the first round can meet uninitialised share partitions: it initialises
            // them all, and they deliver only if the ready ones did not (see [`Fresh`]).
            let fresh = if first_round {
                Fresh::InitializeOnly
            } else {
                Fresh::Acquire
            };
            let mut initialized = Vec::new();
            for tp in &to_fetch {
                if budget.is_spent() {
                    break;
                }
                let acquired = acquire(
                    broker,
                    &group_id,
                    &member_id,
                    *tp,
                    budget.records,
                    batch_size,
                    mode,
                    budget.bytes.min(PARTITION_READ_BYTES_MAX),
                    fresh,
                )
                .await;
                if acquired.initialized {
                    initialized.push(*tp);
                }
                let (got, error) = take(broker, *tp, acquired, &mut budget, &mut results, regions);
                got_any |= got;
                errors |= error;
            }
            if !got_any && !errors {
                for tp in &initialized {
                    if budget.is_spent() {
                        break;
                    }
                    let acquired = acquire(
                        broker,
                        &group_id,
                        &member_id,
                        *tp,
                        budget.records,
                        batch_size,
                        mode,
                        budget.bytes.min(PARTITION_READ_BYTES_MAX),
                        Fresh::Acquire,
                    )
                    .await;
                    let (got, error) =
                        take(broker, *tp, acquired, &mut budget, &mut results, regions);
                    errors |= error;
                    got_any |= got;
                    if got && budget.taken >= min_bytes {
                        // The first partitions to finish initialising complete the fetch.
                        break;
                    }
                }
            }
            first_round = false;
            if got_any || errors || Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                _ = waker.notified() => {}
                _ = &mut released_wait => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    let mut by_topic: BTreeMap<Uuid, Vec<sf::PartitionData>> = BTreeMap::new();
    for ((topic_id, _), data) in results {
        by_topic.entry(topic_id).or_default().push(data);
    }
    sf::ShareFetchResponse {
        acquisition_lock_timeout_ms: i32::try_from(settings.record_lock_duration_ms)
            .unwrap_or(i32::MAX),
        responses: by_topic
            .into_iter()
            .map(|(topic_id, partitions)| sf::ShareFetchableTopicResponse {
                topic_id,
                partitions,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn ack_error(code: ErrorCode, message: Option<&str>) -> ack::ShareAcknowledgeResponse {
    ack::ShareAcknowledgeResponse {
        error_code: code.code(),
        error_message: message.map(str_bytes),
        ..Default::default()
    }
}

pub async fn share_acknowledge(
    broker: &Arc<Broker>,
    version: i16,
    r: &ack::ShareAcknowledgeRequest,
) -> ack::ShareAcknowledgeResponse {
    let (group_id, member_id) = match identify(broker, &r.group_id, r.member_id.as_ref()) {
        Ok(ids) => ids,
        Err((code, message)) => return ack_error(code, message),
    };
    let settings = broker.share_group_settings(&group_id);
    let renew_allowed = version >= 2 && r.is_renew_ack && settings.renew_acknowledge_enable;
    let session_key = SessionKey {
        group_id: group_id.clone(),
        member_id: member_id.clone(),
    };
    let context = broker
        .share
        .sessions
        .lock()
        .expect("share sessions lock poisoned")
        .acknowledge(&session_key, r.share_session_epoch, broker.now_ms());
    let context = match context {
        Ok(c) => c,
        Err(e) => return ack_error(session_error(e), None),
    };
    let mut responses = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let code = acknowledge(
                broker,
                &group_id,
                &member_id,
                t.topic_id,
                p.partition_index,
                &p.acknowledgement_batches,
                renew_allowed,
            )
            .await;
            partitions.push(ack::PartitionData {
                partition_index: p.partition_index,
                error_code: code.code(),
                current_leader: leader(broker, t.topic_id, p.partition_index),
                ..Default::default()
            });
        }
        responses.push(ack::ShareAcknowledgeTopicResponse {
            topic_id: t.topic_id,
            partitions,
            ..Default::default()
        });
    }
    if context == AcknowledgeContext::Final {
        broker.share.close_session(broker, &session_key).await;
    }
    ack::ShareAcknowledgeResponse {
        acquisition_lock_timeout_ms: i32::try_from(settings.record_lock_duration_ms)
            .unwrap_or(i32::MAX),
        responses,
        ..Default::default()
    }
}
