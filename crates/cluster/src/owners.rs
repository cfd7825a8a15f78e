//! Partition ownership in etcd: one owner key per partition, written under the owner's lease.
//!
//! Two numbers name an ownership:
//! - the **fence**: the owner key's mod revision. etcd's revisions only grow, so every new
//!   owner's fence is greater than every earlier one's, and a commit that compares it
//!   ([`crate::commits`]) fences every earlier owner. It is an etcd revision, bumped by every
//!   write of the cluster (commits included), so it soon outgrows Kafka's 32-bit epochs.
//! - the **leader epoch** clients see (Metadata, Fetch, the batches' partition leader epoch):
//!   a per-partition counter kept beside the owner key, not under any lease, raised by one at
//!   each claim in the same transaction, so it grows by one per owner.
//!
//! Claiming is a transaction that writes the owner key only if it does not exist and the
//! counter is still what was read, so two brokers can never both believe a claim succeeded;
//! the owner key vanishes with its owner's lease.
//!
//! [`OwnerTable`] is a broker's view of the brokers and owners, loaded by one range read and
//! kept current by a watch from the revision after it. It routes requests; it never fences.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::keys::Keys;
use crate::session::Session;

/// The owner of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub node_id: i32,
    /// The leader epoch clients see: one more than the previous owner's.
    pub leader_epoch: i32,
    /// The owner key's mod revision, which commits compare.
    pub fence: i64,
}

/// The outcome of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This broker owns the partition now.
    Won(Owner),
    /// Another broker (or this one, under an earlier claim) owns it.
    Owned(Owner),
}

/// How often a claim retries when another claim raced it on the epoch counter.
const CLAIM_ATTEMPTS: usize = 8;

/// Claims `topic`-`partition` for `node_id` under the session's lease, if nobody owns it.
///
/// # Errors
/// etcd unreachable, the lease is gone, or the partition kept changing hands.
pub async fn claim(
    session: &Session,
    node_id: i32,
    topic: &str,
    partition: i32,
) -> crate::Result<Claim> {
    let keys = session.keys();
    let (owner_key, epoch_key) = (keys.owner(topic, partition), keys.epoch(topic, partition));
    let mut client = session.client();
    for _ in 0..CLAIM_ATTEMPTS {
        let counter = client.get(epoch_key.clone(), None).await?;
        let (previous, counter_revision) = counter.kvs().first().map_or((0, 0), |kv| {
            (parse_int(kv.value()).unwrap_or(0), kv.mod_revision())
        });
        let leader_epoch = previous + 1;
        let txn = Txn::new()
            .when([
                Compare::create_revision(owner_key.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(epoch_key.clone(), CompareOp::Equal, counter_revision),
            ])
            .and_then([
                TxnOp::put(
                    owner_key.clone(),
                    format!("{node_id} {leader_epoch}"),
                    Some(PutOptions::new().with_lease(session.lease())),
                ),
                TxnOp::put(epoch_key.clone(), leader_epoch.to_string(), None),
            ])
            .or_else([TxnOp::get(owner_key.clone(), None)]);
        let response = client.txn(txn).await?;
        if response.succeeded() {
            let fence = response.header().map_or(0, |h| h.revision());
            return Ok(Claim::Won(Owner {
                node_id,
                leader_epoch: i32::try_from(leader_epoch).unwrap_or(i32::MAX),
                fence,
            }));
        }
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                if let Some(kv) = get.kvs().first() {
                    return Ok(Claim::Owned(parse_owner(kv.value(), kv.mod_revision())?));
                }
            }
        }
        // Free, but the counter moved (another claim won and its owner already left): again.
    }
    Err(crate::Error::Invalid {
        what: "claim",
        detail: format!("{topic}-{partition} kept changing owner during the claim"),
    })
}

/// Gives up `topic`-`partition` if it is still owned under `fence` (a clean hand-over).
/// Returns whether it was.
///
/// # Errors
/// etcd unreachable.
pub async fn release(
    session: &Session,
    topic: &str,
    partition: i32,
    fence: i64,
) -> crate::Result<bool> {
    let key = session.keys().owner(topic, partition);
    let txn = Txn::new()
        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, fence)])
        .and_then([TxnOp::delete(key, None)]);
    let mut client = session.client();
    Ok(client.txn(txn).await?.succeeded())
}

fn parse_int(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// An owner key's value, `node_id leader_epoch`, written at `fence`.
pub(crate) fn parse_owner(value: &[u8], fence: i64) -> crate::Result<Owner> {
    let text = String::from_utf8_lossy(value);
    let mut fields = text.split(' ').map(str::parse::<i32>);
    match (fields.next(), fields.next(), fields.next()) {
        (Some(Ok(node_id)), Some(Ok(leader_epoch)), None) => Ok(Owner {
            node_id,
            leader_epoch,
            fence,
        }),
        _ => Err(crate::Error::Invalid {
            what: "owner key",
            detail: format!("{text:?} is not `node_id leader_epoch`"),
        }),
    }
}

/// A live broker as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub node_id: i32,
    pub endpoint: String,
}

#[derive(Debug, Default)]
struct Table {
    brokers: BTreeMap<i32, Broker>,
    owners: BTreeMap<(String, i32), Owner>,
    /// The etcd revision the table reflects.
    revision: i64,
}

