//! A partition's log start offset in the commit index (retention by time or size, and
//! DeleteRecords): the owner records it at `starts/<topic>/<partition>`, where a new owner
//! finds it, and deletes the index entries wholly below it, so that the index and the
//! objects it names shrink with the log (`shared/spec/cluster.md`: "retention and compaction
//! delete objects only after the index no longer points to them" — the objects themselves go
//! through [`crate::collector`]).
//!
//! [`trim`] is one etcd transaction: it compares the owner fence (as commits do), every
//! deleted entry's mod revision (a compaction that rewrote one meanwhile makes it refuse), and
//! the recorded start's mod revision (two trims never interleave), then deletes the entries
//! and records the start. It is all or nothing, so it is safe to stop anywhere. The log start
//! only grows, and the partition's last entry is never deleted (its end is the committed end,
//! which commits move): at most one entry below the start remains.
//!
//! The broker's DeleteRecords and its retention by time and size call it through its
//! durability seam (`ObjectCommits::record_log_start`) before moving the local log start,
//! and [`crate::restore::catch_up`] starts a new owner's log at the recorded start (an empty
//! local log is started at the first remaining run with `shoal_storage::Log::reset_to`).

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use crate::compaction::{read_index, ENTRIES_PER_GROUP_MAX};
use crate::session::Session;

/// What [`trim`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Index entries deleted.
    pub entries_deleted: usize,
    /// The log start recorded now (the one before when it did not grow).
    pub log_start: i64,
    /// Whether the transaction was refused (the owner or the entries changed): nothing done.
    pub refused: bool,
}

/// The log start offset recorded for `topic`-`partition` (0 when none) and its key's mod
/// revision (0 when absent).
///
/// # Errors
/// etcd unreachable, or a malformed value.
pub async fn log_start(
    session: &Session,
    topic: &str,
    partition: i32,
) -> crate::Result<(i64, i64)> {
    let mut client = session.client();
    let got = client
        .get(session.keys().start(topic, partition), None)
        .await?;
    match got.kvs().first() {
        None => Ok((0, 0)),
        Some(kv) => {
            let start = std::str::from_utf8(kv.value())
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| crate::Error::Invalid {
                    what: "log start",
                    detail: String::from_utf8_lossy(kv.value()).into_owned(),
                })?;
            Ok((start, kv.mod_revision()))
        }
    }
}

/// Records `new_start` as `topic`-`partition`'s log start (if it is higher than the one
/// recorded) and deletes the entries wholly below it (at most [`ENTRIES_PER_GROUP_MAX`] - 1
/// per call; call again while entries are deleted), as its owner under `fence`.
///
/// # Errors
/// `new_start` past the committed end; etcd unreachable.
pub async fn trim(
    session: &Session,
    (topic, partition): (&str, i32),
    fence: i64,
    new_start: i64,
) -> crate::Result<Trimmed> {
    let index = read_index(session, topic, partition).await?;
    if new_start > index.committed_end || new_start < 0 {
        return Err(crate::Error::Invalid {
            what: "log start",
            detail: format!(
                "{topic}-{partition}: {new_start} outside 0..={}",
                index.committed_end
            ),
        });
    }
    let (recorded, start_revision) = log_start(session, topic, partition).await?;
    let start = recorded.max(new_start);
    // Entry i ends where entry i + 1 begins; the last entry is never deleted.
    let below: Vec<_> = index
        .entries
        .windows(2)
        .take_while(|pair| pair[1].base_offset <= start)
        .map(|pair| &pair[0])
        .take(ENTRIES_PER_GROUP_MAX - 1)
        .collect();
    if below.is_empty() && start == recorded {
        return Ok(Trimmed {
            log_start: recorded,
            ..Trimmed::default()
        });
    }
    let keys = session.keys();
    let start_key = keys.start(topic, partition);
    let mut compares = vec![
        Compare::mod_revision(keys.owner(topic, partition), CompareOp::Equal, fence),
        Compare::mod_revision(start_key.clone(), CompareOp::Equal, start_revision),
    ];
    let mut ops = vec![TxnOp::put(start_key, start.to_string(), None)];
    for e in &below {
        let key = keys.index_entry(topic, partition, e.base_offset);
        compares.push(Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            e.mod_revision,
        ));
        ops.push(TxnOp::delete(key, None));
    }
    let mut client = session.client();
    let done = client.txn(Txn::new().when(compares).and_then(ops)).await?;
    Ok(if done.succeeded() {
        Trimmed {
            entries_deleted: below.len(),
            log_start: start,
            refused: false,
        }
    } else {
        Trimmed {
            entries_deleted: 0,
            log_start: recorded,
            refused: true,
        }
    })
}
