//! The checker: a reference model of who may hold what, and the invariants of issue 13,
//! checked after every step.
//!
//! The model is fed what the broker answered and did ([`Observed`]) and reads the simulated
//! disk itself; it never asks the share partitions what they think, except to compare with
//! what it derived. Invariants:
//! - **one holder**: an offset is acquired only when no other member's unexpired lock on it
//!   stands (no crash, release, acknowledgement, staging or session end since) and no
//!   answered staging of it is unresolved (no marker of its producer after it in the log);
//! - **TX_PENDING moves only by its own transaction**: a record staged by producer P at epoch
//!   E changes state only in a step that applied a marker of P with an epoch at or above E,
//!   to ACKNOWLEDGED/ARCHIVED on COMMIT and AVAILABLE/ARCHIVED on ABORT;
//! - **no TX_PENDING outlives its transaction**: once the coordinator holds P's transaction
//!   complete (or a later one going), nothing P staged before is still TX_PENDING (a
//!   prepared transaction kept by a new incarnation stays the same one at a later epoch);
//! - **output iff acknowledgement**: an input record has at most one output visible to
//!   read_committed; an output is visible only while its input is TX_PENDING in that
//!   transaction or ACKNOWLEDGED; an ACKNOWLEDGED input has a visible output unless its
//!   transaction's markers are still being written (PrepareCommit);
//! - **delivery counts** never exceed `share.delivery.count.limit`;
//! - **replay equals live** (at every crash): the coordinator, group and share-state
//!   stores rebuilt from the logs equal the live ones, and each live share partition's
//!   persisted view equals the replayed one;
//! - **a registered decision stands**: the outputs of a transaction whose token a
//!   two-phase-commit worker registered (decided to commit) are committed, never aborted,
//!   whatever crashed in between;
//! - **dead letters** (with a dead-letter queue, KIP-1191): at most one visible per input
//!   (read_committed: outside a transaction, or committed with one), never beside a committed
//!   output, never for an input a consumer may still get (so none of an aborted transaction)
//!   nor for a good input before its delivery limit; the input is ARCHIVED, ARCHIVING only
//!   while the broker will scan before writing again, or TX_PENDING in the transaction that
//!   committed the dead letter while its markers are being written; a transaction that
//!   carried the dead letter archives at its COMMIT (never ARCHIVING);
//! - **at quiescence**: every input record has exactly one committed output and is
//!   acknowledged, or has none and is archived for a reason the model saw (a committed REJECT,
//!   a plain consumer's REJECT, the delivery limit), or is still available; with a dead-letter
//!   queue, every poison input has exactly one visible dead letter and no output, and every
//!   other input none, except one archived without an output (which for an input never
//!   rejected means at the delivery limit): exactly one.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::share_partition::{AcknowledgeType, RecordState, SharePartition};
use shoal_core::txn_coordinator::TransactionState;

use crate::broker::{
    dead_letter_log, expand_store, expand_write, share_key, Broker, Layout, Observed, INPUT,
    OUTPUT, SHARE_STATE,
};
use crate::client::parse_output_key;
use crate::disk::{log_name, Body, Disk};

type Offset = (i32, i64);

#[derive(Clone, Debug)]
struct MemberHold {
    member: String,
    deadline_ms: i64,
}

#[derive(Clone, Debug)]
struct TxHold {
    producer_id: i64,
    producer_epoch: i16,
    ack: i8,
    /// The marker (log, offset) that resolved it, once one was appended.
    ended: Option<(String, i64, bool)>,
}

