//! Garbage collection of objects (`shared/spec/cluster.md`: "retention and compaction delete
//! objects only after the index no longer points to them"). An object no index entry names —
//! replaced by compaction, or written for a commit that failed or was fenced (a zombie's) —
//! is deleted once it is *provably* unreferenced:
//!
//! - **Every reference is made within [`REFERENCE_DEADLINE`] of its object's PUT.** The only
//!   writes that name an object are a commit (`ObjectCommits` in the broker) and a compaction
//!   ([`crate::compaction`]); each stores the object first, and sends no transaction naming it
//!   once that deadline has passed since the PUT began (the commit fails retriably instead).
//!   Object names are never reused, and nothing ever names an existing object again.
//! - **The collector deletes an object only after it has seen it, unreferenced, for
//!   [`Collector::grace`]** ([`DEFAULT_GRACE`]): it lists the store, then reads every index
//!   entry (a linearizable range read, after the listing), and deletes an object it first
//!   listed at least `grace` ago that no entry names. An object listed at time *t* was PUT
//!   before *t*, so any transaction naming it was sent before *t* + the deadline; one still
//!   not applied a grace later is taken as never applied. The grace is measured on the
//!   collector's own monotonic clock, between two of its own observations: no clock of the
//!   store or of another broker is compared, so clock skew does not matter.
//!
//!   [`DEFAULT_GRACE`] is an hour: the deadline (a minute) plus a margin for a transaction
//!   delayed in the network — Linux gives up on a connection whose data goes unacknowledged
//!   after about 15 minutes of retransmissions (`tcp_retries2`), and etcd applies what it
//!   received while the writer's lease lives or not at all. An hour of orphans is a few
//!   failed commits' worth of bytes.
//! - **Readers** (a restore, a fetch of old data) that read the index and then an object it
//!   named may find it deleted if they took longer than the grace in between, after a
//!   compaction replaced it: they fail with an error and read the index again.
//!
//! Crash safety: a round only deletes; a kill at any point leaves every referenced object in
//! place (each deletion was decided on the rule above) and at worst some orphans for the next
//! round. Two collectors at once would also be safe (each deletes only what the rule allows,
//! and deleting twice is harmless); one broker runs it — the elected assigner — so that the
//! work is not done twice. A new collector starts its grace afresh (what it has seen is in
//! memory only), which delays collection, never hastens it.
//!
//! The store must be this cluster's own (its bucket and prefix): the collector deletes every
//! object named as this crate names them ([`Objects::is_object_name`]) that this cluster's
//! index does not name, and nothing else.
//!
//! etcd keeps every old revision of every key until told to compact its history; the index's
//! rewrites would grow its database without bound. Each round compacts etcd's history up to
//! the revision the previous round read at (a period ago), so watches and reads at a
//! revision newer than that keep working; a watch older than that is cancelled by etcd and
//! the owner table reloads. etcd has one history for all its keys: other clusters sharing
//! the etcd are compacted with it (their watches, too, reload).
//!
//! Its cost per round: one listing of the store and one read of the whole index (pages of
//! 1000 entries at one revision), both bounded because compaction and collection bound them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use etcd_client::{CompactionOptions, GetOptions, PutOptions, SortOrder, SortTarget};
use tokio::time::Instant;

use crate::objects::{ObjectRef, Objects};
use crate::session::Session;

/// A commit or compaction sends no transaction naming an object once this long has passed
/// since the object's PUT began (see the module docs).
pub const REFERENCE_DEADLINE: Duration = Duration::from_secs(60);

/// How long an object must have been seen unreferenced before it is deleted, unless set
/// otherwise (see the module docs).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

/// Index entries read per etcd request (all at one revision).
const INDEX_PAGE: i64 = 1000;

/// What one [`Collector::round`] saw and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Objects in the store.
    pub listed: usize,
    /// Of those, named by an index entry.
    pub referenced: usize,
    /// Unreferenced, within their grace.
    pub awaiting: usize,
    /// Deleted now.
    pub deleted: usize,
    /// The etcd revision the index was read at.
    pub revision: i64,
}

/// The object collector: what it has seen unreferenced, and since when.
#[derive(Debug)]
pub struct Collector {
    grace: Duration,
    /// Unreferenced objects and when each was first listed so.
    first_seen: HashMap<String, Instant>,
    /// The revision the previous round read the index at: the next round compacts etcd's
    /// history up to it.
    previous_revision: i64,
}

