//! The task that finishes ARCHIVING records (KIP-1191): for every loaded share partition
//! holding some, it writes their dead letters ([`crate::dead_letter`]) and then persists them
//! ARCHIVED, in that order (decision 0022); a failed attempt marks the share partition so that
//! the next one scans for what was already written.
//!
//! Must not: archive a record before its dead letter is durable; hold a partition lock across
//! an await other than the share partition's own slot lock.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, warn};

use crate::dead_letter::{write, Failure};
use crate::node::NodeState;
use crate::share::{self, ShareManager};

/// How often loaded share partitions are checked for ARCHIVING records at most (they are also
/// checked as soon as a state write may have made some).
const CHECK_INTERVAL: Duration = Duration::from_millis(100);

impl ShareManager {
    /// Writes the dead letters of the ARCHIVING records of every loaded share partition and
    /// archives them (see the module docs).
    pub async fn write_dead_letters(&self, node: &NodeState) {
        let mut any = false;
        for (key, slot) in self.existing_slots() {
            let mut state = slot.state.lock().await;
            let Some(sp) = state.as_mut() else { continue };
            if sp.violation().is_some() || sp.archiving_count() == 0 {
                continue;
            }
            let ranges = sp.archiving();
            let verify = self.dead_letter_unverified(&key);
            match write(node, &key, &ranges, verify).await {
                Ok(written) => {
                    node.metrics.dead_letters_written(&key.group_id, written);
                }
                Err(Failure::Retry(code)) => {
                    self.mark_dead_letter_unverified(&key);
                    node.metrics.dead_letter_failed(&key.group_id);
                    warn!(?key, ?code, "dead letters not written; retrying");
                    continue;
                }
                Err(Failure::Unwritable(why)) => {
                    node.metrics.dead_letter_failed(&key.group_id);
                    error!(?key, error = %why, "failed to write to DLQ, archiving regardless");
                }
            }
            let (first, last) = (ranges[0].first_offset, ranges[ranges.len() - 1].last_offset);
            let archived = match sp.complete_archiving(first, last) {
                Ok(write) => shoal_core::share_leader::changed(write),
                Err(e) => {
                    share::refusal_code(node, &key, &e);
                    continue;
                }
            };
            match self.persisted(node, &key, archived).await {
                Ok(()) => {
                    self.dead_letter_verified(&key);
                    any = true;
                }
                Err(code) => {
                    // Written but still ARCHIVING in the store: the next attempt must scan.
                    self.mark_dead_letter_unverified(&key);
                    warn!(
                        ?key,
                        ?code,
                        "archiving after the dead letters not persisted"
                    );
                }
            }
        }
        if any {
            self.released.notify_waiters();
        }
    }
}

/// Writes dead letters until `stop` turns true (or the node or the manager is gone): every
/// [`CHECK_INTERVAL`], and when a state write may have made records ARCHIVING.
pub async fn run_dead_letters(
    node: Weak<NodeState>,
    share: Weak<ShareManager>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(due) = share.upgrade().map(|s| s.dead_letters_due.clone()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = due.notified() => {}
            changed = stop.changed() => {
                // A dropped sender (the server task ended or was aborted) stops it too.
                if changed.is_err() {
                    return;
                }
            }
        }
        if *stop.borrow() {
            return;
        }
        let (Some(node), Some(share)) = (node.upgrade(), share.upgrade()) else {
            return;
        };
        share.write_dead_letters(&node).await;
    }
}
