//! Plain configuration, input and output types of the share-group coordinator.
//!
//! They mirror the Kafka wire messages (ShareGroupHeartbeat v1, ShareGroupDescribe v1) field
//! for field but carry no version logic: the broker converts wire messages to and from them.

use std::collections::{BTreeMap, BTreeSet};

use super::records::{
    Assignment, CurrentAssignmentValue, MemberMetadataValue, ShareGroupRecord,
    StatePartitionMetadataValue, TopicId,
};
use crate::group_coordinator::ErrorCode;

/// FENCED_MEMBER_EPOCH (110), kept at this path for its callers.
pub const FENCED_MEMBER_EPOCH: ErrorCode = ErrorCode::FENCED_MEMBER_EPOCH;
/// UNKNOWN_TOPIC_ID (100), kept at this path for its callers.
pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode::UNKNOWN_TOPIC_ID;

/// The member epoch a member sends to leave (`ShareGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH`).
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch a member sends to join or rejoin.
pub const JOIN_GROUP_MEMBER_EPOCH: i32 = 0;
/// Longest member id a client may generate (KafkaApis rejects longer ones).
pub const MEMBER_ID_MAX_CHARS: usize = 36;
/// The assignor name ShareGroupDescribe reports.
pub const ASSIGNOR_NAME: &str = "simple";
/// The protocol type and group type of share groups in ListGroups.
pub const SHARE_GROUP_TYPE: &str = "share";

/// Broker-level share-group settings, with Kafka's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `group.share.max.size`: members per group.
    pub max_size: usize,
    /// `group.share.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.share.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// Share groups this coordinator holds; a join creating one more gets
    /// COORDINATOR_NOT_AVAILABLE (retriable: backpressure). Shoal's limit; Kafka has none.
    pub groups_max: usize,
    /// Topic names in one member's subscription; more gets INVALID_REQUEST. Shoal's limit.
    pub subscribed_topics_max: usize,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        ShareGroupConfig {
            max_size: 200,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            groups_max: 100_000,
            subscribed_topics_max: 10_000,
        }
    }
}

/// Group-level dynamic configuration (ConfigResource GROUP), owned by the broker's config
/// layer and passed in; `None` falls back to the broker default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupOverrides {
    /// `share.session.timeout.ms`.
    pub session_timeout_ms: Option<i32>,
    /// `share.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: Option<i32>,
    /// A per-group member limit. Shoal's extension: Kafka 4.2 has no group-level size config.
    pub max_size: Option<usize>,
}

/// Whether the group id is taken by a classic group. Share groups share the group-id
/// namespace with classic groups, whose coordinator is a separate state machine, so the caller
/// says; Kafka answers GROUP_ID_NOT_FOUND ("Group g is not a share group").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupIdUse {
    /// No classic group has this id.
    Free,
    /// A classic group has this id (even an empty one that only holds committed offsets).
    Classic,
}

/// One topic as the metadata image knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    pub topic_id: TopicId,
    pub partitions: i32,
}

/// The topics of the cluster (name → id and partition count), passed in by the broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicsImage {
    by_name: BTreeMap<String, TopicMetadata>,
    by_id: BTreeMap<TopicId, String>,
}

impl TopicsImage {
    /// Builds an image from (name, id, partition count). Negative counts count as 0; if two
    /// names claim one id, the later name keeps it.
    pub fn new(topics: impl IntoIterator<Item = (String, TopicId, i32)>) -> TopicsImage {
        let mut image = TopicsImage::default();
        for (name, topic_id, partitions) in topics {
            image.insert(name, topic_id, partitions);
        }
        image
    }

    /// Adds or replaces one topic.
    pub fn insert(&mut self, name: String, topic_id: TopicId, partitions: i32) {
        if let Some(old) = self.by_name.remove(&name) {
            self.by_id.remove(&old.topic_id);
        }
        if let Some(old_name) = self.by_id.remove(&topic_id) {
            self.by_name.remove(&old_name);
        }
        self.by_id.insert(topic_id, name.clone());
        let partitions = partitions.max(0);
        self.by_name.insert(
            name,
            TopicMetadata {
                topic_id,
                partitions,
            },
        );
    }

    /// Removes a topic by name.
    pub fn remove(&mut self, name: &str) {
        if let Some(old) = self.by_name.remove(name) {
            self.by_id.remove(&old.topic_id);
        }
    }

    pub fn by_name(&self, name: &str) -> Option<&TopicMetadata> {
        self.by_name.get(name)
    }

