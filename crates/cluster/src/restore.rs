//! Bringing a partition's local log in line with what the cluster committed, before a new
//! owner serves it (`shared/spec/cluster.md`: "a broker that takes a partition rebuilds its
//! state from storage by replay"):
//!
//! 1. whatever the local log holds past the committed end is not durable — a previous term's
//!    uncommitted appends, or this node's own as a zombie — and is truncated away;
//! 2. a local log that diverged is cut back: going back from the last committed run it
//!    reaches into, a run is kept once the local log holds it whole and byte for byte as its
//!    object does (one comparison when the log ends on this node's own last commit), and cut
//!    otherwise — a zombie's appends after its last commit, or a log that ends inside a run;
//! 3. the committed runs it lacks are read from the objects the commit index names and
//!    appended, each at the offset it was committed at;
//! 4. the log start recorded by the owners' trims ([`crate::retention`]) becomes the local
//!    log's start.
//!
//! A trimmed partition's index begins at the run holding the recorded start (runs wholly
//! below it are skipped if a trim left some). A local log that ends before that run, or whose
//! start is above the recorded one (it lacks records the cluster still serves), or whose runs
//! to compare begin below its own start, cannot be continued: it is emptied and started again
//! at that run's base ([`Log::reset_to`]) and the runs are fetched from there.
//!
//! The state machines then replay the log as after a restart. Batches keep their bytes,
//! except that a log configured for LogAppendTime stamps them again (to be fixed with the
//! append path's restore mode).

use shoal_storage::Log;

use crate::commits::{committed_end, index};
use crate::objects::Objects;
use crate::retention::log_start;
use crate::session::Session;

/// What [`catch_up`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaughtUp {
    /// Local offsets dropped (not committed, or diverged); 0 when the log was started again
    /// above its end.
    pub truncated: i64,
    /// Committed offsets fetched from the objects.
    pub fetched: i64,
    /// The log end offset now: the committed end.
    pub end: i64,
}

fn storage(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Objects(format!("local log: {e}"))
}

/// The local log's bytes of offsets `from..to` (whole batches).
fn local_bytes(log: &Log, from: i64, to: i64) -> crate::Result<bytes::Bytes> {
    let mut bytes = bytes::BytesMut::new();
    let mut next = from;
    while next < to {
        let slice = log
            .read_slice(next, usize::MAX, Some(to), false)
            .map_err(storage)?;
        let Some(region) = slice.region else { break };
        bytes.extend_from_slice(&region.read().map_err(storage)?);
        next = slice.next_offset;
    }
    Ok(bytes.freeze())
}

/// Brings `log` (of `topic`-`partition`) to exactly the committed records.
///
/// # Errors
/// etcd or the object store failed, an object is missing or short, or the local log could not
/// be truncated or appended to; the log may then hold a prefix of the committed records.
pub async fn catch_up(
    session: &Session,
    objects: &Objects,
    topic: &str,
    partition: i32,
    log: &mut Log,
) -> crate::Result<CaughtUp> {
    let end = committed_end(session, topic, partition).await?;
    let before = log.log_end_offset();
    if before > end {
        log.truncate_to(end).map_err(storage)?;
    }
    let mut runs = index(session, topic, partition, 0).await?;
    // Read after the index: a trim in between only raises it (runs below it are skipped).
    let (start, _) = log_start(session, topic, partition).await?;
    if start > end {
        return Err(crate::Error::Invalid {
            what: "log start",
            detail: format!("{topic}-{partition}: {start} is past the committed end {end}"),
        });
    }
    // The run holding the start, and those after it.
    if let Some(first) = runs.iter().rposition(|(base, _)| *base <= start) {
        runs.drain(..first);
    }
    let first_base = runs.first().map_or(start, |(base, _)| *base);
    if log.log_start_offset() > start {
        // The local log lacks records the cluster still serves.
        log.reset_to(first_base).map_err(storage)?;
    }
    // From the last committed run the local log reaches into, backwards: keep the local
    // prefix once a run is found whole and byte for byte as committed; cut back past any that
    // is not. In the usual case (the local log ends on this node's own last commit, or is
    // empty) one run is compared.
    for (i, (base, object)) in runs.iter().enumerate().rev() {
        let local_end = log.log_end_offset();
        if *base >= local_end {
            continue;
        }
        if *base < log.log_start_offset() {
            // Not comparable: the local log no longer holds the run's beginning.
            log.reset_to(first_base).map_err(storage)?;
            break;
        }
        let run_end = runs.get(i + 1).map_or(end, |(next, _)| *next);
        if run_end == local_end && local_bytes(log, *base, run_end)? == objects.get(object).await? {
            break;
        }
        log.truncate_to(*base).map_err(storage)?;
    }
    if log.log_end_offset() < first_base {
        // What the local log holds was trimmed away: continue at the first run.
        log.reset_to(first_base).map_err(storage)?;
    }
    let kept = log.log_end_offset();
    let truncated = (before - kept).max(0);
    for (base, object) in runs.iter().filter(|(base, _)| *base >= kept) {
        if log.log_end_offset() != *base {
            return Err(crate::Error::Invalid {
                what: "commit index",
                detail: format!(
                    "{topic}-{partition}: a run starts at {base}, the log ends at {}",
                    log.log_end_offset()
                ),
            });
        }
        let mut bytes = objects.get(object).await?.to_vec();
        // The time only matters to LogAppendTime logs (see the module docs).
        log.append(&mut bytes, 0).map_err(storage)?;
    }
    let now = log.log_end_offset();
    if now != end {
        return Err(crate::Error::Invalid {
            what: "commit index",
            detail: format!("{topic}-{partition}: restored to {now}, committed end is {end}"),
        });
    }
    if log.log_start_offset() < start {
        log.delete_records_before(start).map_err(storage)?;
    }
    Ok(CaughtUp {
        truncated,
        fetched: now - kept,
        end: now,
    })
}