#[derive(Default)]
pub struct Model {
    holds: BTreeMap<Offset, MemberHold>,
    tx_holds: BTreeMap<Offset, TxHold>,
    /// Offsets a plain consumer's REJECT archived.
    rejected: BTreeSet<Offset>,
    /// Offsets a committed transactional REJECT archived.
    rejected_in_txn: BTreeSet<Offset>,
    max_delivery: BTreeMap<Offset, i16>,
    /// Tokens (producer id, epoch) two-phase-commit workers registered: decided commits.
    registered: BTreeSet<(i64, i16)>,
    /// Prepared transactions kept by an InitProducerId (KIP-939), by producer id: the epoch
    /// their records were written with and the epoch the coordinator holds them at now.
    kept: BTreeMap<i64, (i16, i16)>,
    /// Keeps answered in a step that a crash cut, by producer id (as `kept`): the answer died
    /// with the broker, and the keep's record may have died too (a mid-step crash undoes the
    /// fsyncs after a random point, and the coordinator answers only once its record is
    /// durable, as Kafka's answers from the append's callback). Which one happened shows when
    /// the broker restarts from the logs ([`Model::restarted`]).
    kept_unsure: BTreeMap<i64, (i16, i16)>,
}

/// A record's state as the live share partition has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Below the share-partition start offset: ACKNOWLEDGED or ARCHIVED, no longer tracked.
    Done,
    State(RecordState, Option<(i64, i16)>),
    /// The share partition is not loaded.
    Unknown,
}

pub fn seen(sp: Option<&SharePartition>, offset: i64) -> Seen {
    let Some(sp) = sp else {
        return Seen::Unknown;
    };
    if offset < sp.start_offset() {
        return Seen::Done;
    }
    for r in sp.ranges() {
        if r.first_offset <= offset && offset <= r.last_offset {
            return Seen::State(
                r.state,
                r.staged_txn.map(|t| (t.producer_id, t.producer_epoch)),
            );
        }
    }
    Seen::State(RecordState::Available, None)
}

/// Every TX_PENDING offset of the live share partitions, with its staging: producer id,
/// epoch, and whether the transaction carries its dead letter.
pub fn tx_pending(broker: &Broker) -> BTreeMap<Offset, (i64, i16, bool)> {
    let mut out = BTreeMap::new();
    for (key, sp) in broker.share_partitions() {
        for r in sp.ranges() {
            if r.state != RecordState::TxPending {
                continue;
            }
            let Some(t) = r.staged_txn else { continue };
            for o in r.first_offset..=r.last_offset {
                out.insert(
                    (key.partition, o),
                    (t.producer_id, t.producer_epoch, t.dead_lettered),
                );
            }
        }
    }
    out
}

/// Outputs visible to read_committed, by the input they came from: (producer id, log).
pub fn visible_outputs(disk: &Disk, layout: &Layout) -> BTreeMap<Offset, Vec<(i64, String)>> {
    let mut visible: BTreeMap<Offset, Vec<(i64, String)>> = BTreeMap::new();
    for p in 0..layout.output_partitions {
        let name = log_name(OUTPUT, p);
        let mut open: BTreeMap<i64, Vec<Offset>> = BTreeMap::new();
        for b in disk.log(&name).batches() {
            match &b.body {
                Body::Data(records) => {
                    let inputs = records.iter().filter_map(|r| parse_output_key(&r.key));
                    open.entry(b.producer_id).or_default().extend(inputs);
                }
                Body::Control { commit, .. } => {
                    let inputs = open.remove(&b.producer_id).unwrap_or_default();
                    if *commit {
                        for x in inputs {
                            visible
                                .entry(x)
                                .or_default()
                                .push((b.producer_id, name.clone()));
                        }
                    }
                }
            }
        }
    }
    visible
}

/// Dead letters visible to read_committed, by the input they stand for: the producer of
/// each (-1 for one written outside a transaction).
pub fn visible_dead_letters(disk: &Disk) -> BTreeMap<Offset, Vec<i64>> {
    let mut visible: BTreeMap<Offset, Vec<i64>> = BTreeMap::new();
    let mut open: BTreeMap<i64, Vec<Offset>> = BTreeMap::new();
    for b in disk.log(&dead_letter_log()).batches() {
        match &b.body {
            Body::Data(records) => {
                let inputs = records.iter().filter_map(|r| parse_output_key(&r.key));
                if b.transactional {
                    open.entry(b.producer_id).or_default().extend(inputs);
                } else {
                    for x in inputs {
                        visible.entry(x).or_default().push(-1);
                    }
                }
            }
            Body::Control { commit, .. } => {
                let inputs = open.remove(&b.producer_id).unwrap_or_default();
                if *commit {
                    for x in inputs {
                        visible.entry(x).or_default().push(b.producer_id);
                    }
                }
            }
        }
    }
    visible
}

