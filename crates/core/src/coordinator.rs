//! What every coordinator gives the broker's one coordinator runtime.
//!
//! A coordinator (the group coordinator with its share groups, the transaction coordinator,
//! the share-state coordinator) keeps its state in one internal topic. Its sans-IO machine is a
//! [`CoordinatorShard`]: it handles one input at a time, given as an argument with the time,
//! and says what to persist and what to answer; it rebuilds the same state by replaying its
//! records and the transaction markers on its topic. The broker's runtime
//! (`shoal_broker::coordinators::runtime`) drives every shard the same way: load by replay,
//! take the queued inputs in order, append the records one batch per partition, one
//! group-commit fsync, then deliver the replies; on a failed append it answers nothing of that
//! pass and rebuilds the shard from the log. What differs between coordinators is in their
//! shard and record types, not in how they are driven.
//!
//! Invariants a shard must keep: the records it emits, replayed in order after the records
//! before them, rebuild exactly the state it is in; a reply never depends on a record of a
//! later pass (the runtime delivers a pass's replies only once its records are durable).

pub use crate::group_coordinator::ReplyToken;

/// A record's encoded key and value (None: a tombstone).
pub type EncodedRecord = (Vec<u8>, Option<Vec<u8>>);

/// A COMMIT or ABORT marker on partition `partition` of a coordinator's topic: the end of a
/// transaction that wrote records there (transactional offset commits, KIP-1289 stagings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnMarker {
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
}

/// A record that cannot be encoded or decoded, with what was wrong for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordError {}

/// How the runtime writes a record: what its batch is. Records of one pass that go to the
/// same partition with the same framing, one after another, share a batch; a marker is a
/// control batch of its own. The runtime appends them in the order emitted, so the log holds
/// them in the order the shard applied them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A plain batch (no producer).
    Plain,
    /// The producer's transactional batch: its COMMIT or ABORT marker on the partition ends it
    /// (KIP-1289 stagings). The runtime records it in the partition's producer state, so the
    /// partition's last stable offset stays below it until the marker.
    Transactional {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// The record is this transaction marker, written as a COMMIT or ABORT control batch with
    /// the coordinator epoch of the transaction coordinator that decided it
    /// ([`ShardRecord::encode`] is not called for it).
    Marker {
        marker: TxnMarker,
        coordinator_epoch: i32,
    },
}

/// A record of a coordinator's internal topic.
pub trait ShardRecord: Sized {
    /// The partition of the topic (of `partitions`, at least 1) this record goes to.
    fn partition(&self, partitions: u32) -> u32;

    /// The record's key and value in the topic's byte layout.
    ///
    /// # Errors
    /// The record cannot be represented (a string longer than the format allows).
    fn encode(&self) -> Result<EncodedRecord, RecordError>;

    /// Reads a record back.
    ///
    /// # Errors
    /// The bytes are not a record of this topic (malformed, unknown type or version).
    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError>;

    /// How the record is written ([`Framing::Plain`] unless the coordinator writes
    /// transactional batches or markers).
    fn framing(&self) -> Framing {
        Framing::Plain
    }

    /// A record read back from a batch of `framing` (a transactional batch's producer), for
    /// a coordinator whose replay needs it; the record as decoded otherwise.
    #[must_use]
    fn with_framing(self, _framing: Framing) -> Self {
        self
    }
}

/// What a shard produced in one step, for the runtime to persist and then deliver.
pub struct Emitted<S: CoordinatorShard + ?Sized> {
    /// Records to append before any of this pass's replies is delivered.
    pub records: Vec<S::Record>,
    /// Replies to inputs of this pass or of earlier ones (a reply may be deferred).
    pub replies: Vec<(ReplyToken, S::Reply)>,
    /// Work for the broker once the records are durable (transaction markers to write).
    pub effects: Vec<S::Effect>,
}

impl<S: CoordinatorShard + ?Sized> Default for Emitted<S> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            replies: Vec::new(),
            effects: Vec::new(),
        }
    }
}