    /// The name and metadata of a topic id.
    pub fn by_id(&self, topic_id: &TopicId) -> Option<(&str, &TopicMetadata)> {
        let name = self.by_id.get(topic_id)?;
        let meta = self.by_name.get(name)?;
        Some((name.as_str(), meta))
    }

    /// True if the topic id exists and has this partition.
    pub fn has_partition(&self, topic_id: &TopicId, partition: i32) -> bool {
        self.by_id(topic_id)
            .is_some_and(|(_, m)| (0..m.partitions).contains(&partition))
    }

    /// All topics in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TopicMetadata)> {
        self.by_name.iter().map(|(n, m)| (n.as_str(), m))
    }
}

/// A ShareGroupHeartbeat v1 request plus the request context the group coordinator uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    /// Generated by the client (a UUID string), kept for the member's lifetime.
    pub member_id: String,
    /// 0 = join or rejoin, -1 = leave, otherwise the member's current (or previous) epoch.
    pub member_epoch: i32,
    /// `None` = unchanged.
    pub rack_id: Option<String>,
    /// `None` = unchanged; required (non-empty) on a join.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// From the request header.
    pub client_id: String,
    /// The client's address, as Kafka prints it.
    pub client_host: String,
}

/// One topic's partitions in a heartbeat response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic_id: TopicId,
    pub partitions: Vec<i32>,
}

/// A successful ShareGroupHeartbeat v1 response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub member_id: String,
    /// The member's epoch; -1 after a leave.
    pub member_epoch: i32,
    /// 0 after a leave, as Kafka leaves it unset.
    pub heartbeat_interval_ms: i32,
    /// Present when the member joined or rejoined, sent its subscription, or its assignment
    /// changed (Kafka's rule); the full assignment, not a delta.
    pub assignment: Option<Vec<TopicPartitions>>,
}

/// What a call returns: the reply and the records the broker must append (fsynced) to
/// `__consumer_offsets` before delivering it. The state already reflects the records; if the
/// append fails, the broker must rebuild the coordinator by replaying the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output<T> {
    pub reply: T,
    pub records: Vec<ShareGroupRecord>,
}

/// A member removed because its session timed out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExpiredMember {
    pub group_id: String,
    pub member_id: String,
}

/// Share group lifecycle, with Kafka's state names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareGroupState {
    Empty,
    Stable,
    /// Reported for a group that does not exist.
    Dead,
}

impl ShareGroupState {
    /// Kafka's name, as returned by ShareGroupDescribe / ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            ShareGroupState::Empty => "Empty",
            ShareGroupState::Stable => "Stable",
            ShareGroupState::Dead => "Dead",
        }
    }
}

/// One topic's partitions in ShareGroupDescribe (topic ids unknown to the image are left out,
/// as Kafka does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedTopicPartitions {
    pub topic_id: TopicId,
    pub topic_name: String,
    pub partitions: Vec<i32>,
}

/// A member in ShareGroupDescribe v1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub assignment: Vec<DescribedTopicPartitions>,
}

/// A group in ShareGroupDescribe v1 (authorized operations are the broker's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedGroup {
    /// NONE, or GROUP_ID_NOT_FOUND (unknown id, or an id held by another group type).
    pub error_code: ErrorCode,
    pub group_id: String,
    pub state: ShareGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor_name: String,
    pub members: Vec<DescribedMember>,
}

/// One topic whose share-partition state a deleted group leaves behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareStateTopic {
    pub topic_id: TopicId,
    pub topic_name: String,
    /// Empty for a topic that was only being deleted (Kafka keeps no partitions for those).
    pub partitions: BTreeSet<i32>,
}

/// A share partition with at least one assignee: (group id, topic id, partition).
pub type SharePartitionKey = (String, TopicId, i32);

/// One member's durable part: what the records say about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableMember {
    pub metadata: Option<MemberMetadataValue>,
    pub target: Option<Assignment>,
    pub current: Option<CurrentAssignmentValue>,
}

/// One group's durable part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableGroup {
    /// (group epoch, metadata hash).
    pub epoch: Option<(i32, i64)>,
    pub assignment_epoch: Option<i32>,
    pub members: BTreeMap<String, DurableMember>,
    pub state_partitions: Option<StatePartitionMetadataValue>,
}

/// The durable part of the coordinator; equal for live state and state rebuilt by replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableState {
    pub groups: BTreeMap<String, DurableGroup>,
}