fn state_partition_of(layout: &Layout, partition: i32) -> i32 {
    shoal_core::share_coordinator::state_partition(&share_key(partition), layout.state_partitions)
}

impl Model {
    /// A two-phase-commit worker registered `token`: its transaction must commit.
    pub fn registered(&mut self, token: (i64, i16)) {
        self.registered.insert(token);
    }

    /// The coordinator answered that it kept producer `producer_id`'s transaction, which it
    /// names by `ongoing_epoch`, and bumped the producer to `epoch`.
    pub fn kept(&mut self, producer_id: i64, ongoing_epoch: i16, epoch: i16) {
        let data = match self.kept.get(&producer_id) {
            // Kept again: still the transaction first kept.
            Some(&(data, current)) if current == ongoing_epoch => data,
            _ => ongoing_epoch,
        };
        self.kept.insert(producer_id, (data, epoch));
    }

    /// Every output batch of a registered transaction is ended by a COMMIT marker of its
    /// producer, and not by an ABORT (nor left open, once quiet).
    fn check_decisions(&self, disk: &Disk, layout: &Layout) -> Result<(), String> {
        for p in 0..layout.output_partitions {
            let name = log_name(OUTPUT, p);
            let mut open: BTreeMap<i64, (i16, i64)> = BTreeMap::new();
            for b in disk.log(&name).batches() {
                match &b.body {
                    Body::Data(_)
                        if self.registered.contains(&(b.producer_id, b.producer_epoch)) =>
                    {
                        open.entry(b.producer_id)
                            .or_insert((b.producer_epoch, b.base_offset));
                    }
                    Body::Data(_) => {}
                    Body::Control { commit, .. } => {
                        if let Some((epoch, offset)) = open.remove(&b.producer_id) {
                            if !commit {
                                return Err(format!(
                                    "{name}@{offset}: producer {}'s transaction at epoch {epoch} was registered to commit, but was aborted (marker at {})",
                                    b.producer_id, b.base_offset
                                ));
                            }
                        }
                    }
                }
            }
            if let Some((pid, (epoch, offset))) = open.into_iter().next() {
                return Err(format!(
                    "{name}@{offset}: producer {pid}'s transaction at epoch {epoch} was registered to commit, but is still open at quiescence"
                ));
            }
        }
        Ok(())
    }

    /// A keep answered in a step a crash cut short (the answer never went out): it happened
    /// only if its record survived the crash, which [`Model::restarted`] tells.
    pub fn kept_if_durable(&mut self, producer_id: i64, ongoing_epoch: i16, epoch: i16) {
        self.kept_unsure.insert(producer_id, (ongoing_epoch, epoch));
    }

    /// The broker crashed: every acquisition lock is gone.
    pub fn crashed(&mut self) {
        self.holds.clear();
    }

    /// The broker restarted from its logs: a keep whose answer died in the crash happened
    /// when the coordinator replayed its record, that is when it holds the producer's
    /// transaction Ongoing at the epoch the keep bumped to. Otherwise the record was lost,
    /// the keep never happened, and the transaction is still named by its earlier epoch.
    pub fn restarted(&mut self, broker: &Broker) {
        let coordinator = broker.txn().durable_state();
        for (producer_id, (ongoing_epoch, epoch)) in std::mem::take(&mut self.kept_unsure) {
            let survived = coordinator.values().any(|v| {
                v.producer_id.0 == producer_id
                    && v.state == TransactionState::Ongoing
                    && v.producer_epoch.0 == epoch
            });
            if survived {
                self.kept(producer_id, ongoing_epoch, epoch);
            }
        }
    }

