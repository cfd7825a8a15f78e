//! Driver of the group coordinators (`shoal_core::group_coordinator`): classic groups and
//! share groups (KIP-932), which share one group-id namespace and `__consumer_offsets`.
//!
//! One task owns both sans-IO machines. It takes every request queued since its last pass, feeds
//! them (and timer ticks) to the machine, appends the records the machine emitted to
//! `__consumer_offsets` — one batch per partition, then one group-commit fsync — and only then
//! delivers the replies. If the append fails, the replies are dropped (the client sees
//! COORDINATOR_NOT_AVAILABLE and retries) and the machine is rebuilt from the log, so its state
//! never runs ahead of what is durable. At start the machine is rebuilt by replaying the log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use shoal_core::group_coordinator::share::{
    self, GroupIdUse, GroupOverrides, ShareGroupConfig, ShareGroupCoordinator, ShareGroupRecord,
    TopicsImage,
};
use shoal_core::group_coordinator::{
    partition_for, ErrorCode as CoreErrorCode, GroupConfig, GroupCoordinator, GroupRecord,
    GroupRequest, GroupResponse, GroupResult, JoinGroupResponse, ListedGroup, Output, ReplyToken,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::broker::{now_ms, Broker, CONSUMER_OFFSETS};
use crate::internal::{EncodedRecord, Replayed};
use crate::participants::TxnMarker;

/// Requests queued at most before callers wait (backpressure).
const QUEUE_REQUESTS_MAX: usize = 10_000;
/// Requests handled in one pass (one fsync) at most.
const PASS_REQUESTS_MAX: usize = 1_000;
/// Longest sleep between timer checks.
const TICK_MAX: Duration = Duration::from_millis(500);

/// A share-group request for the coordinator task.
#[derive(Debug, Clone)]
pub enum ShareCall {
    Heartbeat(share::HeartbeatRequest),
    Describe(Vec<String>),
    /// A member's current epoch (TxnShareAcknowledge's member check).
    MemberEpoch {
        group_id: String,
        member_id: String,
    },
}

/// The coordinator's answer to a [`ShareCall`].
#[derive(Debug, Clone)]
pub enum ShareReply {
    Heartbeat(Result<share::HeartbeatResponse, CoreErrorCode>),
    Describe(Vec<share::DescribedGroup>),
    MemberEpoch(Result<i32, CoreErrorCode>),
}

enum Pending {
    Classic(GroupRequest, oneshot::Sender<GroupResponse>),
    Share(ShareCall, oneshot::Sender<ShareReply>),
    /// A transaction marker appended to `__consumer_offsets`; answered once applied (None: not
    /// waited for).
    Marker(TxnMarker, Option<oneshot::Sender<()>>),
}

/// The coordinator failed to answer (not running, or its write failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// Handle to the group coordinator task.
pub struct GroupService {
    tx: Mutex<Option<mpsc::Sender<Pending>>>,
}

impl Default for GroupService {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupService {
    pub fn new() -> Self {
        Self {
            tx: Mutex::new(None),
        }
    }

    /// Replays `__consumer_offsets` and starts the coordinator task.
    ///
    /// # Errors
    /// The log cannot be read.
    pub fn start(&self, broker: &Arc<Broker>) -> anyhow::Result<()> {
        let config = group_config(broker);
        let (machines, replayed) = load(broker, &config)?;
        info!(records = replayed, "group coordinator loaded");
        let (tx, rx) = mpsc::channel(QUEUE_REQUESTS_MAX);
        *self.tx.lock().expect("group service lock poisoned") = Some(tx);
        tokio::spawn(run(Arc::downgrade(broker), machines, config, rx));
        Ok(())
    }

    /// Sends one request and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call(&self, request: GroupRequest) -> Result<GroupResponse, Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.send(Pending::Classic(request, reply)).await?;
        wait.await.map_err(|_| Unavailable)
    }

    async fn send(&self, pending: Pending) -> Result<(), Unavailable> {
        let tx = self
            .tx
            .lock()
            .expect("group service lock poisoned")
            .clone()
            .ok_or(Unavailable)?;
        tx.send(pending).await.map_err(|_| Unavailable)
    }

    /// Applies a transaction marker just appended to a `__consumer_offsets` partition (the
    /// offsets participant, see `crate::participants`): the producer's pending offset commits
    /// become committed or vanish. Waits until it is applied.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running (the marker is in the log, so the
    /// next load applies it).
    pub async fn apply_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.send(Pending::Marker(marker, Some(reply))).await?;
        wait.await.map_err(|_| Unavailable)
    }

    /// [`GroupService::apply_marker`] without waiting: queued ahead of every request sent
    /// after this returns.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or its queue is full.
    pub fn queue_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        let tx = self
            .tx
            .lock()
            .expect("group service lock poisoned")
            .clone()
            .ok_or(Unavailable)?;
        tx.try_send(Pending::Marker(marker, None))
            .map_err(|_| Unavailable)
    }

    /// Sends one share-group request and waits for its reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call_share(&self, request: ShareCall) -> Result<ShareReply, Unavailable> {
        let (reply, wait) = oneshot::channel();
        self.send(Pending::Share(request, reply)).await?;
        wait.await.map_err(|_| Unavailable)
    }
}

