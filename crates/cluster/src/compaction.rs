//! Object compaction (`shared/spec/cluster.md`, "The commit point": "objects that hold many
//! partitions are rewritten in the background into per-partition segment objects, so that
//! etcd holds a bounded index"). Every group commit adds one index entry per partition it
//! touches; compaction, run by a partition's owner, replaces runs of consecutive small
//! entries by one entry naming a new per-partition *segment* object that holds the same
//! bytes, in the same order, at the same offsets.
//!
//! One group is compacted in three steps:
//!
//! 1. the entries' byte ranges are read from their objects and concatenated;
//! 2. the concatenation is stored as a new object under a name never used before (durable
//!    before step 3, as a commit's object is);
//! 3. one etcd transaction compares the owner fence (as commits do) and that every replaced
//!    entry is unchanged (its mod revision), and only then puts the covering entry at the
//!    first entry's key and deletes the others.
//!
//! Kill it anywhere and nothing is lost: before step 3 the index is untouched and the new
//! object is an orphan (named by no entry; [`crate::collector`] deletes it after its grace);
//! step 3 is one transaction, all or nothing; after it the replaced objects are unreferenced
//! by this partition and are collected once no entry names them. A commit racing a
//! compaction never conflicts with it: commits only add an entry at the committed end, and
//! the last entry (whose end is the committed end, which a commit moves) is never compacted,
//! so every group's offsets are bounded by the key of the entry after it, which nothing but a
//! fenced owner's compaction or trim rewrites. A lost owner, or a group changed meanwhile,
//! fails the comparisons and nothing changes. Compaction deletes no object.
//!
//! Which entries are grouped ([`plan`]): an entry of at least half a segment
//! ([`Policy::segment_bytes`]) is *sealed* and never rewritten; once more than
//! [`Policy::runs_max`] unsealed entries (the last apart) accumulate, consecutive unsealed
//! entries are grouped greedily up to a segment's size and [`ENTRIES_PER_GROUP_MAX`] entries
//! (etcd takes at most 128 comparisons and 128 operations per transaction). So a partition's
//! index holds at most `runs_max + 1` unsealed entries between rounds plus one sealed entry per
//! half segment of retained bytes. The price: a slow partition's unsealed bytes are rewritten
//! each time `runs_max` more entries join them, until they seal.

use bytes::BytesMut;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::commits::index_base;
use crate::objects::{ObjectRef, Objects};
use crate::session::Session;

/// Entries replaced by one compaction at most: one comparison each plus the owner fence, one
/// operation each, within etcd's default `--max-txn-ops` of 128.
pub const ENTRIES_PER_GROUP_MAX: usize = 100;

/// When and how much to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Unsealed entries (the last apart) a partition may hold before it is compacted. Each
    /// group commit adds one per partition it touches, so this is also how many commits of a
    /// partition a compaction waits for. 16 keeps an idle cluster's index at a few entries per
    /// partition (a few KiB of etcd) and a restore to a handful of ranged GETs past the
    /// segments, while rewriting a slow partition's young bytes only every 16 commits.
    pub runs_max: usize,
    /// A segment object's target size: groups are cut at it, and an entry of at least half of
    /// it is sealed. 16 MiB bounds the memory one compaction holds and makes one old read of
    /// up to that a single ranged GET.
    pub segment_bytes: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            runs_max: 16,
            segment_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One index entry as read, with what compaction compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub base_offset: i64,
    pub object: ObjectRef,
    /// The entry key's mod revision when read.
    pub mod_revision: i64,
}

/// A partition's index: its entries in offset order and its committed end, read at one
/// revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    pub entries: Vec<Entry>,
    pub committed_end: i64,
    /// The etcd revision it was read at.
    pub revision: i64,
}