    fn tx_hold_active(&self, h: &TxHold, disk: &Disk) -> bool {
        match &h.ended {
            None => true,
            // A marker lost in a crash (and not yet rewritten) does not end it.
            Some((log, offset, _)) => disk.log(log).end_offset() <= *offset,
        }
    }

    /// Applies the broker's observations of one step; returns the first violation.
    pub fn observe(
        &mut self,
        now: i64,
        layout: &Layout,
        disk: &Disk,
        observed: &[Observed],
    ) -> Result<(), String> {
        for o in observed {
            match o {
                Observed::Acquired {
                    member,
                    partition,
                    first,
                    last,
                    delivery_count,
                    deadline_ms,
                } => {
                    for offset in *first..=*last {
                        let x = (*partition, offset);
                        if let Some(h) = self.holds.get(&x) {
                            if h.member != *member && h.deadline_ms > now {
                                return Err(format!(
                                    "{INPUT}-{partition}@{offset} acquired by {member} while {} holds its lock until {}",
                                    h.member, h.deadline_ms
                                ));
                            }
                        }
                        if let Some(h) = self.tx_holds.get(&x) {
                            if self.tx_hold_active(h, disk) {
                                return Err(format!(
                                    "{INPUT}-{partition}@{offset} acquired by {member} while staged in producer {}'s transaction (epoch {})",
                                    h.producer_id, h.producer_epoch
                                ));
                            }
                        }
                        if *delivery_count > layout.share.delivery_count_limit {
                            return Err(format!(
                                "{INPUT}-{partition}@{offset} delivered {delivery_count} times, limit {}",
                                layout.share.delivery_count_limit
                            ));
                        }
                        let max = self.max_delivery.entry(x).or_insert(0);
                        *max = (*max).max(*delivery_count);
                        self.holds.insert(
                            x,
                            MemberHold {
                                member: member.clone(),
                                deadline_ms: *deadline_ms,
                            },
                        );
                    }
                }
                Observed::Acked { partition, batch } => {
                    for offset in batch.first_offset..=batch.last_offset {
                        let x = (*partition, offset);
                        self.holds.remove(&x);
                        if batch.ack_types.first() == Some(&AcknowledgeType::Reject.id()) {
                            self.rejected.insert(x);
                        }
                    }
                }
                Observed::Released { member } => {
                    self.holds.retain(|_, h| h.member != *member);
                }
                Observed::Staged {
                    producer_id,
                    producer_epoch,
                    ranges,
                } => {
                    for (p, b) in ranges {
                        for offset in b.first_offset..=b.last_offset {
                            let x = (*p, offset);
                            self.holds.remove(&x);
                            let ack = b.ack_types.first().copied().unwrap_or(1);
                            self.tx_holds.insert(
                                x,
                                TxHold {
                                    producer_id: *producer_id,
                                    producer_epoch: *producer_epoch,
                                    ack,
                                    ended: None,
                                },
                            );
                        }
                    }
                }
                Observed::Marker {
                    log,
                    offset,
                    producer_id,
                    producer_epoch,
                    commit,
                } => {
                    let Some(state_p) = log
                        .strip_prefix(SHARE_STATE)
                        .and_then(|s| s.strip_prefix('-'))
                        .and_then(|s| s.parse::<i32>().ok())
                    else {
                        continue;
                    };
                    for (x, h) in self.tx_holds.iter_mut() {
                        if h.producer_id == *producer_id
                            && h.producer_epoch <= *producer_epoch
                            && state_partition_of(layout, x.0) == state_p
                            && h.ended
                                .as_ref()
                                .is_none_or(|(l, o, _)| disk.log(l).end_offset() <= *o)
                        {
                            h.ended = Some((log.clone(), *offset, *commit));
                            if *commit && h.ack != AcknowledgeType::Accept.id() {
                                self.rejected_in_txn.insert(*x);
                            }
                        }
                    }
                }
                Observed::MarkerApplied { .. } => {}
            }
        }
        Ok(())
    }

