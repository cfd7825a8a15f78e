//! The transaction driver's decisions about markers that are appended but maybe not durable
//! (decision 0005): which markers a Markers record lists, which listed markers a crash lost,
//! and clearing the lists once those are written again.
//!
//! The driver writes a transaction's COMMIT/ABORT markers without waiting for their fsync and
//! completes the transaction; the Complete record is preceded, in the same fsync, by a Markers
//! record listing the id's markers not yet known durable ([`markers_record`]). At start, every
//! listed marker no longer at its offset whose transaction is still open there is written
//! again before anything is served ([`lost_markers`]), the listed partitions are fsynced and
//! the lists cleared ([`cleared_lists`]). These are pure functions of what the driver observes,
//! so the broker and the simulator (`crates/sim`) run the same decisions.
//!
//! [`MarkerWriting`] is the marker task's order of work, which both drive too: one
//! transaction's markers written partition by partition, a failed one retried after the others,
//! those a participant made durable itself not listed, and the completion reported with the
//! flushed offsets of every partition the id's markers are on.

use std::collections::VecDeque;

use super::records::{PendingMarker, TxnRecord};
use super::types::{TopicPartition, TransactionResult, WriteMarkers};
use super::TxnInput;
use crate::coordinator::TxnMarker;

/// The Markers record to write with a completion of `transactional_id`: the markers of its
/// earlier completions still not durable (`before`, what the previous Markers record listed)
/// plus `appended` (this completion's), keeping those whose partition's flushed offset is at
/// or before the marker (`flushed_offset`; `None` for a partition that no longer exists, whose
/// markers are dropped). Returns the record (None when there is nothing to list and nothing
/// was listed before, so no record is needed) and the markers it lists.
pub fn markers_record(
    transactional_id: &str,
    before: Vec<PendingMarker>,
    appended: Vec<PendingMarker>,
    flushed_offset: impl Fn(&TopicPartition) -> Option<i64>,
) -> (Option<TxnRecord>, Vec<PendingMarker>) {
    let listed_before = !before.is_empty();
    let still: Vec<PendingMarker> = before
        .into_iter()
        .chain(appended)
        .filter(|m| flushed_offset(&m.partition).is_some_and(|flushed| flushed <= m.offset))
        .collect();
    if still.is_empty() && !listed_before {
        return (None, still);
    }
    let record = TxnRecord::Markers {
        transactional_id: transactional_id.to_string(),
        markers: still.clone(),
    };
    (Some(record), still)
}

/// The markers listed in Markers records that a crash lost and that must be written again,
/// in the order given: each one is no longer at its offset (`present`: whether the partition's
/// log holds, at the marker's offset, a control batch of the marker's producer and epoch;
/// `None` when the partition no longer exists) and its producer still has a transaction open
/// there. On a transactional participant's partition (`__consumer_offsets`,
/// `__share_group_state`), whose transactional records the participant resolves rather than
/// the producer state, whatever survived belongs to this transaction (anything later came
/// after the marker) and a marker that finds nothing to resolve changes nothing, so it is
/// always written again; elsewhere `has_open_txn` is asked.
///
/// Judged by what is at the offset, not by where the log ends: a rewrite appends at the log
/// end, which may be the offset another lost marker had. And every marker is judged before
/// any is written again, against the logs as recovery left them. Once the lost markers are
/// written again and every listed partition is fsynced, the lists are stale (a rewritten
/// marker is at another offset) and must be cleared durably before anything is served: a
/// stale entry judged again after a later crash would write an old marker, which would
/// resolve the producer's newer stagings at that epoch.
///
/// # Errors
/// What `present` or `has_open_txn` returns.
pub fn lost_markers<'a, E>(
    listed: impl IntoIterator<Item = &'a PendingMarker>,
    mut present: impl FnMut(&PendingMarker) -> Result<Option<bool>, E>,
    is_participant: impl Fn(&TopicPartition) -> bool,
    mut has_open_txn: impl FnMut(&PendingMarker) -> Result<bool, E>,
) -> Result<Vec<&'a PendingMarker>, E> {
    let mut lost = Vec::new();
    for m in listed {
        match present(m)? {
            None | Some(true) => continue,
            Some(false) => {}
        }
        if is_participant(&m.partition) || has_open_txn(m)? {
            lost.push(m);
        }
    }
    Ok(lost)
}

