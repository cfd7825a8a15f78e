//! The transaction coordinator as one [`CoordinatorShard`]: the [`TxnCoordinator`] machine
//! plus what its driver used to keep beside it — the transactions whose markers are being
//! written, the requests held until then, the fresh producer ids to hand out, and the markers
//! not yet known durable that each id's Markers record lists (decision 0005).
//!
//! Held requests: while a transaction's markers are written, the machine would answer its
//! next request CONCURRENT_TRANSACTIONS and the client would retry after a backoff (librdkafka:
//! 20 ms), which dominated the commit latency of back-to-back transactions. So such a request
//! (at most [`HELD_PER_ID_MAX`] per id) is held and handled when the markers are written, or
//! after [`HOLD_MAX_MS`] — then the machine answers it as it would have. Holding changes no
//! outcome; it only answers when the answer is known.
//!
//! Fresh producer ids are allocated by the broker (persisted in blocks) and come in as
//! [`TxnInput::FreshIds`] before the requests that may need them; a request that needs one
//! when none is left gets COORDINATOR_LOAD_IN_PROGRESS from the machine and is retried.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::markers;
use super::{
    partition_for, ListTransactionsRequest, ListTransactionsResponse, Output, PendingMarker,
    ProducerId, ReplyToken, TopicPartition, TransactionDescription, TxnConfig, TxnCoordinator,
    TxnRecord, TxnRequest, TxnResponse, WriteMarkers,
};
use crate::coordinator::{
    CoordinatorShard, Emitted, EncodedRecord, RecordError, ShardRecord, TxnMarker,
};

/// Longest a request is held for its transaction's markers.
pub const HOLD_MAX_MS: i64 = 1_000;
/// Requests of one transactional id held at most; more are answered by the machine.
pub const HELD_PER_ID_MAX: usize = 16;
/// Markers one id's Markers record lists before their partitions are flushed whatever their
/// policy (with lazy flushing and no flush interval nothing else would, and the list, written
/// again with every completion of the id, would grow without bound).
pub const MARKERS_LISTED_MAX: usize = 64;
/// Fresh producer ids kept in reserve between passes.
pub const FRESH_IDS_RESERVE: usize = 8;

/// An input of the transaction coordinator.
#[derive(Debug, Clone)]
pub enum TxnInput {
    Request(TxnRequest),
    /// A transaction's markers are appended (not necessarily durable) at these offsets;
    /// `flushed` is each partition's flushed offset as read afterwards, for the partitions of
    /// `appended` and of [`TxnEffect::WriteMarkers::listed`] (a partition that no longer
    /// exists is left out).
    MarkersWritten {
        markers: WriteMarkers,
        appended: Vec<PendingMarker>,
        flushed: Vec<(TopicPartition, i64)>,
    },
    Describe(Vec<String>),
    List(ListTransactionsRequest),
    /// Producer ids the broker allocated for requests that may need one.
    FreshIds(Vec<ProducerId>),
}

/// The answer to a [`TxnInput`].
#[derive(Debug, Clone)]
pub enum TxnReply {
    Response(TxnResponse),
    Describe(Vec<TransactionDescription>),
    List(ListTransactionsResponse),
    Done,
}

/// Work for the broker once a pass is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEffect {
    /// Append the transaction's markers, then report [`TxnInput::MarkersWritten`] with the
    /// flushed offsets of their partitions and of `listed` (the partitions of the id's
    /// markers already listed as not durable).
    WriteMarkers {
        markers: WriteMarkers,
        listed: Vec<TopicPartition>,
    },
    /// Flush these partitions in the background: an id lists too many markers.
    Flush(Vec<TopicPartition>),
    /// The machine stopped on a broken invariant (emitted once): every later request is
    /// answered UNKNOWN_SERVER_ERROR until the broker restarts and reloads it from the log.
    Stopped(String),
}

impl ShardRecord for TxnRecord {
    fn partition(&self, partitions: u32) -> u32 {
        partition_for(self.transactional_id(), partitions)
    }

    fn encode(&self) -> Result<EncodedRecord, RecordError> {
        Ok(TxnRecord::encode(self))
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        TxnRecord::decode(key, value).map_err(|e| RecordError(format!("transaction record: {e}")))
    }
}

/// A request held until its transaction completes.
#[derive(Debug, Clone)]
struct Held {
    token: ReplyToken,
    request: TxnRequest,
    since_ms: i64,
}

