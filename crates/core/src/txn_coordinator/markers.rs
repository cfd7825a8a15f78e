//! The transaction driver's decisions about markers that are appended but maybe not durable
//! (decision 0005): which markers a Markers record lists, and which listed markers a crash lost.
//!
//! The driver writes a transaction's COMMIT/ABORT markers without waiting for their fsync and
//! completes the transaction; the Complete record is preceded, in the same fsync, by a Markers
//! record listing the id's markers not yet known durable ([`markers_record`]). At start, every
//! listed marker whose partition recovered to a prefix ending at or before it, and whose
//! transaction is still open there, is written again before anything is served
//! ([`marker_lost`]). Both are pure functions of what the driver observes, so the broker and the
//! simulator (`crates/sim`) run the same decisions.

use super::records::{PendingMarker, TxnRecord};
use super::types::TopicPartition;

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
/// in the order given: each one's partition log now ends at or before the marker's offset
/// (recovery kept a prefix that stops short of it) and its producer still has a transaction
/// open there. On a transactional participant's partition (`__consumer_offsets`,
/// `__share_group_state`), whose transactional records the participant resolves rather than
/// the producer state, whatever survived belongs to this transaction (anything later came
/// after the marker) and a marker that finds nothing to resolve changes nothing, so it is
/// always written again; elsewhere `has_open_txn` is asked (it may load the partition's
/// producer state).
///
/// Every marker is judged against the logs as recovery left them, before anything is written
/// again: a rewrite appends at the log end, which may be the offset another lost marker had,
/// and that marker would then look as if it had survived. `log_end_offset` is called before
/// the caller writes anything (None: the partition no longer exists, nothing to write).
///
/// # Errors
/// What `has_open_txn` returns.
pub fn lost_markers<'a, E>(
    listed: impl IntoIterator<Item = &'a PendingMarker>,
    mut log_end_offset: impl FnMut(&TopicPartition) -> Option<i64>,
    is_participant: impl Fn(&TopicPartition) -> bool,
    mut has_open_txn: impl FnMut(&PendingMarker) -> Result<bool, E>,
) -> Result<Vec<&'a PendingMarker>, E> {
    let mut lost = Vec::new();
    for m in listed {
        let Some(end) = log_end_offset(&m.partition) else {
            continue;
        };
        if end > m.offset {
            continue;
        }
        if is_participant(&m.partition) || has_open_txn(m)? {
            lost.push(m);
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::{ProducerEpoch, ProducerId};
    use crate::txn_coordinator::TransactionResult;

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
    fn a_marker_is_lost_only_when_the_log_stops_short_of_it_and_its_transaction_is_open() {
        let ends = |tp: &TopicPartition| Some(if tp.partition == 0 { 5 } else { 9 });
        let participant = |tp: &TopicPartition| tp.topic == "__share_group_state";
        let listed = [marker(0, 5), marker(0, 4), marker(1, 9)];
        // 5 ≥ end 5: lost; 4 < end: survived; partition 1: lost, open.
        let lost = lost_markers(&listed, ends, participant, |_| Ok::<_, ()>(true)).unwrap();
        assert_eq!(lost, vec![&listed[0], &listed[2]]);
        // No transaction open any more: nothing to write.
        let lost = lost_markers(&listed, ends, participant, |_| Ok::<_, ()>(false)).unwrap();
        assert!(lost.is_empty());
        // A participant's marker is written again without asking.
        let mut state = marker(0, 5);
        state.partition = TopicPartition::new("__share_group_state", 0);
        let lost = lost_markers([&state], ends, participant, |_| Err("not asked")).unwrap();
        assert_eq!(lost, vec![&state]);
        // A partition that is gone: nothing.
        assert!(lost_markers(&listed, |_| None, participant, |_| Err("no"))
            .unwrap()
            .is_empty());
        assert_eq!(
            lost_markers(&listed, ends, participant, |_| Err("io")),
            Err("io")
        );
    }

    /// Found by the simulator (seed 16): two producers' markers at offsets 56 and 57 of one
    /// partition are lost; writing the second one again (at 56) must not make the first look
    /// as if it had survived.
    #[test]
    fn every_marker_is_judged_before_any_is_written_again() {
        let first = marker(0, 56);
        let mut second = marker(0, 57);
        second.producer_id = ProducerId(8);
        // Listed in the other order, as a map of transactional ids may list them.
        let listed = [second.clone(), first.clone()];
        let mut end = 56;
        let lost = lost_markers(&listed, |_| Some(end), |_| false, |_| Ok::<_, ()>(true)).unwrap();
        assert_eq!(lost, vec![&second, &first]);
        // The broker then appends them; judging after the first append would skip `first`.
        end += 1;
        assert!(end > first.offset);
    }
}
