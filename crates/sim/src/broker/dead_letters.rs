//! The simulated broker's dead-letter queue (KIP-1191, decision 0022), in the order of
//! `shoal-broker`'s `dead_letter` and `archiving` modules: one dead-letter partition
//! ([`DLQ`]`-0`) for the share group, records keyed by the input partition and offset they
//! stand for (the headers of the real broker, reduced to their dedupe key).
//!
//! - A TxnShareAcknowledge whose parts REJECT records registers the dead-letter partition in
//!   the transaction with the state partitions, and writes the dead letters
//!   ([`shoal_core::share_partition::SharePartition::dead_letters_of`] on the staged copies)
//!   as the producer's transactional batch, without a sequence, fsynced, before the staging is
//!   persisted; the staging says so (`dead_lettered`). The transaction's markers decide them:
//!   visible on COMMIT (which archives the records at once), never on ABORT. A retried request
//!   skips the dead letters the producer's open transaction already holds.
//! - Records ARCHIVING (a REJECT acknowledged outside a transaction, the delivery limit, an
//!   ABORT at the limit) get theirs at the next tick: appended outside any transaction and
//!   fsynced, and only then ARCHIVED persisted (`complete_archiving`). A share partition loaded
//!   with ARCHIVING records, or whose last attempt failed part way, first scans the partition
//!   and writes only the dead letters it does not find; a transactional one counts once its
//!   COMMIT marker follows it, and one whose marker has not arrived yet makes it wait.

use std::collections::BTreeSet;

use shoal_core::share_partition::{AcknowledgeType, DeadLetterRange};

use super::*;
use crate::client::output_key;

/// The dead-letter topic (one partition).
pub const DLQ: &str = "dlq";

/// The dead-letter partition's log.
pub fn dead_letter_log() -> String {
    log_name(DLQ, 0)
}

/// Whether `batches` REJECT any record.
pub(super) fn has_reject(batches: &[AckBatch]) -> bool {
    batches
        .iter()
        .any(|b| b.ack_types.contains(&AcknowledgeType::Reject.id()))
}

/// What the dead-letter partition holds for one share partition's offsets.
#[derive(Default)]
struct Scan {
    /// Written outside a transaction, or committed with one.
    present: BTreeSet<i64>,
    /// In a transaction whose marker has not arrived yet.
    undecided: BTreeSet<i64>,
}

/// What the dead-letter partition holds for input `partition` (the dedupe scan).
fn scan(disk: &Disk, partition: i32) -> Scan {
    let mut s = Scan::default();
    let mut open: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for b in disk.log(&dead_letter_log()).batches() {
        match &b.body {
            Body::Data(records) => {
                let offsets = records
                    .iter()
                    .filter_map(|r| crate::client::parse_output_key(&r.key))
                    .filter(|(p, _)| *p == partition)
                    .map(|(_, o)| o);
                if b.transactional {
                    open.entry(b.producer_id).or_default().extend(offsets);
                } else {
                    s.present.extend(offsets);
                }
            }
            Body::Control { commit, .. } => {
                let offsets = open.remove(&b.producer_id).unwrap_or_default();
                if *commit {
                    s.present.extend(offsets);
                }
            }
        }
    }
    s.undecided = open.into_values().flatten().collect();
    s
}

/// The dead letters producer `pid`'s open transaction already holds on the dead-letter
/// partition (a retried TxnShareAcknowledge's, decision 0022 point 7).
fn carried_by(disk: &Disk, pid: i64) -> BTreeSet<(i32, i64)> {
    let mut carried = BTreeSet::new();
    for b in disk.log(&dead_letter_log()).batches() {
        if b.producer_id != pid {
            continue;
        }
        match &b.body {
            Body::Data(records) => carried.extend(
                records
                    .iter()
                    .filter_map(|r| crate::client::parse_output_key(&r.key)),
            ),
            Body::Control { .. } => carried.clear(),
        }
    }
    carried
}

fn records(partition: i32, offsets: impl IntoIterator<Item = i64>) -> Vec<Record> {
    offsets
        .into_iter()
        .map(|o| Record {
            key: output_key(partition, o),
            value: None,
        })
        .collect()
}

fn offsets(ranges: &[DeadLetterRange]) -> impl Iterator<Item = i64> + '_ {
    ranges.iter().flat_map(|r| r.first_offset..=r.last_offset)
}

impl Broker {
    /// Writes, durably, the dead letters the staged `copies` carry for their REJECTs into
    /// producer `pid`'s transaction, skipping those it already holds.
    ///
    /// # Errors
    /// The producer is fenced on the dead-letter partition: no staging may claim them.
    pub(super) fn write_carried(
        &mut self,
        disk: &mut Disk,
        (pid, epoch): (i64, i16),
        copies: &[(i32, Vec<DeadLetterRange>)],
    ) -> Result<(), String> {
        let carried = carried_by(disk, pid);
        let name = dead_letter_log();
        let mut written = false;
        for (partition, ranges) in copies {
            let fresh: Vec<i64> = offsets(ranges)
                .filter(|o| !carried.contains(&(*partition, *o)))
                .collect();
            if fresh.is_empty() {
                continue;
            }
            runtime::append_for_producer(
                disk,
                &mut self.producers,
                &name,
                (pid, epoch),
                records(*partition, fresh),
            )?;
            written = true;
        }
        if written {
            disk.flush(&name);
        }
        Ok(())
    }

    /// The dead-letter task: for every share partition holding ARCHIVING records, their dead
    /// letters (after a scan, if unverified), fsynced, then ARCHIVED persisted.
    pub(super) fn write_dead_letters(&mut self, disk: &mut Disk, now: i64) {
        let keys: Vec<SharePartitionKey> = self
            .sps
            .iter()
            .filter(|(_, sp)| sp.archiving_count() > 0)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(ranges) = self.sps.get(&key).map(SharePartition::archiving) else {
                continue;
            };
            let mut fresh: Vec<i64> = offsets(&ranges).collect();
            if self.dead_letter_unverified.contains(&key) {
                let found = scan(disk, key.partition);
                if fresh.iter().any(|o| found.undecided.contains(o)) {
                    // A transaction's dead letter not decided yet: wait for its marker.
                    continue;
                }
                fresh.retain(|o| !found.present.contains(o));
            }
            if !fresh.is_empty() {
                let name = dead_letter_log();
                disk.append(&name, Batch::plain(records(key.partition, fresh)));
                disk.flush(&name);
            }
            let mut complete = true;
            for r in &ranges {
                let archived = self
                    .sps
                    .get_mut(&key)
                    .and_then(|sp| sp.complete_archiving(r.first_offset, r.last_offset).ok());
                let Some(write) = archived else {
                    complete = false;
                    continue;
                };
                if self
                    .persisted(disk, &key, share_leader::changed(write), now)
                    .is_err()
                {
                    complete = false;
                }
            }
            if complete {
                self.dead_letter_unverified.remove(&key);
            } else {
                self.dead_letter_unverified.insert(key);
            }
        }
    }
}