impl<S: CoordinatorShard + ?Sized> Emitted<S> {
    /// Whether there is nothing to persist, deliver or do.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.replies.is_empty() && self.effects.is_empty()
    }

    pub fn reply(&mut self, token: ReplyToken, reply: S::Reply) {
        self.replies.push((token, reply));
    }
}

/// A coordinator's sans-IO machine, as the runtime drives it.
pub trait CoordinatorShard {
    /// A request or an event for the shard.
    type Input;
    /// The answer to an input.
    type Reply;
    /// A record of the shard's topic.
    type Record: ShardRecord;
    /// Work the broker does after a pass is durable (the shard learns its outcome through a
    /// later input).
    type Effect;

    /// Handles one input. Its reply goes under `token`, now or in a later step.
    fn handle(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        input: Self::Input,
        out: &mut Emitted<Self>,
    );

    /// Lets time pass: expirations, timeouts, deferred replies whose wait is over.
    fn tick(&mut self, now_ms: i64, out: &mut Emitted<Self>);

    /// When [`CoordinatorShard::tick`] has something to do next, if ever.
    fn next_deadline(&self) -> Option<i64>;

    /// Applies one record read back from the topic, in log order.
    fn replay(&mut self, record: Self::Record);

    /// Applies a transaction marker on the topic: read back in log order on load, or just
    /// appended (the same function, so that replayed state equals live state).
    fn replay_marker(&mut self, marker: TxnMarker);

    /// Called once after the load's replay: timers start from `now_ms`, and the shard may
    /// emit records or effects to resume work (a transaction found prepared).
    fn loaded(&mut self, now_ms: i64, out: &mut Emitted<Self>);

    /// Where a record of the shard's topic is: `record` (None for a control batch) at
    /// `offset` of `partition`. The runtime calls it on load for every record and marker
    /// before replaying it, and after an append, once the pass is durable and before its
    /// replies are delivered, for every record the pass emitted. For a shard that keeps
    /// offsets (the share-state coordinator prunes its topic up to the snapshots it still
    /// needs); nothing by default.
    fn landed(&mut self, _partition: i32, _offset: i64, _record: Option<&Self::Record>) {}
}

/// The runtime's order of work for one coordinator, without I/O: the broker's async runtime
/// and the simulator both drive a shard through it, so the order they test is the order that
/// ships. After a load, [`Passes::resume`] makes what the load emitted durable first. A pass
/// is [`Passes::pass`] (the inputs fed by the host, then the queued inputs in
/// queue order, each under a fresh token, then a tick), the caller's append of the pass's
/// records, then [`Passes::durable`] (the replies for their waiters, and the effects) or
/// [`Passes::failed`] (every waiter dropped, deferred ones included, for the caller to rebuild
/// the shard from the log and [`Passes::replace`] it).
///
/// `W` is whatever stands for a waiting caller (a channel, a simulated client's address).
pub struct Passes<S: CoordinatorShard, W> {
    shard: S,
    next_token: u64,
    waiting: std::collections::BTreeMap<ReplyToken, W>,
    /// Records held back one pass: only ever filled by an injected fault
    /// ([`Fault::ReplyBeforeDurable`](crate::faults::Fault::ReplyBeforeDurable) and the two
    /// after it).
    late: Vec<S::Record>,
}

/// One input of a pass: for the shard, or a transaction marker to replay.
pub enum Queued<S: CoordinatorShard, W> {
    /// An input and who waits for its reply (None: nobody).
    Input(S::Input, Option<W>),
    /// A marker appended to the shard's topic; `W` is told once the pass is durable.
    Marker(TxnMarker, Option<W>),
}

/// What a durable pass delivers.
pub struct Delivered<S: CoordinatorShard, W> {
    /// Replies to their waiters.
    pub replies: Vec<(W, S::Reply)>,
    /// Waiters of the pass's markers, to be told they are applied.
    pub markers: Vec<W>,
    /// The shard's effects, in order.
    pub effects: Vec<S::Effect>,
}

