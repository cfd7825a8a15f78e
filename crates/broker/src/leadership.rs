//! What this node serves, asked of `seams::ownership` and never assumed: the partitions it
//! leads (Produce, Fetch, ShareFetch and every other request naming a partition) and the
//! coordinators it runs (groups, transactional ids), each through the owner of the
//! coordinator's internal partition. The answers are Kafka's: NOT_LEADER_OR_FOLLOWER or
//! LEADER_NOT_AVAILABLE for a partition, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE for a
//! coordinator, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH for a request made under another
//! leader epoch than the one served — on which stock clients refresh their metadata or
//! coordinator and retry.
//!
//! These checks only route clients; the commit (`seams::durability`) is what fences a node
//! that lost a partition between a check and its write.

use std::sync::Arc;

use shoal_protocol::ErrorCode;

use crate::node::{NodeState, CONSUMER_OFFSETS, TRANSACTION_STATE};
use crate::seams::ownership::{Node, NotServed, Owner};
use crate::topic_registry::{Partition, Topic};

/// A coordinator's kind, by the internal topic its state lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorKind {
    /// Consumer and share groups (`__consumer_offsets`).
    Group,
    /// Transactional ids (`__transaction_state`).
    Transaction,
}

impl CoordinatorKind {
    pub fn topic(self) -> &'static str {
        match self {
            CoordinatorKind::Group => CONSUMER_OFFSETS,
            CoordinatorKind::Transaction => TRANSACTION_STATE,
        }
    }

    /// The partition of [`CoordinatorKind::topic`] (of `partitions`) that holds `key`.
    pub fn partition_for(self, key: &str, partitions: u32) -> i32 {
        (match self {
            CoordinatorKind::Group => shoal_core::group_coordinator::partition_for(key, partitions),
            CoordinatorKind::Transaction => {
                shoal_core::txn_coordinator::partition_for(key, partitions)
            }
        }) as i32
    }
}

/// Where a partition is led, for Metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    /// The owner's node id; -1 when nobody owns it.
    pub node_id: i32,
    /// The owner epoch (the leader epoch clients see); -1 when nobody owns it.
    pub epoch: i32,
}

impl NodeState {
    /// Partition `index` of `topic`, if this node serves it.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION; NOT_LEADER_OR_FOLLOWER when another node owns it (or this
    /// one under a newer epoch than it opened it with); LEADER_NOT_AVAILABLE when nobody does.
    pub fn led_partition(&self, topic: &Topic, index: i32) -> Result<Arc<Partition>, ErrorCode> {
        let partition = topic
            .partition(index)
            .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
        self.ownership
            .serves(&topic.name, index, partition.leader_epoch)
            .map_err(|e| match e {
                NotServed::Elsewhere(_) => ErrorCode::NOT_LEADER_OR_FOLLOWER,
                NotServed::Offline => ErrorCode::LEADER_NOT_AVAILABLE,
            })?;
        Ok(partition)
    }

    /// [`NodeState::led_partition`], then the leader epoch a request was made under (`-1`: none
    /// given) against the one served: older is FENCED_LEADER_EPOCH, newer is
    /// UNKNOWN_LEADER_EPOCH (this node has not caught up), as Kafka answers.
    ///
    /// # Errors
    /// As [`NodeState::led_partition`], and the two above.
    pub fn led_partition_at(
        &self,
        topic: &Topic,
        index: i32,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let partition = self.led_partition(topic, index)?;
        match current_leader_epoch {
            -1 => Ok(partition),
            e if e < partition.leader_epoch => Err(ErrorCode::FENCED_LEADER_EPOCH),
            e if e > partition.leader_epoch => Err(ErrorCode::UNKNOWN_LEADER_EPOCH),
            _ => Ok(partition),
        }
    }

    /// Who leads partition `index` of `topic` (Metadata).
    pub fn leader(&self, topic: &str, index: i32) -> Leader {
        match self.ownership.owner(topic, index) {
            Some(Owner { node_id, epoch }) => Leader { node_id, epoch },
            None => Leader {
                node_id: -1,
                epoch: -1,
            },
        }
    }

    /// The partition of the coordinator of `key`, whoever owns it.
    fn coordinator_partition(&self, kind: CoordinatorKind, key: &str) -> Option<Arc<Partition>> {
        let topic = self.topic(kind.topic())?;
        let partitions = topic.partition_count() as u32;
        topic.partition(kind.partition_for(key, partitions))
    }

    /// The node that coordinates `key` (FindCoordinator).
    ///
    /// # Errors
    /// COORDINATOR_NOT_AVAILABLE when the internal topic is missing or nobody owns the
    /// partition.
    pub fn coordinator_node(&self, kind: CoordinatorKind, key: &str) -> Result<Node, ErrorCode> {
        let partition = self
            .coordinator_partition(kind, key)
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        self.internal_owner(kind.topic(), partition.index)
    }

    /// The node that owns partition `index` of the internal topic `topic`.
    ///
    /// # Errors
    /// COORDINATOR_NOT_AVAILABLE when nobody owns it or its owner is not registered.
    pub fn internal_owner(&self, topic: &str, index: i32) -> Result<Node, ErrorCode> {
        let owner = self
            .ownership
            .owner(topic, index)
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        self.ownership
            .nodes()
            .into_iter()
            .find(|n| n.node_id == owner.node_id)
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    }

    /// Whether this node coordinates `key`: it owns the coordinator's partition under the
    /// epoch it opened it with, and its coordinator replayed the partition under that epoch.
    ///
    /// # Errors
    /// NOT_COORDINATOR when another node does (or this one under a newer epoch);
    /// COORDINATOR_NOT_AVAILABLE when the internal topic is missing or nobody owns it;
    /// COORDINATOR_LOAD_IN_PROGRESS while a partition taken over is being replayed.
    pub fn coordinates(&self, kind: CoordinatorKind, key: &str) -> Result<(), ErrorCode> {
        let partition = self
            .coordinator_partition(kind, key)
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        self.serves_internal(kind.topic(), partition.index)
    }

    /// Whether this node serves partition `index` of the internal topic `topic`: it owns it
    /// under the epoch it opened it with, and the topic's coordinator replayed it under that
    /// epoch.
    ///
    /// # Errors
    /// As [`NodeState::coordinates`]; COORDINATOR_NOT_AVAILABLE when the topic or partition
    /// is missing.
    pub fn serves_internal(&self, topic: &str, index: i32) -> Result<(), ErrorCode> {
        let partition = self
            .topic(topic)
            .and_then(|t| t.partition(index))
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        self.ownership
            .serves(topic, partition.index, partition.leader_epoch)
            .map_err(|e| match e {
                NotServed::Elsewhere(_) => ErrorCode::NOT_COORDINATOR,
                NotServed::Offline => ErrorCode::COORDINATOR_NOT_AVAILABLE,
            })?;
        let loaded = self
            .coordinator_loads
            .read()
            .expect("coordinator load lock poisoned")
            .iter()
            .find(|((t, i), _)| *t == topic && *i == partition.index)
            .map(|(_, epoch)| *epoch);
        if loaded == Some(partition.leader_epoch) {
            Ok(())
        } else {
            Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        }
    }
}