impl Collector {
    /// A collector that deletes what it has seen unreferenced for `grace` (at least
    /// [`REFERENCE_DEADLINE`] in production; tests pass less).
    pub fn new(grace: Duration) -> Collector {
        Collector {
            grace,
            first_seen: HashMap::new(),
            previous_revision: 0,
        }
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// One round: list, read the index, delete what the rule allows, compact etcd's history
    /// up to the previous round's revision, and record the report under the session's lease
    /// (for `shoal cluster status`).
    ///
    /// # Errors
    /// The store or etcd failed; what was deleted before stays deleted (each rightly).
    pub async fn round(
        &mut self,
        session: &Session,
        objects: &Objects,
    ) -> crate::Result<Collected> {
        let now = Instant::now();
        let listed: Vec<String> = objects
            .list()
            .await?
            .into_iter()
            .filter(|n| Objects::is_object_name(n))
            .collect();
        // After the listing: every reference to a listed object made before the listing's
        // deadline has passed is in this read.
        let (referenced, revision) = referenced(session).await?;
        let mut done = Collected {
            listed: listed.len(),
            revision,
            ..Collected::default()
        };
        let unreferenced: HashSet<&String> =
            listed.iter().filter(|n| !referenced.contains(*n)).collect();
        // Forget what is referenced now or gone: its grace starts again if it comes back.
        self.first_seen.retain(|n, _| unreferenced.contains(n));
        for name in unreferenced {
            let since = *self.first_seen.entry(name.clone()).or_insert(now);
            if now.duration_since(since) >= self.grace {
                objects.delete(name).await?;
                self.first_seen.remove(name);
                done.deleted += 1;
            } else {
                done.awaiting += 1;
            }
        }
        done.referenced = done.listed - done.awaiting - done.deleted;
        if self.previous_revision > 0 {
            compact_history(session, self.previous_revision).await?;
        }
        self.previous_revision = revision;
        report(session, &done).await?;
        Ok(done)
    }
}

/// The names of the objects every index entry names, and the revision they were read at.
async fn referenced(session: &Session) -> crate::Result<(HashSet<String>, i64)> {
    let prefix = session.keys().index_all();
    let end = format!("{prefix}~");
    let mut client = session.client();
    let mut names = HashSet::new();
    let mut from = prefix.clone();
    let mut revision = 0;
    loop {
        let mut options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(INDEX_PAGE)
            .with_sort(SortTarget::Key, SortOrder::Ascend);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let page = client.get(from.clone(), Some(options)).await?;
        if revision == 0 {
            revision = page.header().map_or(0, |h| h.revision());
        }
        for kv in page.kvs() {
            names.insert(ObjectRef::decode(kv.value())?.name);
        }
        match page.kvs().last() {
            Some(last) if page.more() => {
                let mut next = last.key().to_vec();
                next.push(0);
                from = String::from_utf8_lossy(&next).into_owned();
            }
            _ => return Ok((names, revision)),
        }
    }
}

/// Compacts etcd's history up to `revision` (one already compacted is no error).
async fn compact_history(session: &Session, revision: i64) -> crate::Result<()> {
    let mut client = session.client();
    // Physical: the call returns once the old revisions are gone from etcd's database, so
    // the round reports (and a defragmentation reclaims) what they held.
    let options = CompactionOptions::new().with_physical();
    match client.compact(revision, Some(options)).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("compacted") => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Records `done` under the session's lease at the `collector` key.
async fn report(session: &Session, done: &Collected) -> crate::Result<()> {
    let mut client = session.client();
    client
        .put(
            session.keys().collector(),
            format!(
                "{} {} {} {}",
                done.listed, done.referenced, done.awaiting, done.deleted
            ),
            Some(PutOptions::new().with_lease(session.lease())),
        )
        .await?;
    Ok(())
}

/// The collector's last report, if a live broker recorded one: (listed, referenced,
/// awaiting, deleted).
pub fn parse_report(value: &[u8]) -> Option<(usize, usize, usize, usize)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut f = text.split(' ').map(|v| v.parse().ok());
    Some((f.next()??, f.next()??, f.next()??, f.next()??))
}
