//! Which node owns a partition, and so a coordinator or a share partition.
//!
//! Every partition — user topics and the internal `__consumer_offsets`,
//! `__transaction_state` and `__share_group_state` alike — has at most one owner at a time,
//! named with an epoch that only grows (cluster spec, "Ownership"). The owner of a data
//! partition is its leader and its share-partition leader; the owner of an internal
//! partition is the coordinator of the groups, transactional ids or share partitions that
//! hash to it. The broker asks [`Ownership`] and never assumes: Metadata and FindCoordinator
//! answer with the owner, and a broker asked for what it does not own answers
//! NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR, as Kafka does.
//!
//! A node serves a partition under the epoch it had when it opened it ([`PartitionEpoch`]); a
//! newer epoch, even its own, means the partition was taken over meanwhile and its in-memory
//! state may be stale, so it is not served until it is opened again. Checking here is not
//! the safety mechanism — a check can be overtaken by a move a moment later — the commit is
//! (see `seams::durability`): it compares the epoch inside the write that makes data durable.
//!
//! [`SingleNode`] is today's broker: this node owns everything, always at epoch 0.
//! [`Assignments`] is the simulated one: a table tests change at will, with epochs drawn
//! from one growing revision counter as etcd's revisions are. [`EtcdOwnership`] is a
//! cluster's: the brokers and owners etcd holds (`shoal_cluster::owners`), followed by a
//! watch, the owner's leader epoch as the epoch.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A broker as clients are told to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// The owner of a partition and the epoch it owns it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub node_id: i32,
    pub epoch: i32,
}

/// The epoch a node opened a partition under; [`NOT_OWNED`] when it did not own it then.
pub type PartitionEpoch = i32;

/// The epoch of a partition this node opened without owning it (never equal to an owner's).
pub const NOT_OWNED: PartitionEpoch = -1;

/// Why this node may not serve a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotServed {
    /// Another node owns it (or this node under a newer epoch than the one it opened it
    /// with): the client should refresh its metadata and go there.
    Elsewhere(Owner),
    /// No live node owns it right now.
    Offline,
}

/// Who owns what; one instance per broker process.
pub trait Ownership: Send + Sync + std::fmt::Debug {
    /// This broker's node id.
    fn local_node(&self) -> i32;

    /// The live brokers, this one included.
    fn nodes(&self) -> Vec<Node>;

    /// The owner of partition `partition` of `topic`, or None when no live node owns it.
    fn owner(&self, topic: &str, partition: i32) -> Option<Owner>;

    /// The epoch to open partition `partition` of `topic` under: the owner's, when it is
    /// this node, else [`NOT_OWNED`].
    fn epoch_to_open(&self, topic: &str, partition: i32) -> PartitionEpoch {
        match self.owner(topic, partition) {
            Some(o) if o.node_id == self.local_node() => o.epoch,
            _ => NOT_OWNED,
        }
    }

    /// Whether this node may serve partition `partition` of `topic`, opened under `opened`:
    /// it must own it still, under that same epoch.
    ///
    /// # Errors
    /// [`NotServed`] naming where it is owned instead, or that nobody owns it.
    fn serves(&self, topic: &str, partition: i32, opened: PartitionEpoch) -> Result<(), NotServed> {
        match self.owner(topic, partition) {
            Some(o) if o.node_id == self.local_node() && o.epoch == opened => Ok(()),
            Some(o) => Err(NotServed::Elsewhere(o)),
            None => Err(NotServed::Offline),
        }
    }
}

/// One broker that owns every partition, always at epoch 0: `shoal serve` without a cluster.
#[derive(Debug, Clone)]
pub struct SingleNode {
    node: Node,
}

impl SingleNode {
    pub fn new(node: Node) -> Self {
        Self { node }
    }
}

impl Ownership for SingleNode {
    fn local_node(&self) -> i32 {
        self.node.node_id
    }

    fn nodes(&self) -> Vec<Node> {
        vec![self.node.clone()]
    }

    fn owner(&self, _topic: &str, _partition: i32) -> Option<Owner> {
        Some(Owner {
            node_id: self.node.node_id,
            epoch: 0,
        })
    }
}

/// A simulated cluster's ownership table: every partition belongs to the local node at
/// epoch 0 until [`Assignments::assign`] or [`Assignments::take_offline`] says otherwise.
/// Each change draws the next value of one revision counter as the new epoch, so epochs only
/// grow, across partitions too (an etcd revision).
#[derive(Debug)]
pub struct Assignments {
    local: i32,
    state: Mutex<Table>,
}

#[derive(Debug)]
struct Table {
    nodes: Vec<Node>,
    owners: BTreeMap<(String, i32), Option<Owner>>,
    revision: i32,
}