/// Both coordinators: they share the group-id namespace and `__consumer_offsets`.
struct Machines {
    classic: GroupCoordinator,
    share: ShareGroupCoordinator,
}

/// Rebuilds both machines from `__consumer_offsets`; returns them and how many records.
fn load(broker: &Broker, config: &GroupConfig) -> anyhow::Result<(Machines, usize)> {
    let mut machines = Machines {
        classic: GroupCoordinator::new(config.clone()),
        share: ShareGroupCoordinator::new(share_group_config(broker)),
    };
    let replayed = replay(broker, &mut machines)?;
    let now = now_ms();
    machines.classic.loaded(now);
    machines.share.loaded(now);
    Ok((machines, replayed))
}

fn share_group_config(broker: &Broker) -> ShareGroupConfig {
    let c = &broker.config;
    ShareGroupConfig {
        max_size: c.long("group.share.max.size") as usize,
        session_timeout_ms: c.long("group.share.session.timeout.ms") as i32,
        heartbeat_interval_ms: c.long("group.share.heartbeat.interval.ms") as i32,
        ..ShareGroupConfig::default()
    }
}

/// The user topics as the share coordinator sees them.
fn topics_image(broker: &Broker) -> TopicsImage {
    TopicsImage::new(
        broker
            .topic_list()
            .into_iter()
            .filter(|t| !t.internal)
            .map(|t| (t.name.clone(), *t.id.as_bytes(), t.partition_count() as i32)),
    )
}

/// A share group's group-config overrides, for the share coordinator.
fn share_overrides(broker: &Broker, group_id: &str) -> GroupOverrides {
    let overrides = broker.group_config_overrides(group_id);
    let long = |key: &str| overrides.get(key).and_then(|v| v.parse::<i32>().ok());
    GroupOverrides {
        session_timeout_ms: long(crate::group_configs::SHARE_SESSION_TIMEOUT_MS),
        heartbeat_interval_ms: long(crate::group_configs::SHARE_HEARTBEAT_INTERVAL_MS),
        max_size: None,
    }
}

fn group_config(broker: &Broker) -> GroupConfig {
    let c = &broker.config;
    GroupConfig {
        min_session_timeout_ms: c.long("group.min.session.timeout.ms") as i32,
        max_session_timeout_ms: c.long("group.max.session.timeout.ms") as i32,
        initial_rebalance_delay_ms: c.long("group.initial.rebalance.delay.ms"),
        max_size: c.long("group.max.size") as usize,
        offsets_retention_ms: c.long("offsets.retention.minutes") * 60_000,
        ..GroupConfig::default()
    }
}

/// Replays every record of `__consumer_offsets` into the machines; returns how many.
fn replay(broker: &Broker, machines: &mut Machines) -> anyhow::Result<usize> {
    let mut count = 0;
    crate::internal::replay_topic(broker, CONSUMER_OFFSETS, |item| match item {
        Replayed::Control {
            partition,
            header,
            records,
        } => {
            if let Some(marker) = TxnMarker::from_control(partition, header, records) {
                apply_marker(machines, marker);
                count += 1;
            }
        }
        Replayed::Record { partition, record } => {
            let Some(key) = record.key.as_deref() else {
                return;
            };
            if share::record_type(key).is_some_and(share::is_share_record_type) {
                match ShareGroupRecord::decode(key, record.value.as_deref()) {
                    Ok(r) => {
                        machines.share.replay(&r);
                        count += 1;
                    }
                    Err(e) => warn!(
                        partition,
                        offset = record.offset,
                        error = %e,
                        "skipping undecodable share group record"
                    ),
                }
                return;
            }
            match GroupRecord::decode(key, record.value.as_deref()) {
                Ok(r) => {
                    machines.classic.replay(&r);
                    count += 1;
                }
                Err(e) => warn!(
                    partition,
                    offset = record.offset,
                    error = %e,
                    "skipping undecodable group record"
                ),
            }
        }
    })?;
    Ok(count)
}