/// Reads `topic`-`partition`'s index entries and committed end at one revision.
///
/// # Errors
/// etcd unreachable, or a malformed entry.
pub async fn read_index(session: &Session, topic: &str, partition: i32) -> crate::Result<Index> {
    let keys = session.keys();
    let prefix = keys.index(topic, partition);
    let mut client = session.client();
    let got = client
        .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = got.header().map_or(0, |h| h.revision());
    let end = client
        .get(
            keys.end(topic, partition),
            Some(GetOptions::new().with_revision(revision)),
        )
        .await?;
    let committed_end = match end.kvs().first() {
        Some(kv) => std::str::from_utf8(kv.value())
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| crate::Error::Invalid {
                what: "committed end",
                detail: String::from_utf8_lossy(kv.value()).into_owned(),
            })?,
        None => 0,
    };
    let entries = got
        .kvs()
        .iter()
        .map(|kv| {
            Ok(Entry {
                base_offset: index_base(kv.key(), &prefix)?,
                object: ObjectRef::decode(kv.value())?,
                mod_revision: kv.mod_revision(),
            })
        })
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(Index {
        entries,
        committed_end,
        revision,
    })
}

/// The groups of `entries` (index ranges, two entries or more each) to compact under
/// `policy`; none while the unsealed entries, the last apart, are `runs_max` or fewer.
pub fn plan(entries: &[Entry], policy: Policy) -> Vec<std::ops::Range<usize>> {
    let sealed = |e: &Entry| e.object.len.saturating_mul(2) >= policy.segment_bytes;
    let candidates = entries.len().saturating_sub(1);
    let unsealed = entries[..candidates].iter().filter(|e| !sealed(e)).count();
    if unsealed <= policy.runs_max {
        return Vec::new();
    }
    let mut groups = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    let close = |groups: &mut Vec<_>, start: usize, end: usize| {
        if end - start >= 2 {
            groups.push(start..end);
        }
    };
    for (i, entry) in entries[..candidates].iter().enumerate() {
        if sealed(entry) {
            close(&mut groups, start, i);
            start = i + 1;
            bytes = 0;
            continue;
        }
        let full = i - start >= ENTRIES_PER_GROUP_MAX
            || bytes.saturating_add(entry.object.len) > policy.segment_bytes;
        if full {
            close(&mut groups, start, i);
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(entry.object.len);
    }
    close(&mut groups, start, candidates);
    groups
}

/// What [`compact`] did to one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Groups replaced by a segment.
    pub groups: usize,
    /// Entries those groups held.
    pub entries_replaced: usize,
    /// Bytes written into segment objects (recorded or not).
    pub bytes_written: u64,
    /// Groups whose transaction was refused (the owner changed, or an entry did): their
    /// segment objects are orphans.
    pub refused: usize,
}

/// Compacts `topic`-`partition`, owned by `node_id` under `fence`, under `policy`.
///
/// # Errors
/// etcd or the object store failed (what was recorded before stays recorded; an object
/// stored for a group not recorded is an orphan).
pub async fn compact(
    session: &Session,
    objects: &Objects,
    node_id: i32,
    (topic, partition): (&str, i32),
    fence: i64,
    policy: Policy,
) -> crate::Result<Compacted> {
    let index = read_index(session, topic, partition).await?;
    let mut done = Compacted::default();
    for group in plan(&index.entries, policy) {
        let entries = &index.entries[group];
        let (segment, recorded) = compact_group(
            session,
            objects,
            node_id,
            (topic, partition),
            fence,
            entries,
        )
        .await?;
        done.bytes_written += segment.len;
        if recorded {
            done.groups += 1;
            done.entries_replaced += entries.len();
        } else {
            done.refused += 1;
            // Something changed under us: the next round reads the index again.
            break;
        }
    }
    Ok(done)
}