    /// TX_PENDING records that changed in this step changed by their own transaction's marker.
    pub fn check_tx_pending_moves(
        before: &BTreeMap<Offset, (i64, i16, bool)>,
        broker: &Broker,
        observed: &[Observed],
    ) -> Result<(), String> {
        for (&(p, offset), &(pid, epoch, carried)) in before {
            let sp = broker.share_partitions().get(&share_key(p));
            let now = seen(sp, offset);
            if matches!(now, Seen::State(RecordState::TxPending, Some(s)) if s == (pid, epoch)) {
                continue;
            }
            let marker = observed.iter().find_map(|o| match o {
                Observed::MarkerApplied {
                    partition,
                    producer_id,
                    producer_epoch,
                    commit,
                } if *partition == p && *producer_id == pid && *producer_epoch >= epoch => {
                    Some(*commit)
                }
                _ => None,
            });
            let Some(commit) = marker else {
                return Err(format!(
                    "{INPUT}-{p}@{offset}, TX_PENDING in producer {pid}'s transaction (epoch {epoch}), became {now:?} without its marker"
                ));
            };
            let allowed = match now {
                Seen::Done | Seen::Unknown => true,
                // A transaction that carried the dead letter archives at once; otherwise a
                // REJECT (or an ABORT at the delivery limit) goes to ARCHIVING first when the
                // group has a dead-letter queue.
                Seen::State(s, _) => match (commit, carried) {
                    (true, true) => s == RecordState::Archived,
                    (true, false) => matches!(
                        s,
                        RecordState::Acknowledged | RecordState::Archived | RecordState::Archiving
                    ),
                    (false, _) => matches!(
                        s,
                        RecordState::Available | RecordState::Archived | RecordState::Archiving
                    ),
                },
            };
            if !allowed {
                return Err(format!(
                    "{INPUT}-{p}@{offset} resolved by producer {pid}'s {} marker to {now:?}",
                    if commit { "COMMIT" } else { "ABORT" }
                ));
            }
        }
        Ok(())
    }