/// The offsets participant's application of a transaction marker, the same live and on
/// replay: the producer's pending offset commits in every group become committed (COMMIT) or
/// vanish (ABORT). Pending offsets are matched on the producer id alone, as Kafka matches them.
fn apply_marker(machines: &mut Machines, marker: TxnMarker) {
    machines
        .classic
        .replay_end_txn(marker.producer_id, marker.commit);
}

/// Appends `records` and `share_records` (one batch per partition) and fsyncs them.
async fn persist(
    broker: &Arc<Broker>,
    records: &[GroupRecord],
    share_records: &[ShareGroupRecord],
) -> Result<(), String> {
    let partitions = crate::internal::partition_count(broker, CONSUMER_OFFSETS);
    let mut by_partition: BTreeMap<u32, Vec<EncodedRecord>> = BTreeMap::new();
    for r in records {
        by_partition
            .entry(partition_for(r.group_id(), partitions))
            .or_default()
            .push(r.encode());
    }
    for r in share_records {
        let encoded = r
            .encode()
            .map_err(|e| format!("share group record cannot be encoded: {e}"))?;
        by_partition
            .entry(partition_for(r.group_id(), partitions))
            .or_default()
            .push(encoded);
    }
    crate::internal::append_and_flush(broker, CONSUMER_OFFSETS, by_partition).await
}

/// What one pass of the task has to deliver once its records are durable.
#[derive(Default)]
struct Pass {
    output: Output,
    share_records: Vec<ShareGroupRecord>,
    share_replies: Vec<(oneshot::Sender<ShareReply>, ShareReply)>,
    /// Markers applied in this pass, answered with the rest of the pass.
    marker_replies: Vec<oneshot::Sender<()>>,
    /// Classic replies to amend with share groups (ListGroups / DeleteGroups).
    amend: HashMap<ReplyToken, Amend>,
}

enum Amend {
    List(Vec<ListedGroup>),
    /// Results for the share group ids of a DeleteGroups, in request order with the classic
    /// ones: `(index in request, result)`.
    Delete(Vec<(usize, GroupResult)>),
}

/// Feeds one classic request, answering or amending what concerns share groups.
fn handle_classic(
    machines: &mut Machines,
    pass: &mut Pass,
    now: i64,
    token: ReplyToken,
    request: GroupRequest,
) {
    match request {
        GroupRequest::JoinGroup(r) if machines.share.contains_group(&r.group_id) => {
            // Kafka: a classic join of a group of another type.
            pass.output.replies.push((
                token,
                GroupResponse::JoinGroup(JoinGroupResponse {
                    error_code: CoreErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                    generation_id: -1,
                    protocol_type: None,
                    protocol_name: None,
                    leader: String::new(),
                    member_id: r.member_id,
                    members: Vec::new(),
                    skip_assignment: false,
                }),
            ));
        }
        GroupRequest::ListGroups(r) => {
            let listed = machines
                .share
                .list_groups(&r.states_filter, &r.types_filter);
            pass.amend.insert(token, Amend::List(listed));
            pass.output.extend(
                machines
                    .classic
                    .handle(now, token, GroupRequest::ListGroups(r)),
            );
        }
        GroupRequest::DeleteGroups(mut r) => {
            let mut share_results = Vec::new();
            let mut classic_ids = Vec::new();
            for (i, id) in r.group_ids.drain(..).enumerate() {
                if machines.share.contains_group(&id) {
                    let error_code = match machines.share.delete_group(&id) {
                        Ok(out) => {
                            pass.share_records.extend(out.records);
                            CoreErrorCode::NONE
                        }
                        Err(code) => code,
                    };
                    share_results.push((
                        i,
                        GroupResult {
                            group_id: id,
                            error_code,
                        },
                    ));
                } else {
                    classic_ids.push(id);
                }
            }
            r.group_ids = classic_ids;
            pass.amend.insert(token, Amend::Delete(share_results));
            pass.output.extend(
                machines
                    .classic
                    .handle(now, token, GroupRequest::DeleteGroups(r)),
            );
        }
        other => pass
            .output
            .extend(machines.classic.handle(now, token, other)),
    }
}