/// A pass's output before its records are durable.
pub struct Pending<S: CoordinatorShard, W> {
    /// Records to append (one batch per partition) before anything else of the pass.
    pub records: Vec<S::Record>,
    replies: Vec<(ReplyToken, S::Reply)>,
    effects: Vec<S::Effect>,
    marker_waiters: Vec<W>,
}

impl<S: CoordinatorShard, W> Passes<S, W> {
    /// Drives `shard`, already loaded (replayed, then [`CoordinatorShard::loaded`]).
    pub fn new(shard: S) -> Self {
        Self {
            shard,
            next_token: 0,
            waiting: std::collections::BTreeMap::new(),
            late: Vec::new(),
        }
    }

    pub fn shard(&self) -> &S {
        &self.shard
    }

    /// The shard, for the caller's [`CoordinatorShard::landed`] reports.
    pub fn shard_mut(&mut self) -> &mut S {
        &mut self.shard
    }

    /// Replaces the shard (a reload after a failed pass).
    pub fn replace(&mut self, shard: S) {
        self.shard = shard;
        self.late.clear();
    }

    fn token(&mut self) -> ReplyToken {
        self.next_token += 1;
        ReplyToken(self.next_token)
    }

    /// The first pass after a load: only what [`CoordinatorShard::loaded`] emitted (and what
    /// the host added before it), made durable before any input is taken or time passes.
    pub fn resume(&mut self, loaded: Emitted<S>) -> Pending<S, W> {
        Pending {
            records: loaded.records,
            replies: loaded.replies,
            effects: loaded.effects,
            marker_waiters: Vec::new(),
        }
    }

    /// Runs one pass at `now_ms`: `fed` first, then `queued` in order, then a tick.
    pub fn pass(
        &mut self,
        now_ms: i64,
        fed: Vec<S::Input>,
        queued: Vec<Queued<S, W>>,
    ) -> Pending<S, W> {
        let mut out = Emitted::default();
        for input in fed {
            let t = self.token();
            self.shard.handle(now_ms, t, input, &mut out);
        }
        let mut marker_waiters = Vec::new();
        for q in queued {
            match q {
                Queued::Input(input, waiter) => {
                    let t = self.token();
                    if let Some(w) = waiter {
                        self.waiting.insert(t, w);
                    }
                    self.shard.handle(now_ms, t, input, &mut out);
                }
                Queued::Marker(marker, waiter) => {
                    self.shard.replay_marker(marker);
                    marker_waiters.extend(waiter);
                }
            }
        }
        self.shard.tick(now_ms, &mut out);
        self.inject_faults(&mut out.records);
        Pending {
            records: out.records,
            replies: out.replies,
            effects: out.effects,
            marker_waiters,
        }
    }

    /// The injected faults of the order of work (never compiled in outside the simulator):
    /// records this pass holds back for the next one, whose replies it delivers anyway; the
    /// records held back by the previous pass go first.
    fn inject_faults(&mut self, records: &mut Vec<S::Record>) {
        use crate::faults::{active, Fault};
        let all = active(Fault::ReplyBeforeDurable);
        let stagings = active(Fault::StageBeforePersist);
        let markers = active(Fault::MarkerBeforeAppend);
        if !(all || stagings || markers) {
            return;
        }
        let (held, kept): (Vec<_>, Vec<_>) =
            std::mem::take(records)
                .into_iter()
                .partition(|r| match r.framing() {
                    _ if all => true,
                    Framing::Transactional { .. } => stagings,
                    Framing::Marker { .. } => markers,
                    Framing::Plain => false,
                });
        *records = std::mem::replace(&mut self.late, held);
        records.extend(kept);
    }

    /// The pass's records are durable: its replies go to their waiters (a reply may answer an
    /// input of an earlier pass) and its effects may run.
    pub fn durable(&mut self, pending: Pending<S, W>) -> Delivered<S, W> {
        let replies = pending
            .replies
            .into_iter()
            .filter_map(|(t, reply)| self.waiting.remove(&t).map(|w| (w, reply)))
            .collect();
        Delivered {
            replies,
            markers: pending.marker_waiters,
            effects: pending.effects,
        }
    }