impl Assignments {
    /// `nodes` are the live brokers; `local` is this one's id.
    pub fn new(local: i32, nodes: Vec<Node>) -> Self {
        Self {
            local,
            state: Mutex::new(Table {
                nodes,
                owners: BTreeMap::new(),
                revision: 0,
            }),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives partition `partition` of `topic` to `node_id` under a new epoch; returns it.
    pub fn assign(&self, topic: &str, partition: i32, node_id: i32) -> Owner {
        let mut table = self.table();
        table.revision += 1;
        let owner = Owner {
            node_id,
            epoch: table.revision,
        };
        table
            .owners
            .insert((topic.to_string(), partition), Some(owner));
        owner
    }

    /// Leaves partition `partition` of `topic` without an owner (its owner died and nobody
    /// took it yet).
    pub fn take_offline(&self, topic: &str, partition: i32) {
        self.table()
            .owners
            .insert((topic.to_string(), partition), None);
    }
}

impl Ownership for Assignments {
    fn local_node(&self) -> i32 {
        self.local
    }

    fn nodes(&self) -> Vec<Node> {
        self.table().nodes.clone()
    }

    fn owner(&self, topic: &str, partition: i32) -> Option<Owner> {
        match self.table().owners.get(&(topic.to_string(), partition)) {
            Some(assigned) => *assigned,
            None => Some(Owner {
                node_id: self.local,
                epoch: 0,
            }),
        }
    }
}

/// A cluster's ownership: what etcd says, as this broker's watch last saw it.
#[derive(Debug)]
pub struct EtcdOwnership {
    local: i32,
    table: std::sync::Arc<shoal_cluster::OwnerTable>,
}

impl EtcdOwnership {
    /// The ownership seen by broker `local` through `table` (which the cluster's commits
    /// share, for the fences).
    pub fn new(local: i32, table: std::sync::Arc<shoal_cluster::OwnerTable>) -> Self {
        Self { local, table }
    }
}

/// A registered endpoint, `host:port[ rack]`, as a node; None when malformed.
fn parse_endpoint(node_id: i32, endpoint: &str) -> Option<Node> {
    let (address, rack) = match endpoint.split_once(' ') {
        Some((address, rack)) => (address, Some(rack.to_string())),
        None => (endpoint, None),
    };
    let (host, port) = address.rsplit_once(':')?;
    Some(Node {
        node_id,
        host: host.to_string(),
        port: port.parse().ok()?,
        rack,
    })
}

impl Ownership for EtcdOwnership {
    fn local_node(&self) -> i32 {
        self.local
    }

    fn nodes(&self) -> Vec<Node> {
        self.table
            .brokers()
            .iter()
            .filter_map(|b| parse_endpoint(b.node_id, &b.endpoint))
            .collect()
    }

    fn owner(&self, topic: &str, partition: i32) -> Option<Owner> {
        self.table.owner(topic, partition).map(|o| Owner {
            node_id: o.node_id,
            epoch: o.leader_epoch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: i32) -> Node {
        Node {
            node_id: id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            rack: None,
        }
    }

    #[test]
    fn registered_endpoints_become_nodes_or_are_skipped() {
        assert_eq!(
            parse_endpoint(3, "broker-3.test:9093 rack-a"),
            Some(Node {
                node_id: 3,
                host: "broker-3.test".into(),
                port: 9093,
                rack: Some("rack-a".into()),
            })
        );
        assert_eq!(parse_endpoint(1, "127.0.0.1:9001"), Some(node(1)));
        for bad in ["", "host", "host:", "host:port", "host:70000"] {
            assert_eq!(parse_endpoint(1, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_single_node_owns_everything_at_epoch_zero() {
        let one = SingleNode::new(node(1));
        assert_eq!(
            one.owner("t", 7),
            Some(Owner {
                node_id: 1,
                epoch: 0
            })
        );
        assert_eq!(one.epoch_to_open("t", 7), 0);
        assert_eq!(one.serves("t", 7, 0), Ok(()));
        assert_eq!(one.nodes(), vec![node(1)]);
    }

    #[test]
    fn a_move_fences_the_epoch_a_partition_was_opened_under() {
        let table = Assignments::new(1, vec![node(1), node(2)]);
        let opened = table.epoch_to_open("t", 0);
        assert_eq!(table.serves("t", 0, opened), Ok(()));
        let moved = table.assign("t", 0, 2);
        assert_eq!(
            table.serves("t", 0, opened),
            Err(NotServed::Elsewhere(moved))
        );
        assert_eq!(table.epoch_to_open("t", 0), NOT_OWNED);
        // Back here: a newer epoch, so what was opened before is still not served...
        let back = table.assign("t", 0, 1);
        assert!(back.epoch > moved.epoch);
        assert_eq!(
            table.serves("t", 0, opened),
            Err(NotServed::Elsewhere(back))
        );
        // ...until it is opened again under the new one.
        assert_eq!(table.serves("t", 0, table.epoch_to_open("t", 0)), Ok(()));
        // Other partitions are untouched.
        assert_eq!(table.serves("t", 1, 0), Ok(()));
    }

    #[test]
    fn an_offline_partition_is_served_by_nobody() {
        let table = Assignments::new(1, vec![node(1)]);
        table.take_offline("t", 3);
        assert_eq!(table.owner("t", 3), None);
        assert_eq!(table.serves("t", 3, 0), Err(NotServed::Offline));
        assert_eq!(table.epoch_to_open("t", 3), NOT_OWNED);
    }

    #[test]
    fn epochs_only_grow_across_partitions() {
        let table = Assignments::new(1, vec![node(1), node(2)]);
        let a = table.assign("a", 0, 2);
        let b = table.assign("b", 5, 1);
        let c = table.assign("a", 0, 1);
        assert!(a.epoch < b.epoch && b.epoch < c.epoch);
    }
}
