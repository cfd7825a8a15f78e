//! The assignment of partitions to brokers, decided by one elected broker at a time and
//! followed by every broker (`shared/spec/cluster.md`, "Ownership").
//!
//! - [`campaign`]: a broker becomes the assigner by creating the `assigner` key under its
//!   lease (only if absent); it stays assigner while its lease lives. The election only avoids
//!   duelling assigners; it is fenced anyway: [`write`] compares the assigner key's mod
//!   revision, so a deposed assigner (its lease gone) writes nothing.
//! - [`write`] records the decision (`shoal_core::assignment::rebalance`) as one
//!   `assignments/<topic>/<partition>` key per partition whose broker changed, in one
//!   transaction.
//! - [`reconcile`]: what a broker does with the assignment — claim what is assigned to it and
//!   free, release what it owns and is assigned elsewhere (the new broker claims it once the
//!   owner key is gone). Ownership itself is only ever taken by a claim ([`crate::owners`]).

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use crate::owners::{self, Claim, Owner};
use crate::session::Session;

/// A partition: (topic, partition index).
pub type Partition = (String, i32);

/// This broker is the assigner while the key it created, at `fence`, still exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    pub fence: i64,
}

/// Tries to become the assigner. None: another live broker is (its node id read back).
///
/// # Errors
/// etcd unreachable or the lease gone.
pub async fn campaign(
    session: &Session,
    node_id: i32,
) -> crate::Result<Result<Leadership, Option<i32>>> {
    let key = session.keys().assigner();
    // Already the assigner (an earlier round won): the key's revision is the leadership.
    let mut client = session.client();
    if let Some(kv) = client.get(key.clone(), None).await?.kvs().first() {
        if kv.lease() == session.lease() {
            return Ok(Ok(Leadership {
                fence: kv.mod_revision(),
            }));
        }
    }
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            node_id.to_string(),
            Some(PutOptions::new().with_lease(session.lease())),
        )])
        .or_else([TxnOp::get(key, None)]);
    let response = client.txn(txn).await?;
    if response.succeeded() {
        let fence = response.header().map_or(0, |h| h.revision());
        return Ok(Ok(Leadership { fence }));
    }
    let holder = response.op_responses().into_iter().find_map(|op| match op {
        etcd_client::TxnOpResponse::Get(get) => get
            .kvs()
            .first()
            .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok()),
        _ => None,
    });
    Ok(Err(holder))
}

/// The assignment as recorded.
///
/// # Errors
/// etcd unreachable, or a malformed key or value.
pub async fn read(session: &Session) -> crate::Result<BTreeMap<Partition, i32>> {
    let keys = session.keys();
    let mut client = session.client();
    let got = client
        .get(keys.assignments(), Some(GetOptions::new().with_prefix()))
        .await?;
    got.kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key());
            let partition = keys.parse_assignment(&key);
            let node = std::str::from_utf8(kv.value())
                .ok()
                .and_then(|v| v.parse().ok());
            match (partition, node) {
                (Some(p), Some(n)) => Ok((p, n)),
                _ => Err(crate::Error::Invalid {
                    what: "assignment",
                    detail: key.into_owned(),
                }),
            }
        })
        .collect()
}

/// Records `next` where it differs from `current`, as the assigner of `leadership`. Returns
/// false, writing nothing, when this broker is no longer the assigner.
///
/// # Errors
/// etcd unreachable.
pub async fn write(
    session: &Session,
    leadership: Leadership,
    current: &BTreeMap<Partition, i32>,
    next: &BTreeMap<Partition, i32>,
) -> crate::Result<bool> {
    let keys = session.keys();
    let mut ops: Vec<TxnOp> = next
        .iter()
        .filter(|(p, node)| current.get(*p) != Some(node))
        .map(|((topic, partition), node)| {
            TxnOp::put(keys.assignment(topic, *partition), node.to_string(), None)
        })
        .collect();
    ops.extend(
        current
            .keys()
            .filter(|p| !next.contains_key(*p))
            .map(|(topic, partition)| TxnOp::delete(keys.assignment(topic, *partition), None)),
    );
    // etcd bounds the operations of one transaction (`--max-txn-ops`, 128 by default): a
    // large change goes in several, each fenced; one refused stops the rest, and what was
    // recorded is a valid assignment the next round completes.
    let mut client = session.client();
    for chunk in ops.chunks(TXN_OPS_MAX) {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                keys.assigner(),
                CompareOp::Equal,
                leadership.fence,
            )])
            .and_then(chunk.to_vec());
        if !client.txn(txn).await?.succeeded() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Operations per etcd transaction at most (etcd's default limit is 128).
pub const TXN_OPS_MAX: usize = 100;

/// What [`reconcile`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Claimed now, with the ownership won.
    pub claimed: Vec<(Partition, Owner)>,
    /// Given up, to the broker they are assigned to.
    pub released: Vec<Partition>,
}

/// Brings `node_id`'s ownership in line with `assignment`, given the owners as known: claims
/// every partition assigned to it that nobody owns, releases every one it owns that is
/// assigned elsewhere.
///
/// # Errors
/// etcd unreachable or the lease gone.
pub async fn reconcile(
    session: &Session,
    node_id: i32,
    assignment: &BTreeMap<Partition, i32>,
    owned: &BTreeMap<Partition, Owner>,
) -> crate::Result<Reconciled> {
    let mut done = Reconciled::default();
    for (p, owner) in owned {
        let elsewhere = assignment.get(p).is_some_and(|n| *n != node_id);
        if owner.node_id == node_id
            && elsewhere
            && owners::release(session, &p.0, p.1, owner.fence).await?
        {
            done.released.push(p.clone());
        }
    }
    for (p, assigned) in assignment {
        if *assigned != node_id || owned.contains_key(p) {
            continue;
        }
        if let Claim::Won(owner) = owners::claim(session, node_id, &p.0, p.1).await? {
            done.claimed.push((p.clone(), owner));
        }
    }
    Ok(done)
}