    /// The pass's append failed: nothing of it is answered and every waiter is dropped (their
    /// state is about to be rebuilt from what is durable); returns them so the caller can
    /// tell them.
    pub fn failed(&mut self, pending: Pending<S, W>) -> Vec<W> {
        let mut dropped: Vec<W> = std::mem::take(&mut self.waiting).into_values().collect();
        dropped.extend(pending.marker_waiters);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers an input `n` with `n` at once, or, for `0`, at the next tick after another
    /// input (a deferred reply).
    #[derive(Default)]
    struct Echo {
        deferred: Option<ReplyToken>,
        records: usize,
    }

    #[derive(Debug)]
    struct Rec;

    impl ShardRecord for Rec {
        fn partition(&self, _partitions: u32) -> u32 {
            0
        }
        fn encode(&self) -> Result<EncodedRecord, RecordError> {
            Ok((Vec::new(), None))
        }
        fn decode(_key: &[u8], _value: Option<&[u8]>) -> Result<Self, RecordError> {
            Ok(Rec)
        }
    }

    impl CoordinatorShard for Echo {
        type Input = u32;
        type Reply = u32;
        type Record = Rec;
        type Effect = u32;

        fn handle(&mut self, _now_ms: i64, token: ReplyToken, input: u32, out: &mut Emitted<Self>) {
            out.records.push(Rec);
            self.records += 1;
            if input == 0 {
                self.deferred = Some(token);
            } else {
                out.reply(token, input);
                out.effects.push(input);
            }
        }
        fn tick(&mut self, _now_ms: i64, out: &mut Emitted<Self>) {
            if self.records > 1 {
                if let Some(t) = self.deferred.take() {
                    out.reply(t, 0);
                }
            }
        }
        fn next_deadline(&self) -> Option<i64> {
            None
        }
        fn replay(&mut self, _record: Rec) {}
        fn replay_marker(&mut self, _marker: TxnMarker) {}
        fn loaded(&mut self, _now_ms: i64, _out: &mut Emitted<Self>) {}
    }

    #[test]
    fn replies_wait_for_durability_and_find_their_waiters_across_passes() {
        let mut passes: Passes<Echo, &str> = Passes::new(Echo::default());
        let pending = passes.pass(0, Vec::new(), vec![Queued::Input(0, Some("deferred"))]);
        assert_eq!(pending.records.len(), 1);
        let delivered = passes.durable(pending);
        assert!(delivered.replies.is_empty(), "deferred to a later pass");
        let pending = passes.pass(
            1,
            vec![9],
            vec![Queued::Input(5, Some("five")), Queued::Input(6, None)],
        );
        let delivered = passes.durable(pending);
        // The fed input has no waiter; the deferred reply reaches its waiter after the pass
        // that released it; effects keep their order.
        assert_eq!(delivered.replies, vec![("five", 5), ("deferred", 0)]);
        assert_eq!(delivered.effects, vec![9, 5, 6]);
    }

    #[test]
    fn a_failed_pass_drops_every_waiter_and_delivers_nothing() {
        let mut passes: Passes<Echo, &str> = Passes::new(Echo::default());
        let pending = passes.pass(0, Vec::new(), vec![Queued::Input(0, Some("deferred"))]);
        passes.durable(pending);
        let marker = TxnMarker {
            partition: 0,
            producer_id: 1,
            producer_epoch: 0,
            commit: true,
        };
        let pending = passes.pass(
            1,
            Vec::new(),
            vec![
                Queued::Input(5, Some("five")),
                Queued::Marker(marker, Some("marker")),
            ],
        );
        let mut dropped = passes.failed(pending);
        dropped.sort_unstable();
        assert_eq!(dropped, vec!["deferred", "five", "marker"]);
        // A later pass has nobody left to answer from before.
        passes.replace(Echo::default());
        let pending = passes.pass(2, Vec::new(), vec![Queued::Input(0, None)]);
        assert!(passes.durable(pending).replies.is_empty());
    }
}