/// The records that clear the Markers lists of `transactional_ids` once the lost markers are
/// written again and every listed partition is fsynced (see [`lost_markers`]).
pub fn cleared_lists<'a>(
    transactional_ids: impl IntoIterator<Item = &'a String>,
) -> Vec<TxnRecord> {
    transactional_ids
        .into_iter()
        .map(|id| TxnRecord::Markers {
            transactional_id: id.clone(),
            markers: Vec::new(),
        })
        .collect()
}

/// How writing one marker went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Appended at this offset, not yet known durable: listed until flushed.
    Appended(i64),
    /// Durable already (a participant's coordinator wrote and fsynced it).
    Durable,
    /// The partition no longer exists: nothing to write.
    Gone,
    /// Refused or not written: retried after the others.
    Failed,
}

/// One transaction's markers being written (the transaction coordinator's marker task):
/// take the next partition with [`MarkerWriting::take_next`], write its marker, report how it went
/// with [`MarkerWriting::written`]; once [`MarkerWriting::is_done`], read the flushed offsets
/// of [`MarkerWriting::partitions_to_read`] and hand [`MarkerWriting::finish`]'s input to the
/// coordinator.
#[derive(Clone, Debug)]
pub struct MarkerWriting {
    markers: WriteMarkers,
    /// The partitions of the id's markers already listed as not durable.
    listed: Vec<TopicPartition>,
    remaining: VecDeque<TopicPartition>,
    appended: Vec<PendingMarker>,
}

impl MarkerWriting {
    pub fn new(markers: WriteMarkers, listed: Vec<TopicPartition>) -> Self {
        Self {
            remaining: markers.partitions.iter().cloned().collect(),
            markers,
            listed,
            appended: Vec::new(),
        }
    }

    /// The coordinator epoch the markers carry.
    pub fn coordinator_epoch(&self) -> i32 {
        self.markers.coordinator_epoch
    }

    /// Partitions still to write (a failed one counts again).
    pub fn remaining(&self) -> usize {
        self.remaining.len()
    }

    pub fn is_done(&self) -> bool {
        self.remaining.is_empty()
    }

    /// The next partition and the marker to write there; report it with
    /// [`MarkerWriting::written`].
    pub fn take_next(&mut self) -> Option<(TopicPartition, TxnMarker)> {
        let tp = self.remaining.pop_front()?;
        let marker = TxnMarker {
            partition: tp.partition,
            producer_id: self.markers.producer_id.0,
            producer_epoch: self.markers.producer_epoch.0,
            commit: self.markers.result == TransactionResult::Commit,
        };
        Some((tp, marker))
    }

    /// How writing the marker to `tp` (from [`MarkerWriting::take_next`]) went.
    pub fn written(&mut self, tp: TopicPartition, outcome: MarkerOutcome) {
        match outcome {
            MarkerOutcome::Appended(offset) => self.appended.push(PendingMarker {
                partition: tp,
                offset,
                producer_id: self.markers.producer_id,
                producer_epoch: self.markers.producer_epoch,
                result: self.markers.result,
            }),
            MarkerOutcome::Durable | MarkerOutcome::Gone => {}
            MarkerOutcome::Failed => self.remaining.push_back(tp),
        }
    }

    /// The partitions whose flushed offsets the completion needs, each once: those of the
    /// markers appended, then those the id already lists. Read them after the appends: a
    /// marker flushed since is left out of the Markers record, one flushed later stays listed
    /// (harmless: it is found at its offset).
    pub fn partitions_to_read(&self) -> Vec<TopicPartition> {
        let mut out: Vec<TopicPartition> = Vec::new();
        for tp in self
            .appended
            .iter()
            .map(|m| &m.partition)
            .chain(&self.listed)
        {
            if !out.contains(tp) {
                out.push(tp.clone());
            }
        }
        out
    }