fn handle_share(
    broker: &Broker,
    machines: &mut Machines,
    pass: &mut Pass,
    now: i64,
    call: ShareCall,
    reply: oneshot::Sender<ShareReply>,
) {
    let answer = match call {
        ShareCall::Heartbeat(request) => {
            let group_use = if machines.classic.contains_group(&request.group_id) {
                GroupIdUse::Classic
            } else {
                GroupIdUse::Free
            };
            machines.share.set_group_overrides(
                &request.group_id,
                share_overrides(broker, &request.group_id),
            );
            ShareReply::Heartbeat(match machines.share.heartbeat(now, &request, group_use) {
                Ok(out) => {
                    pass.share_records.extend(out.records);
                    Ok(out.reply)
                }
                Err(code) => Err(code),
            })
        }
        ShareCall::Describe(ids) => ShareReply::Describe(machines.share.describe(&ids)),
        ShareCall::MemberEpoch {
            group_id,
            member_id,
        } => ShareReply::MemberEpoch(machines.share.member_epoch(&group_id, &member_id)),
    };
    pass.share_replies.push((reply, answer));
}

fn amend(response: GroupResponse, amend: Option<Amend>) -> GroupResponse {
    match (response, amend) {
        (GroupResponse::ListGroups(mut r), Some(Amend::List(share))) => {
            r.groups.extend(share);
            GroupResponse::ListGroups(r)
        }
        (GroupResponse::DeleteGroups(mut r), Some(Amend::Delete(share))) => {
            for (i, result) in share {
                let at = i.min(r.results.len());
                r.results.insert(at, result);
            }
            GroupResponse::DeleteGroups(r)
        }
        (response, _) => response,
    }
}

async fn run(
    broker: Weak<Broker>,
    mut machines: Machines,
    config: GroupConfig,
    mut rx: mpsc::Receiver<Pending>,
) {
    let mut next_token: u64 = 0;
    let mut waiting: HashMap<ReplyToken, oneshot::Sender<GroupResponse>> = HashMap::new();
    loop {
        let deadline = match (
            machines.classic.next_deadline(),
            machines.share.next_deadline(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = deadline
            .map(|d| Duration::from_millis((d - now_ms()).max(0) as u64))
            .unwrap_or(TICK_MAX)
            .min(TICK_MAX);
        let mut pass = Pass::default();
        let mut batch = Vec::new();
        tokio::select! {
            received = rx.recv() => {
                let Some(first) = received else { return };
                batch.push(first);
                while batch.len() < PASS_REQUESTS_MAX {
                    match rx.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
            }
            _ = tokio::time::sleep(sleep) => {}
        }
        let Some(broker) = broker.upgrade() else {
            return;
        };
        // Topics created, deleted or grown since the last pass move share assignments.
        let image = topics_image(&broker);
        if &image != machines.share.topics() {
            pass.share_records
                .extend(machines.share.on_metadata_change(image).records);
        }
        let now = now_ms();
        for pending in batch {
            match pending {
                Pending::Classic(request, reply) => {
                    let token = ReplyToken(next_token);
                    next_token += 1;
                    waiting.insert(token, reply);
                    handle_classic(&mut machines, &mut pass, now, token, request);
                }
                Pending::Share(call, reply) => {
                    handle_share(&broker, &mut machines, &mut pass, now, call, reply);
                }
                Pending::Marker(marker, reply) => {
                    apply_marker(&mut machines, marker);
                    pass.marker_replies.extend(reply);
                }
            }
        }
        pass.output.extend(machines.classic.tick(now));
        pass.share_records
            .extend(machines.share.expire(now).records);
        if let Err(e) = persist(&broker, &pass.output.records, &pass.share_records).await {
            error!(error = %e, "group coordinator write failed; reloading state from the log");
            // Drop every reply of this pass: their changes are not durable.
            for (token, _) in pass.output.replies {
                waiting.remove(&token);
            }
            match load(&broker, &config) {
                Ok((reloaded, _)) => machines = reloaded,
                Err(e) => error!(error = %e, "group coordinator reload failed"),
            }
            // Members waiting on deferred replies must rejoin: their senders drop here.
            waiting.clear();
            continue;
        }
        for (token, response) in pass.output.replies {
            if let Some(reply) = waiting.remove(&token) {
                let _ = reply.send(amend(response, pass.amend.remove(&token)));
            }
        }
        for (reply, answer) in pass.share_replies {
            let _ = reply.send(answer);
        }
        for reply in pass.marker_replies {
            let _ = reply.send(());
        }
    }
}