/// The transaction coordinator, driven as one shard.
#[derive(Debug)]
pub struct TxnShard {
    machine: TxnCoordinator,
    /// Transactions whose markers are being written.
    completing: BTreeSet<String>,
    held: BTreeMap<String, Vec<Held>>,
    /// Per id, the markers not yet known durable (what its last Markers record lists).
    unflushed: BTreeMap<String, Vec<PendingMarker>>,
    fresh_ids: VecDeque<ProducerId>,
    /// Whether the machine's stop was reported ([`TxnEffect::Stopped`]).
    stop_reported: bool,
}

impl TxnShard {
    /// `coordinator_epoch` as for [`TxnCoordinator::new`]: higher on every load.
    pub fn new(config: TxnConfig, coordinator_epoch: i32) -> Self {
        Self {
            machine: TxnCoordinator::new(config, coordinator_epoch),
            completing: BTreeSet::new(),
            held: BTreeMap::new(),
            unflushed: BTreeMap::new(),
            fresh_ids: VecDeque::new(),
            stop_reported: false,
        }
    }

    /// The machine, for inspection.
    pub fn machine(&self) -> &TxnCoordinator {
        &self.machine
    }

    /// The markers the replayed Markers records list, by id (what a crash may have lost).
    pub fn listed_markers(&self) -> &BTreeMap<String, Vec<PendingMarker>> {
        &self.unflushed
    }

    /// Forgets the lists once their lost markers are written again and their partitions
    /// fsynced (at the first load); [`CoordinatorShard::loaded`] then writes them cleared.
    pub fn clear_listed_markers(&mut self) -> Vec<TxnRecord> {
        let ids: Vec<String> = self.unflushed.keys().cloned().collect();
        self.unflushed.clear();
        markers::cleared_lists(ids.iter())
    }

    /// How many fresh producer ids the broker should allocate before handling `queued`: one
    /// for every queued or held request that may need one, above what is in reserve, with the
    /// reserve topped up.
    pub fn fresh_ids_wanted<'a>(&self, queued: impl IntoIterator<Item = &'a TxnInput>) -> usize {
        let may_need = |r: &TxnRequest| self.machine.needs_fresh_producer_id(r);
        let queued = queued
            .into_iter()
            .filter(|i| matches!(i, TxnInput::Request(r) if may_need(r)))
            .count();
        let held = self
            .held
            .values()
            .flatten()
            .filter(|h| may_need(&h.request))
            .count();
        (queued + held + FRESH_IDS_RESERVE).saturating_sub(self.fresh_ids.len())
    }

    /// Feeds one request to the machine, with a fresh producer id when it may need one, and
    /// marks the transactions it starts completing.
    fn feed(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        mut request: TxnRequest,
        out: &mut Emitted<Self>,
    ) {
        if self.machine.needs_fresh_producer_id(&request) {
            if let Some(id) = self.fresh_ids.pop_front() {
                set_fresh_id(&mut request, id);
            }
        }
        let output = self.machine.handle(now_ms, token, request);
        self.emit(output, out);
    }

    fn emit(&mut self, output: Output, out: &mut Emitted<Self>) {
        out.records.extend(output.records);
        out.replies.extend(
            output
                .replies
                .into_iter()
                .map(|(t, r)| (t, TxnReply::Response(r))),
        );
        for m in output.markers {
            self.completing.insert(m.transactional_id.clone());
            let listed = self
                .unflushed
                .get(&m.transactional_id)
                .map(|l| l.iter().map(|p| p.partition.clone()).collect())
                .unwrap_or_default();
            out.effects
                .push(TxnEffect::WriteMarkers { markers: m, listed });
        }
        if !self.stop_reported {
            if let Some(violation) = self.machine.violation() {
                self.stop_reported = true;
                out.effects.push(TxnEffect::Stopped(violation.to_string()));
            }
        }
    }

    fn markers_written(
        &mut self,
        now_ms: i64,
        written: WriteMarkers,
        appended: Vec<PendingMarker>,
        flushed: &[(TopicPartition, i64)],
        out: &mut Emitted<Self>,
    ) {
        let id = written.transactional_id.clone();
        // Before the Complete record, in the same fsync.
        let before = self.unflushed.remove(&id).unwrap_or_default();
        let (record, still) = markers::markers_record(&id, before, appended, |tp| {
            flushed.iter().find(|(p, _)| p == tp).map(|(_, o)| *o)
        });
        out.records.extend(record);
        if still.len() > MARKERS_LISTED_MAX {
            let mut partitions: Vec<TopicPartition> = Vec::new();
            for m in &still {
                if !partitions.contains(&m.partition) {
                    partitions.push(m.partition.clone());
                }
            }
            out.effects.push(TxnEffect::Flush(partitions));
        }
        if !still.is_empty() {
            self.unflushed.insert(id.clone(), still);
        }
        let output = self.machine.markers_written(now_ms, &written);
        self.emit(output, out);
        self.completing.remove(&id);
        for h in self.held.remove(&id).unwrap_or_default() {
            self.feed(now_ms, h.token, h.request, out);
        }
    }
}