    /// The completion to hand to the coordinator, with the flushed offsets read (a partition
    /// missing from `flushed` no longer exists).
    pub fn finish(self, flushed: Vec<(TopicPartition, i64)>) -> TxnInput {
        TxnInput::MarkersWritten {
            markers: self.markers,
            appended: self.appended,
            flushed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::{ProducerEpoch, ProducerId};
    use crate::txn_coordinator::TransactionVersion;

    fn marker(partition: i32, offset: i64) -> PendingMarker {
        PendingMarker {
            partition: TopicPartition::new("out", partition),
            offset,
            producer_id: ProducerId(7),
            producer_epoch: ProducerEpoch(2),
            result: TransactionResult::Commit,
        }
    }

    #[test]
    fn a_record_lists_only_the_markers_not_yet_flushed() {
        // Partition 0 flushed up to offset 10, partition 1 up to 3.
        let flushed = |tp: &TopicPartition| Some(if tp.partition == 0 { 10 } else { 3 });
        let (record, still) = markers_record("t", vec![marker(0, 5)], vec![marker(1, 4)], flushed);
        assert_eq!(still, vec![marker(1, 4)]);
        assert_eq!(
            record,
            Some(TxnRecord::Markers {
                transactional_id: "t".into(),
                markers: vec![marker(1, 4)],
            })
        );
    }

    #[test]
    fn nothing_listed_before_or_now_needs_no_record_but_an_emptied_list_does() {
        let flushed = |_: &TopicPartition| Some(100);
        assert_eq!(
            markers_record("t", vec![], vec![marker(0, 5)], flushed),
            (None, vec![])
        );
        let (record, still) = markers_record("t", vec![marker(0, 5)], vec![], flushed);
        assert!(still.is_empty());
        assert_eq!(
            record,
            Some(TxnRecord::Markers {
                transactional_id: "t".into(),
                markers: vec![],
            })
        );
        // A partition that is gone drops its markers.
        let (_, still) = markers_record("t", vec![], vec![marker(0, 5)], |_| None);
        assert!(still.is_empty());
    }

    #[test]
    fn a_marker_is_lost_only_when_it_is_not_at_its_offset_and_its_transaction_is_open() {
        // Partition 0 kept offsets below 5, partition 1 below 9.
        let present = |m: &PendingMarker| {
            Ok::<_, &str>(Some(
                m.offset < if m.partition.partition == 0 { 5 } else { 9 },
            ))
        };
        let participant = |tp: &TopicPartition| tp.topic == "__share_group_state";
        let listed = [marker(0, 5), marker(0, 4), marker(1, 9)];
        let lost = lost_markers(&listed, present, participant, |_| Ok(true)).unwrap();
        assert_eq!(lost, vec![&listed[0], &listed[2]]);
        // No transaction open any more: nothing to write.
        let lost = lost_markers(&listed, present, participant, |_| Ok(false)).unwrap();
        assert!(lost.is_empty());
        // A participant's marker is written again without asking.
        let mut state = marker(0, 5);
        state.partition = TopicPartition::new("__share_group_state", 0);
        let lost = lost_markers([&state], present, participant, |_| Err("not asked")).unwrap();
        assert_eq!(lost, vec![&state]);
        // A partition that is gone: nothing.
        let gone = |_: &PendingMarker| Ok::<_, &str>(None);
        assert!(lost_markers(&listed, gone, participant, |_| Err("no"))
            .unwrap()
            .is_empty());
        assert_eq!(
            lost_markers(&listed, present, participant, |_| Err("io")),
            Err("io")
        );
    }

    /// Found by the simulator (seed 7901): a crash during the start-up rewrite left producer
    /// 1003's rewritten ABORT at offset 42, where producer 1000's lost COMMIT had been listed.
    /// Judged by the log end (43 > 42) the COMMIT looked as if it had survived.
    #[test]
    fn another_marker_at_the_listed_offset_does_not_count_as_this_one() {
        let commit = marker(0, 42);
        let mut other = marker(0, 42);
        other.producer_id = ProducerId(1003);
        let log = [other.clone()];
        let present = |m: &PendingMarker| {
            Ok::<_, ()>(Some(log.iter().any(|l| {
                l.offset == m.offset
                    && l.producer_id == m.producer_id
                    && l.producer_epoch == m.producer_epoch
            })))
        };
        let lost = lost_markers([&commit], present, |_| false, |_| Ok(true)).unwrap();
        assert_eq!(lost, vec![&commit]);
    }

    #[test]
    fn cleared_lists_empty_every_id() {
        let ids = ["a".to_string(), "b".to_string()];
        let records = cleared_lists(&ids);
        assert_eq!(records.len(), 2);
        assert!(records
            .iter()
            .all(|r| matches!(r, TxnRecord::Markers { markers, .. } if markers.is_empty())));
    }

    fn writing(partitions: &[(&str, i32)], listed: &[(&str, i32)]) -> MarkerWriting {
        MarkerWriting::new(
            WriteMarkers {
                transactional_id: "t".into(),
                producer_id: ProducerId(7),
                producer_epoch: ProducerEpoch(3),
                result: TransactionResult::Abort,
                partitions: partitions
                    .iter()
                    .map(|(t, p)| TopicPartition::new(*t, *p))
                    .collect(),
                coordinator_epoch: 4,
                transaction_version: TransactionVersion::Tv2,
            },
            listed
                .iter()
                .map(|(t, p)| TopicPartition::new(*t, *p))
                .collect(),
        )
    }

    #[test]
    fn a_failed_marker_is_retried_after_the_others_and_only_appended_ones_are_listed() {
        let mut w = writing(
            &[
                ("out", 0),
                ("out", 1),
                ("__share_group_state", 2),
                ("gone", 0),
            ],
            &[("out", 1), ("old", 5)],
        );
        let (tp, marker) = w.take_next().unwrap();
        assert_eq!(tp, TopicPartition::new("out", 0));
        assert_eq!(
            marker,
            TxnMarker {
                partition: 0,
                producer_id: 7,
                producer_epoch: 3,
                commit: false
            }
        );
        w.written(tp, MarkerOutcome::Failed);
        let (tp, _) = w.take_next().unwrap();
        w.written(tp, MarkerOutcome::Appended(40));
        let (tp, _) = w.take_next().unwrap();
        w.written(tp, MarkerOutcome::Durable);
        let (tp, _) = w.take_next().unwrap();
        w.written(tp, MarkerOutcome::Gone);
        assert!(!w.is_done());
        let (tp, _) = w.take_next().unwrap();
        assert_eq!(tp, TopicPartition::new("out", 0), "the failed one, last");
        w.written(tp, MarkerOutcome::Appended(9));
        assert!(w.is_done() && w.take_next().is_none());
        // Appended ones in order, then the listed ones not already there.
        assert_eq!(
            w.partitions_to_read(),
            vec![
                TopicPartition::new("out", 1),
                TopicPartition::new("out", 0),
                TopicPartition::new("old", 5),
            ]
        );
        let flushed = vec![(TopicPartition::new("out", 1), 41)];
        match w.finish(flushed.clone()) {
            TxnInput::MarkersWritten {
                appended,
                flushed: f,
                markers,
            } => {
                assert_eq!(f, flushed);
                assert_eq!(markers.coordinator_epoch, 4);
                let at: Vec<_> = appended
                    .iter()
                    .map(|m| (m.partition.partition, m.offset))
                    .collect();
                assert_eq!(at, vec![(1, 40), (0, 9)]);
                assert!(appended.iter().all(|m| m.result == TransactionResult::Abort
                    && m.producer_epoch == ProducerEpoch(3)));
            }
            other => panic!("not a completion: {other:?}"),
        }
    }
}
