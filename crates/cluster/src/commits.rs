//! The commit point (`shared/spec/cluster.md`, "The commit point"): one etcd transaction per
//! group commit that, for every partition it touches, compares
//!
//! - the owner key's mod revision with the fence the committer owns the partition under
//!   ([`crate::owners::Owner::fence`]) — a zombie owner (paused past its lease, cut off from
//!   etcd) fails here, and its object is garbage; and
//! - the committed end offset with the offset the commit starts at — so commits of a
//!   partition are contiguous, and a commit whose outcome the committer never learned (a
//!   timeout) cannot be overtaken by a later one that assumed it failed;
//!
//! and only if all match records, per partition, the new end offset and an index entry naming
//! the object and the byte range its records are in. The object must already be durable (see
//! [`crate::objects`]). A partition never committed has no end key: its first commit starts at
//! 0 and compares that the key does not exist.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use crate::objects::ObjectRef;
use crate::owners::{parse_owner, Owner};
use crate::session::Session;

/// One partition's part of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCommit {
    pub topic: String,
    pub partition: i32,
    /// The fence the committer owns the partition under (its owner key's mod revision).
    pub fence: i64,
    /// The first offset of the records committed: the partition's committed end now.
    pub base_offset: i64,
    /// The offset after the last record committed.
    pub end_offset: i64,
    /// Where those records' bytes are.
    pub object: ObjectRef,
}

/// Why nothing of a commit was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitRefused {
    /// `topic`-`partition` is owned under another fence now (or by nobody).
    Fenced {
        topic: String,
        partition: i32,
        owner: Option<Owner>,
    },
    /// `topic`-`partition`'s committed end is not where the commit starts.
    NotContiguous {
        topic: String,
        partition: i32,
        committed_end: i64,
    },
}

/// Commits `parts` in one transaction: all recorded, or none.
///
/// # Errors
/// `Ok(Err(refused))` when a comparison failed (nothing recorded); `Err` when etcd could not
/// be asked or answered nothing (the outcome is unknown: the committer must re-read the ends
/// before committing again, which the contiguity comparison enforces).
pub async fn commit(
    session: &Session,
    parts: &[PartitionCommit],
) -> crate::Result<Result<i64, CommitRefused>> {
    let keys = session.keys();
    let mut compares = Vec::with_capacity(parts.len() * 2);
    let mut puts = Vec::with_capacity(parts.len() * 2);
    let mut reads = Vec::with_capacity(parts.len() * 2);
    for p in parts {
        if p.end_offset <= p.base_offset {
            return Err(crate::Error::Invalid {
                what: "commit",
                detail: format!(
                    "{}-{}: end {} not after base {}",
                    p.topic, p.partition, p.end_offset, p.base_offset
                ),
            });
        }
        let owner = keys.owner(&p.topic, p.partition);
        let end = keys.end(&p.topic, p.partition);
        compares.push(Compare::mod_revision(
            owner.clone(),
            CompareOp::Equal,
            p.fence,
        ));
        compares.push(if p.base_offset == 0 {
            Compare::create_revision(end.clone(), CompareOp::Equal, 0)
        } else {
            Compare::value(end.clone(), CompareOp::Equal, p.base_offset.to_string())
        });
        puts.push(TxnOp::put(end.clone(), p.end_offset.to_string(), None));
        puts.push(TxnOp::put(
            keys.index_entry(&p.topic, p.partition, p.base_offset),
            p.object.encode(),
            None,
        ));
        reads.push(TxnOp::get(owner, None));
        reads.push(TxnOp::get(end, None));
    }
    let txn = Txn::new().when(compares).and_then(puts).or_else(reads);
    let mut client = session.client();
    let response = client.txn(txn).await?;
    if response.succeeded() {
        return Ok(Ok(response.header().map_or(0, |h| h.revision())));
    }
    // Which comparison failed: the reads come back in the parts' order, owner then end.
    let gets: Vec<_> = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    for (p, pair) in parts.iter().zip(gets.chunks(2)) {
        let owner = match pair[0].kvs().first() {
            Some(kv) => Some(parse_owner(kv.value(), kv.mod_revision())?),
            None => None,
        };
        if owner.map(|o| o.fence) != Some(p.fence) {
            return Ok(Err(CommitRefused::Fenced {
                topic: p.topic.clone(),
                partition: p.partition,
                owner,
            }));
        }
        let committed_end = pair
            .get(1)
            .and_then(|g| g.kvs().first())
            .map_or(0, |kv| parse_i64(kv.value()));
        if committed_end != p.base_offset {
            return Ok(Err(CommitRefused::NotContiguous {
                topic: p.topic.clone(),
                partition: p.partition,
                committed_end,
            }));
        }
    }
    Err(crate::Error::Invalid {
        what: "commit",
        detail: "refused, yet every comparison holds on re-read; retry".to_string(),
    })
}

/// The committed end offset of `topic`-`partition` (0 when never committed).
///
/// # Errors
/// etcd unreachable.
pub async fn committed_end(session: &Session, topic: &str, partition: i32) -> crate::Result<i64> {
    let mut client = session.client();
    let got = client
        .get(session.keys().end(topic, partition), None)
        .await?;
    Ok(got.kvs().first().map_or(0, |kv| parse_i64(kv.value())))
}

/// The base offset an index entry's key names (`key` is under the partition's `prefix`).
///
/// # Errors
/// A key that is not `prefix` and a number.
pub(crate) fn index_base(key: &[u8], prefix: &str) -> crate::Result<i64> {
    let key = String::from_utf8_lossy(key);
    key.strip_prefix(prefix)
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| crate::Error::Invalid {
            what: "index key",
            detail: key.to_string(),
        })
}

/// The index entries of `topic`-`partition` whose base offset is `from` or later: (base
/// offset, where its records are), in offset order.
///
/// # Errors
/// etcd unreachable, or a malformed entry.
pub async fn index(
    session: &Session,
    topic: &str,
    partition: i32,
    from: i64,
) -> crate::Result<Vec<(i64, ObjectRef)>> {
    let keys = session.keys();
    let prefix = keys.index(topic, partition);
    let mut client = session.client();
    let options = GetOptions::new().with_range(format!("{prefix}~"));
    let got = client
        .get(
            keys.index_entry(topic, partition, from.max(0)),
            Some(options),
        )
        .await?;
    got.kvs()
        .iter()
        .map(|kv| {
            Ok((
                index_base(kv.key(), &prefix)?,
                ObjectRef::decode(kv.value())?,
            ))
        })
        .collect()
}

fn parse_i64(value: &[u8]) -> i64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(-1)
}