impl CoordinatorShard for TxnShard {
    type Input = TxnInput;
    type Reply = TxnReply;
    type Record = TxnRecord;
    type Effect = TxnEffect;

    fn handle(&mut self, now_ms: i64, token: ReplyToken, input: TxnInput, out: &mut Emitted<Self>) {
        match input {
            TxnInput::Request(request) => {
                let id = request_txn_id(&request);
                if self.completing.contains(id)
                    && self.held.get(id).map_or(0, Vec::len) < HELD_PER_ID_MAX
                {
                    self.held.entry(id.to_string()).or_default().push(Held {
                        token,
                        request,
                        since_ms: now_ms,
                    });
                    return;
                }
                self.feed(now_ms, token, request, out);
            }
            TxnInput::MarkersWritten {
                markers,
                appended,
                flushed,
            } => {
                self.markers_written(now_ms, markers, appended, &flushed, out);
                out.reply(token, TxnReply::Done);
            }
            TxnInput::Describe(ids) => {
                out.reply(token, TxnReply::Describe(self.machine.describe(&ids)));
            }
            TxnInput::List(request) => {
                let listed = self.machine.list(now_ms, &request);
                out.reply(token, TxnReply::List(listed));
            }
            TxnInput::FreshIds(ids) => {
                self.fresh_ids.extend(ids);
                out.reply(token, TxnReply::Done);
            }
        }
    }

    /// Held requests past [`HOLD_MAX_MS`] go to the machine (oldest first per id), then the
    /// machine's own timers.
    fn tick(&mut self, now_ms: i64, out: &mut Emitted<Self>) {
        let mut expired = Vec::new();
        self.held.retain(|_, requests| {
            let n = requests
                .iter()
                .take_while(|h| now_ms.saturating_sub(h.since_ms) >= HOLD_MAX_MS)
                .count();
            expired.extend(requests.drain(..n));
            !requests.is_empty()
        });
        for h in expired {
            self.feed(now_ms, h.token, h.request, out);
        }
        let output = self.machine.tick(now_ms);
        self.emit(output, out);
    }

