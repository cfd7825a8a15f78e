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
}