    /// The invariants that hold between any two steps while the broker is up.
    pub fn check_state(&self, broker: &Broker, disk: &Disk) -> Result<(), String> {
        let layout = broker.layout();
        let coordinator = broker.txn().durable_state();
        let txn_of = |pid: i64| coordinator.values().find(|v| v.producer_id.0 == pid);
        // Delivery counts, TX_PENDING lifetimes.
        for (key, sp) in broker.share_partitions() {
            // The machine's own checks (in every build): a stopped share partition is a bug.
            if let Some(v) = sp.violation() {
                return Err(format!(
                    "{INPUT}-{} stopped: invariant {} violated: {v}",
                    key.partition,
                    v.invariant()
                ));
            }
            for r in sp.ranges() {
                if r.delivery_count > layout.share.delivery_count_limit {
                    return Err(format!(
                        "{INPUT}-{}@{} has delivery count {}, limit {}",
                        key.partition,
                        r.first_offset,
                        r.delivery_count,
                        layout.share.delivery_count_limit
                    ));
                }
                if r.state == RecordState::TxPending {
                    let Some(t) = r.staged_txn else {
                        return Err(format!(
                            "{INPUT}-{}@{} TX_PENDING without staging",
                            key.partition, r.first_offset
                        ));
                    };
                    let open = txn_of(t.producer_id).is_some_and(|v| match v.state {
                        TransactionState::Ongoing => {
                            v.producer_epoch.0 == t.producer_epoch
                                || self.kept.get(&t.producer_id)
                                    == Some(&(t.producer_epoch, v.producer_epoch.0))
                        }
                        TransactionState::PrepareCommit | TransactionState::PrepareAbort => true,
                        _ => false,
                    });
                    if !open {
                        return Err(format!(
                            "{INPUT}-{}@{}..={} still TX_PENDING in producer {}'s transaction (epoch {}) after it ended ({:?})",
                            key.partition,
                            r.first_offset,
                            r.last_offset,
                            t.producer_id,
                            t.producer_epoch,
                            txn_of(t.producer_id).map(|v| (v.state, v.producer_epoch.0))
                        ));
                    }
                }
            }
        }
        // Output iff acknowledgement.
        let visible = visible_outputs(disk, layout);
        for (&(p, offset), outs) in &visible {
            if outs.len() > 1 {
                return Err(format!(
                    "{INPUT}-{p}@{offset} has {} committed outputs: {outs:?}",
                    outs.len()
                ));
            }
            let sp = broker.share_partitions().get(&share_key(p));
            let pid = outs[0].0;
            match seen(sp, offset) {
                Seen::Done | Seen::Unknown | Seen::State(RecordState::Acknowledged, _) => {}
                Seen::State(RecordState::TxPending, Some((staged_by, _))) if staged_by == pid => {}
                other => {
                    return Err(format!(
                    "{INPUT}-{p}@{offset} has a committed output (producer {pid}) but is {other:?}"
                ))
                }
            }
        }
        self.check_dead_letters(broker, disk, &visible)?;
        for (key, sp) in broker.share_partitions() {
            for r in sp.ranges() {
                if r.state != RecordState::Acknowledged {
                    continue;
                }
                for offset in r.first_offset..=r.last_offset {
                    let x = (key.partition, offset);
                    if visible.contains_key(&x) {
                        continue;
                    }
                    let pending = self.tx_holds.get(&x).is_some_and(|h| {
                        txn_of(h.producer_id)
                            .is_some_and(|v| v.state == TransactionState::PrepareCommit)
                    });
                    if !pending {
                        return Err(format!(
                            "{INPUT}-{}@{offset} is ACKNOWLEDGED without a committed output",
                            key.partition
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Dead letters: at most one per input, none beside a committed output, none for an input
    /// a consumer may still get (so none of an aborted transaction), none for a good input
    /// before its delivery limit; each on an input ARCHIVED (or below the start offset),
    /// ARCHIVING only while the broker will scan before it writes (else it would write a
    /// second), or TX_PENDING in the transaction that committed it (its markers are being
    /// written).
    fn check_dead_letters(
        &self,
        broker: &Broker,
        disk: &Disk,
        outputs: &BTreeMap<Offset, Vec<(i64, String)>>,
    ) -> Result<(), String> {
        let layout = broker.layout();
        for (&(p, offset), letters) in &visible_dead_letters(disk) {
            let x = (p, offset);
            if letters.len() > 1 {
                return Err(format!(
                    "{INPUT}-{p}@{offset} has {} visible dead letters (producers {letters:?})",
                    letters.len()
                ));
            }
            if let Some(outs) = outputs.get(&x) {
                return Err(format!(
                    "{INPUT}-{p}@{offset} has a visible dead letter and a committed output {outs:?}"
                ));
            }
            let max = self.max_delivery.get(&x).copied().unwrap_or(0);
            if !layout.poison.is(p, offset) && max < layout.share.delivery_count_limit {
                return Err(format!(
                    "{INPUT}-{p}@{offset}, not poison, has a visible dead letter after {max} deliveries (limit {})",
                    layout.share.delivery_count_limit
                ));
            }
            let key = share_key(p);
            let state = seen(broker.share_partitions().get(&key), offset);
            let ok = match state {
                Seen::Done | Seen::Unknown | Seen::State(RecordState::Archived, _) => true,
                Seen::State(RecordState::Archiving, _) => broker.dead_letter_unverified(&key),
                Seen::State(RecordState::TxPending, Some((pid, _))) => letters[0] == pid,
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "{INPUT}-{p}@{offset} has a visible dead letter (producer {}) but is {state:?}",
                    letters[0]
                ));
            }
        }
        Ok(())
    }

    /// Rebuilds the broker from the whole disk (every batch as if flushed) and compares it with
    /// the live one.
    pub fn check_replay(&self, broker: &Broker, disk: &Disk, now: i64) -> Result<(), String> {
        let mut copy = disk.clone();
        copy.flush_all();
        let replayed = Broker::start(broker.layout(), &mut copy, now);
        if replayed.txn().durable_state() != broker.txn().durable_state() {
            return Err("replayed transaction coordinator differs from the live one".into());
        }
        if replayed.groups().durable_state() != broker.groups().durable_state() {
            return Err("replayed share groups differ from the live ones".into());
        }
        let keys: BTreeSet<_> = broker
            .store()
            .keys()
            .chain(replayed.store().keys())
            .cloned()
            .collect();
        for key in &keys {
            let live = expand_store(broker.store(), key);
            let again = expand_store(replayed.store(), key);
            if live != again {
                return Err(format!(
                    "replayed share state of partition {} differs: live {live:?}, replayed {again:?}",
                    key.partition
                ));
            }
        }
        for (key, sp) in broker.share_partitions() {
            let live = expand_write(&sp.persisted_view());
            let Some(again) = replayed.share_partitions().get(key) else {
                return Err(format!(
                    "share partition {} not rebuilt by replay",
                    key.partition
                ));
            };
            let again = expand_write(&again.persisted_view());
            if live != again {
                return Err(format!(
                    "share partition {}: live persisted view {live:?}, replayed {again:?}",
                    key.partition
                ));
            }
        }
        Ok(())
    }

    /// At quiescence: every input record accounted for.
    pub fn check_final(&self, broker: &Broker, disk: &Disk) -> Result<(), String> {
        let layout = broker.layout();
        self.check_decisions(disk, layout)?;
        let visible = visible_outputs(disk, layout);
        let letters = visible_dead_letters(disk);
        if !layout.share.dead_letter && !letters.is_empty() {
            return Err(format!(
                "dead letters without a dead-letter queue: {letters:?}"
            ));
        }
        let limit = layout.share.delivery_count_limit;
        for p in 0..layout.input_partitions {
            let end = disk.log(&log_name(INPUT, p)).end_offset();
            let sp = broker.share_partitions().get(&share_key(p));
            for offset in 0..end {
                let x = (p, offset);
                let outs = visible.get(&x).map_or(0, Vec::len);
                let dead = letters.get(&x).map_or(0, Vec::len);
                let at_limit = self.max_delivery.get(&x).copied().unwrap_or(0) >= limit;
                let poison = layout.poison.is(p, offset);
                let state = seen(sp, offset);
                let archived = matches!(state, Seen::Done | Seen::State(RecordState::Archived, _));
                let dead_ok = match (layout.share.dead_letter, poison) {
                    (false, _) => dead == 0,
                    (true, true) => dead == 1 && outs == 0,
                    // Never rejected: archived without an output only at the delivery limit,
                    // and then dead-lettered.
                    (true, false) if archived && outs == 0 => dead == 1 && at_limit,
                    (true, false) => dead == 0,
                };
                if !dead_ok {
                    return Err(format!(
                        "at quiescence {INPUT}-{p}@{offset} (poison: {poison}, at the delivery limit: {at_limit}) has {dead} visible dead letters and {outs} committed outputs"
                    ));
                }
                let archived_reason = self.rejected.contains(&x)
                    || self.rejected_in_txn.contains(&x)
                    || self.max_delivery.get(&x).copied().unwrap_or(0)
                        >= layout.share.delivery_count_limit;
                let ok = match (state, outs) {
                    (_, n) if n > 1 => false,
                    (Seen::State(RecordState::Acknowledged, _), 1) => true,
                    (Seen::Done, 1) => true,
                    (Seen::Done | Seen::State(RecordState::Archived, _), 0) => archived_reason,
                    (Seen::State(RecordState::Available, _) | Seen::Unknown, 0) => true,
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "at quiescence {INPUT}-{p}@{offset} is {state:?} with {outs} committed outputs (rejected or at the delivery limit: {archived_reason})"
                    ));
                }
            }
        }
        Ok(())
    }
}