    fn next_deadline(&self) -> Option<i64> {
        let hold_ends = self
            .held
            .values()
            .filter_map(|requests| requests.first())
            .map(|h| h.since_ms.saturating_add(HOLD_MAX_MS))
            .min();
        match (self.machine.next_deadline(), hold_ends) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A Markers record replaces what its id lists; every other record goes to the machine.
    fn replay(&mut self, record: TxnRecord) {
        match record {
            TxnRecord::Markers {
                transactional_id,
                markers,
            } => {
                if markers.is_empty() {
                    self.unflushed.remove(&transactional_id);
                } else {
                    self.unflushed.insert(transactional_id, markers);
                }
            }
            other => self.machine.replay(&other),
        }
    }

    /// `__transaction_state` holds no transactional records, so no marker resolves anything.
    fn replay_marker(&mut self, _marker: TxnMarker) {}

    /// Transactions found prepared get their markers again.
    fn loaded(&mut self, now_ms: i64, out: &mut Emitted<Self>) {
        let output = self.machine.loaded(now_ms);
        self.emit(output, out);
    }
}

fn request_txn_id(request: &TxnRequest) -> &str {
    match request {
        TxnRequest::InitProducerId(r) => &r.transactional_id,
        TxnRequest::AddPartitions(r) => &r.transactional_id,
        TxnRequest::AddOffsets(r) => &r.transactional_id,
        TxnRequest::AddPartitionsImplicit(r) => &r.transactional_id,
        TxnRequest::EndTxn(r) => &r.transactional_id,
    }
}

fn set_fresh_id(request: &mut TxnRequest, id: ProducerId) {
    match request {
        TxnRequest::InitProducerId(r) => r.fresh_producer_id = Some(id),
        TxnRequest::EndTxn(r) => r.fresh_producer_id = Some(id),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::ProducerEpoch;
    use crate::txn_coordinator::{
        AddPartitionsRequest, EndTxnRequest, InitProducerIdRequest, TransactionResult,
        TwoPhaseCommit,
    };

    struct Driver {
        shard: TxnShard,
        token: u64,
        now: i64,
    }

    impl Driver {
        fn new() -> Self {
            let mut shard = TxnShard::new(TxnConfig::default(), 7);
            let mut out = Emitted::default();
            shard.loaded(0, &mut out);
            Self {
                shard,
                token: 0,
                now: 1_000,
            }
        }

        fn send(&mut self, input: TxnInput) -> (ReplyToken, Emitted<TxnShard>) {
            self.token += 1;
            let token = ReplyToken(self.token);
            let mut out = Emitted::default();
            self.shard.handle(self.now, token, input, &mut out);
            (token, out)
        }

        fn request(&mut self, request: TxnRequest) -> (ReplyToken, Emitted<TxnShard>) {
            self.send(TxnInput::Request(request))
        }

        fn init(&mut self, id: &str) -> (ProducerId, ProducerEpoch) {
            let (token, out) = self.request(TxnRequest::InitProducerId(InitProducerIdRequest {
                transactional_id: id.to_string(),
                txn_timeout_ms: 60_000,
                producer_id: ProducerId(-1),
                producer_epoch: ProducerEpoch(-1),
                transaction_version_supported: true,
                fresh_producer_id: None,
                two_phase_commit: TwoPhaseCommit::Disabled,
            }));
            match &out.replies[..] {
                [(t, TxnReply::Response(TxnResponse::InitProducerId(r)))] if *t == token => {
                    assert_eq!(r.error_code, crate::group_coordinator::ErrorCode::NONE);
                    (r.producer_id, r.producer_epoch)
                }
                other => panic!("{other:?}"),
            }
        }

        fn end(
            &mut self,
            id: &str,
            pid: ProducerId,
            epoch: ProducerEpoch,
        ) -> (ReplyToken, Emitted<TxnShard>) {
            self.request(TxnRequest::EndTxn(EndTxnRequest {
                transactional_id: id.to_string(),
                producer_id: pid,
                producer_epoch: epoch,
                committed: true,
                version: 4,
                fresh_producer_id: None,
            }))
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    /// A committing transaction: its markers asked for, with what is needed to report them.
    fn committing(d: &mut Driver, id: &str) -> (ProducerId, ProducerEpoch, WriteMarkers) {
        d.send(TxnInput::FreshIds(vec![ProducerId(100)]));
        let (pid, epoch) = d.init(id);
        assert_eq!(pid, ProducerId(100), "the fresh id fed to the shard");
        d.request(TxnRequest::AddPartitions(AddPartitionsRequest {
            transactional_id: id.to_string(),
            producer_id: pid,
            producer_epoch: epoch,
            partitions: vec![tp(0)],
            verify_only: false,
        }));
        let (_, out) = d.end(id, pid, epoch);
        let markers = match &out.effects[..] {
            [TxnEffect::WriteMarkers { markers, listed }] => {
                assert!(listed.is_empty());
                markers.clone()
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(markers.result, TransactionResult::Commit);
        (pid, epoch, markers)
    }

    #[test]
    fn a_request_during_its_markers_is_held_and_answered_when_they_are_written() {
        let mut d = Driver::new();
        let (pid, epoch, markers) = committing(&mut d, "t");
        // The next transaction's add arrives while the markers are being written.
        let (held, out) = d.request(TxnRequest::AddPartitions(AddPartitionsRequest {
            transactional_id: "t".to_string(),
            producer_id: pid,
            producer_epoch: epoch,
            partitions: vec![tp(1)],
            verify_only: false,
        }));
        assert!(
            out.replies.is_empty(),
            "held, not answered: {:?}",
            out.replies
        );
        assert_eq!(d.shard.next_deadline(), Some(d.now + HOLD_MAX_MS));
        let appended = vec![PendingMarker {
            partition: tp(0),
            offset: 5,
            producer_id: markers.producer_id,
            producer_epoch: markers.producer_epoch,
            result: markers.result,
        }];
        let (_, out) = d.send(TxnInput::MarkersWritten {
            markers,
            appended: appended.clone(),
            flushed: vec![(tp(0), 5)],
        });
        // The marker at 5 is not below the flushed offset 5: listed, before the Complete.
        let listed = out
            .records
            .iter()
            .position(|r| matches!(r, TxnRecord::Markers { markers, .. } if *markers == appended));
        assert_eq!(listed, Some(0), "{:?}", out.records);
        assert!(out.records.len() > 1, "the completion follows the list");
        assert!(out
            .replies
            .iter()
            .any(|(t, r)| *t == held
                && matches!(r, TxnReply::Response(r) if r.error_code() == crate::group_coordinator::ErrorCode::NONE)));
        assert_eq!(d.shard.listed_markers().get("t"), Some(&appended));
    }

    #[test]
    fn a_held_request_is_answered_by_the_machine_after_the_hold() {
        let mut d = Driver::new();
        let (pid, epoch, _markers) = committing(&mut d, "t");
        let (held, out) = d.end("t", pid, epoch);
        assert!(out.replies.is_empty());
        let mut out = Emitted::default();
        d.shard.tick(d.now + HOLD_MAX_MS - 1, &mut out);
        assert!(out.replies.is_empty(), "still held");
        d.shard.tick(d.now + HOLD_MAX_MS, &mut out);
        let [(t, TxnReply::Response(r))] = &out.replies[..] else {
            panic!("{:?}", out.replies);
        };
        assert_eq!(*t, held);
        assert_eq!(
            r.error_code(),
            crate::txn_coordinator::CONCURRENT_TRANSACTIONS
        );
    }

    #[test]
    fn a_stopped_machine_is_reported_once() {
        let mut d = Driver::new();
        d.shard
            .machine
            .flag(crate::txn_coordinator::TxnViolation::Unstorable {
                transactional_id: "t".to_string(),
                state: crate::txn_coordinator::TransactionState::Dead,
            });
        let init = || {
            TxnInput::Request(TxnRequest::InitProducerId(InitProducerIdRequest {
                transactional_id: "t".to_string(),
                txn_timeout_ms: 60_000,
                producer_id: ProducerId(-1),
                producer_epoch: ProducerEpoch(-1),
                transaction_version_supported: true,
                fresh_producer_id: None,
                two_phase_commit: TwoPhaseCommit::Disabled,
            }))
        };
        let (_, out) = d.send(init());
        let stopped: Vec<_> = out
            .effects
            .iter()
            .filter(|e| matches!(e, TxnEffect::Stopped(_)))
            .collect();
        assert_eq!(stopped.len(), 1, "{:?}", out.effects);
        let (_, out) = d.send(init());
        assert!(out
            .effects
            .iter()
            .all(|e| !matches!(e, TxnEffect::Stopped(_))));
    }

    #[test]
    fn fresh_ids_are_asked_for_the_requests_that_may_need_them() {
        let d = Driver::new();
        let init = TxnInput::Request(TxnRequest::InitProducerId(InitProducerIdRequest {
            transactional_id: "new".to_string(),
            txn_timeout_ms: 60_000,
            producer_id: ProducerId(-1),
            producer_epoch: ProducerEpoch(-1),
            transaction_version_supported: true,
            fresh_producer_id: None,
            two_phase_commit: TwoPhaseCommit::Disabled,
        }));
        let describe = TxnInput::Describe(vec!["new".to_string()]);
        assert_eq!(
            d.shard.fresh_ids_wanted([&init, &init, &describe]),
            2 + FRESH_IDS_RESERVE
        );
        let mut d = d;
        d.send(TxnInput::FreshIds((0..10).map(ProducerId).collect()));
        assert_eq!(d.shard.fresh_ids_wanted([&init]), 0);
    }

    #[test]
    fn a_replayed_markers_list_is_what_the_last_markers_record_says() {
        let mut shard = TxnShard::new(TxnConfig::default(), 1);
        let m = PendingMarker {
            partition: tp(0),
            offset: 3,
            producer_id: ProducerId(1),
            producer_epoch: ProducerEpoch(0),
            result: TransactionResult::Abort,
        };
        let record = |markers: Vec<PendingMarker>| TxnRecord::Markers {
            transactional_id: "t".to_string(),
            markers,
        };
        for r in [
            record(vec![m.clone()]),
            record(Vec::new()),
            record(vec![m.clone()]),
        ] {
            let (k, v) = ShardRecord::encode(&r).unwrap();
            shard.replay(<TxnRecord as ShardRecord>::decode(&k, v.as_deref()).unwrap());
        }
        assert_eq!(shard.listed_markers().get("t"), Some(&vec![m]));
        let cleared = shard.clear_listed_markers();
        assert_eq!(cleared, vec![record(Vec::new())]);
        assert!(shard.listed_markers().is_empty());
    }
}