/// The brokers and partition owners, kept current by a watch.
pub struct OwnerTable {
    table: Arc<RwLock<Table>>,
    watchers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for OwnerTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerTable")
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl Drop for OwnerTable {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

impl OwnerTable {
    /// Loads the brokers and owners and starts watching them.
    ///
    /// # Errors
    /// etcd unreachable.
    pub async fn start(client: Client, keys: Keys) -> crate::Result<OwnerTable> {
        let table = Arc::new(RwLock::new(Table::default()));
        let revision = load(&client, &keys, &table).await?;
        // Two watches, not one over the cluster's root: commits write there all the time.
        let watchers = [keys.brokers(), keys.owners()]
            .into_iter()
            .map(|prefix| {
                let (client, keys, table) = (client.clone(), keys.clone(), table.clone());
                tokio::spawn(watch(client, keys, table, prefix, revision))
            })
            .collect();
        Ok(OwnerTable { table, watchers })
    }

    pub fn owner(&self, topic: &str, partition: i32) -> Option<Owner> {
        let table = self.table.read().expect("owner table lock poisoned");
        table.owners.get(&(topic.to_string(), partition)).copied()
    }

    pub fn brokers(&self) -> Vec<Broker> {
        let table = self.table.read().expect("owner table lock poisoned");
        table.brokers.values().cloned().collect()
    }

    /// Every partition's owner.
    pub fn owners(&self) -> Vec<((String, i32), Owner)> {
        let table = self.table.read().expect("owner table lock poisoned");
        table.owners.iter().map(|(k, o)| (k.clone(), *o)).collect()
    }

    /// The etcd revision the table reflects (it only grows).
    pub fn revision(&self) -> i64 {
        self.table
            .read()
            .expect("owner table lock poisoned")
            .revision
    }
}

/// Reads the brokers and owners into `table`; returns the revision read at.
async fn load(client: &Client, keys: &Keys, table: &RwLock<Table>) -> crate::Result<i64> {
    let mut c = client.clone();
    let brokers = c
        .get(keys.brokers(), Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = brokers.header().map_or(0, |h| h.revision());
    let owners = c
        .get(
            keys.owners(),
            Some(GetOptions::new().with_prefix().with_revision(revision)),
        )
        .await?;
    let mut t = table.write().expect("owner table lock poisoned");
    *t = Table::default();
    for kv in brokers.kvs() {
        apply_put(&mut t, keys, kv.key(), kv.value(), kv.mod_revision());
    }
    for kv in owners.kvs() {
        apply_put(&mut t, keys, kv.key(), kv.value(), kv.mod_revision());
    }
    t.revision = revision;
    Ok(revision)
}

fn apply_put(t: &mut Table, keys: &Keys, key: &[u8], value: &[u8], revision: i64) {
    let key = String::from_utf8_lossy(key);
    if let Some(node_id) = keys.parse_broker(&key) {
        let endpoint = String::from_utf8_lossy(value).into_owned();
        t.brokers.insert(node_id, Broker { node_id, endpoint });
    } else if let Some(partition) = keys.parse_owner(&key) {
        match parse_owner(value, revision) {
            Ok(owner) => {
                t.owners.insert(partition, owner);
            }
            Err(e) => warn!(key = %key, error = %e, "ignoring a malformed owner key"),
        }
    }
}

fn apply_delete(t: &mut Table, keys: &Keys, key: &[u8]) {
    let key = String::from_utf8_lossy(key);
    if let Some(node_id) = keys.parse_broker(&key) {
        t.brokers.remove(&node_id);
    } else if let Some(partition) = keys.parse_owner(&key) {
        t.owners.remove(&partition);
    }
}

/// Applies every change after `revision` to `table`; on a broken watch, reloads and watches
/// again.
async fn watch(
    client: Client,
    keys: Keys,
    table: Arc<RwLock<Table>>,
    prefix: String,
    mut revision: i64,
) {
    loop {
        if let Err(e) = follow(&client, &keys, &prefix, &table, &mut revision).await {
            warn!(error = %e, "etcd watch of brokers and owners broke; reloading");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        match load(&client, &keys, &table).await {
            Ok(r) => revision = r,
            Err(e) => warn!(error = %e, "cannot reload brokers and owners from etcd"),
        }
    }
}

async fn follow(
    client: &Client,
    keys: &Keys,
    prefix: &str,
    table: &RwLock<Table>,
    revision: &mut i64,
) -> crate::Result<()> {
    let mut c = client.clone();
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(*revision + 1);
    let mut stream = c.watch(prefix.to_string(), Some(options)).await?;
    while let Some(response) = stream.message().await? {
        if response.canceled() {
            return Ok(());
        }
        let mut t = table.write().expect("owner table lock poisoned");
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                EventType::Put => apply_put(&mut t, keys, kv.key(), kv.value(), kv.mod_revision()),
                EventType::Delete => apply_delete(&mut t, keys, kv.key()),
            }
            *revision = (*revision).max(kv.mod_revision());
        }
        if let Some(h) = response.header() {
            *revision = (*revision).max(h.revision());
        }
        t.revision = t.revision.max(*revision);
    }
    Ok(())
}