/// Replaces `entries` (consecutive, as read by [`read_index`], the partition's last entry
/// not among them) by one segment object holding their bytes: the segment written, then
/// whether the transaction recorded it (false: the owner fence or an entry changed, or the
/// PUT outlasted [`crate::collector::REFERENCE_DEADLINE`]; the segment is an orphan).
///
/// # Errors
/// Fewer than two entries; etcd or the object store failed.
pub async fn compact_group(
    session: &Session,
    objects: &Objects,
    node_id: i32,
    (topic, partition): (&str, i32),
    fence: i64,
    entries: &[Entry],
) -> crate::Result<(ObjectRef, bool)> {
    if entries.len() < 2 || entries.len() > ENTRIES_PER_GROUP_MAX {
        return Err(crate::Error::Invalid {
            what: "compaction group",
            detail: format!("{topic}-{partition}: {} entries", entries.len()),
        });
    }
    let mut bytes = BytesMut::new();
    for e in entries {
        bytes.extend_from_slice(&objects.get(&e.object).await?);
    }
    let segment = ObjectRef {
        name: Objects::unique_name(node_id),
        position: 0,
        len: bytes.len() as u64,
    };
    let started = tokio::time::Instant::now();
    objects.put(&segment.name, bytes.freeze()).await?;
    // A reference is only ever sent within REFERENCE_DEADLINE of its object's PUT: the
    // collector's grace rests on it.
    if started.elapsed() >= crate::collector::REFERENCE_DEADLINE {
        return Ok((segment, false));
    }
    let recorded = replace(session, (topic, partition), fence, entries, &segment).await?;
    Ok((segment, recorded))
}

/// The transaction of step 3: `entries` replaced by `segment` if the owner fence and every
/// entry are unchanged. Whether it was.
async fn replace(
    session: &Session,
    (topic, partition): (&str, i32),
    fence: i64,
    entries: &[Entry],
    segment: &ObjectRef,
) -> crate::Result<bool> {
    let keys = session.keys();
    let mut compares = Vec::with_capacity(entries.len() + 1);
    compares.push(Compare::mod_revision(
        keys.owner(topic, partition),
        CompareOp::Equal,
        fence,
    ));
    let mut ops = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let key = keys.index_entry(topic, partition, e.base_offset);
        compares.push(Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            e.mod_revision,
        ));
        ops.push(if i == 0 {
            TxnOp::put(key, segment.encode(), None)
        } else {
            TxnOp::delete(key, None)
        });
    }
    let mut client = session.client();
    Ok(client
        .txn(Txn::new().when(compares).and_then(ops))
        .await?
        .succeeded())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(lens: &[u64]) -> Vec<Entry> {
        lens.iter()
            .enumerate()
            .map(|(i, len)| Entry {
                base_offset: i as i64 * 10,
                object: ObjectRef {
                    name: format!("o{i}"),
                    position: 0,
                    len: *len,
                },
                mod_revision: 1,
            })
            .collect()
    }

    const POLICY: Policy = Policy {
        runs_max: 3,
        segment_bytes: 100,
    };

    #[test]
    fn nothing_is_compacted_until_more_than_runs_max_unsealed_entries() {
        // Four entries, the last apart: three unsealed, not more than runs_max.
        assert!(plan(&entries(&[1, 1, 1, 1]), POLICY).is_empty());
        // Sealed entries do not count.
        assert!(plan(&entries(&[60, 60, 60, 1, 1, 1, 1]), POLICY).is_empty());
        assert!(plan(&[], POLICY).is_empty());
    }

    #[test]
    fn groups_are_consecutive_unsealed_entries_up_to_a_segment_and_never_the_last() {
        assert_eq!(plan(&entries(&[1, 1, 1, 1, 1]), POLICY), vec![0..4]);
        // A sealed entry splits the groups; a lone unsealed entry is left as it is.
        assert_eq!(
            plan(&entries(&[10, 10, 50, 10, 70, 10, 10, 10]), POLICY),
            vec![0..2, 5..7]
        );
        // Cut at the segment size.
        assert_eq!(
            plan(&entries(&[40, 40, 40, 40, 40, 1]), POLICY),
            vec![0..2, 2..4]
        );
    }

    #[test]
    fn a_group_fits_one_etcd_transaction() {
        let many = entries(&vec![0; 350]);
        let policy = Policy {
            runs_max: 3,
            segment_bytes: u64::MAX,
        };
        let groups = plan(&many, policy);
        assert!(groups.iter().all(|g| g.len() <= ENTRIES_PER_GROUP_MAX));
        assert_eq!(groups.first().map(|g| g.start), Some(0));
        assert_eq!(groups.last().map(|g| g.end), Some(349));
        assert!(groups.windows(2).all(|w| w[0].end == w[1].start));
    }
}
