//! ShareAcknowledge (api key 79) v1-2 (KIP-932). Version 2 (KIP-1222) adds the request's
//! `IsRenewAck` and the response's `AcquisitionLockTimeoutMs`. Version 0 (Kafka 4.0 early access)
//! was removed in Kafka 4.1 and is not supported.

use std::collections::BTreeMap;

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::wire::{self, Sink, Wire};
use super::{message, ShareAcknowledgeResponse as Response};

pub use super::{AcknowledgementBatch, LeaderIdAndEpoch, NodeEndpoint};

/// ShareAcknowledge request. Defaults as in the schema: `group_id` null, `member_id` empty.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareAcknowledgeRequest {
    /// The group identifier.
    pub group_id: Option<GroupId>,
    /// The member ID.
    pub member_id: Option<StrBytes>,
    /// The current share session epoch: 0 to open a share session; -1 to close it; otherwise
    /// increments for consecutive requests.
    pub share_session_epoch: i32,
    /// v2+: whether Renew type acknowledgements are present in the acknowledgement batches.
    pub is_renew_ack: bool,
    /// The topics containing records to acknowledge.
    pub topics: Vec<AcknowledgeTopic>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Default for ShareAcknowledgeRequest {
    fn default() -> Self {
        Self {
            group_id: None,
            member_id: Some(StrBytes::default()),
            share_session_epoch: 0,
            is_renew_ack: false,
            topics: Vec::new(),
            unknown_tagged_fields: BTreeMap::new(),
        }
    }
}

impl Wire for ShareAcknowledgeRequest {
    const MIN_SIZE: usize = 1 + 1 + 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        let group_id = wire::nullable_string(buf, "GroupId")?.map(GroupId);
        let member_id = wire::nullable_string(buf, "MemberId")?;
        let share_session_epoch = wire::i32(buf, "ShareSessionEpoch")?;
        let is_renew_ack = if version >= 2 {
            wire::bool(buf, "IsRenewAck")?
        } else {
            false
        };
        Ok(Self {
            group_id,
            member_id,
            share_session_epoch,
            is_renew_ack,
            topics: wire::structs(buf, version, "Topics")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareAcknowledgeRequest")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_nullable_string(out, self.group_id.as_deref().map(|g| &**g), "GroupId")?;
        wire::put_nullable_string(out, self.member_id.as_deref(), "MemberId")?;
        wire::put_i32(out, self.share_session_epoch);
        if version >= 2 {
            wire::put_bool(out, self.is_renew_ack);
        } else {
            wire::absent(&self.is_renew_ack, &false, "IsRenewAck", version)?;
        }
        wire::put_structs(out, &self.topics, version, "Topics")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "ShareAcknowledgeRequest")
    }
}

message!(ShareAcknowledgeRequest, 1..=2, header 2);

impl kafka_protocol::protocol::Request for ShareAcknowledgeRequest {
    const KEY: i16 = 79;
    type Response = Response;
}

/// A topic with records to acknowledge.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AcknowledgeTopic {
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The partitions containing records to acknowledge.
    pub partitions: Vec<AcknowledgePartition>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for AcknowledgeTopic {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "AcknowledgeTopic.TopicId")?,
            partitions: wire::structs(buf, version, "AcknowledgeTopic.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "AcknowledgeTopic")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(
            out,
            &self.partitions,
            version,
            "AcknowledgeTopic.Partitions",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "AcknowledgeTopic")
    }
}

/// A partition with records to acknowledge.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AcknowledgePartition {
    /// The partition index.
    pub partition_index: i32,
    /// Record batches to acknowledge.
    pub acknowledgement_batches: Vec<AcknowledgementBatch>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for AcknowledgePartition {
    const MIN_SIZE: usize = 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "AcknowledgePartition.PartitionIndex")?,
            acknowledgement_batches: wire::structs(
                buf,
                version,
                "AcknowledgePartition.AcknowledgementBatches",
            )?,
            unknown_tagged_fields: wire::tagged_fields(buf, "AcknowledgePartition")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_structs(
            out,
            &self.acknowledgement_batches,
            version,
            "AcknowledgePartition.AcknowledgementBatches",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "AcknowledgePartition")
    }
}

/// ShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareAcknowledgeResponse {
    /// The duration in milliseconds for which the request was throttled due to a quota
    /// violation, or zero if the request did not violate any quota.
    pub throttle_time_ms: i32,
    /// The top level response error code.
    pub error_code: i16,
    /// The top-level error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    /// v2+ (ignorable: left out at v1 whatever its value): the time in milliseconds for which the
    /// acquired records are locked.
    pub acquisition_lock_timeout_ms: i32,
    /// The response topics.
    pub responses: Vec<ShareAcknowledgeTopicResponse>,
    /// Endpoints for all current leaders enumerated in PartitionData with error
    /// NOT_LEADER_OR_FOLLOWER.
    pub node_endpoints: Vec<NodeEndpoint>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for ShareAcknowledgeResponse {
    const MIN_SIZE: usize = 4 + 2 + 1 + 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        let throttle_time_ms = wire::i32(buf, "ThrottleTimeMs")?;
        let error_code = wire::i16(buf, "ErrorCode")?;
        let error_message = wire::nullable_string(buf, "ErrorMessage")?;
        let acquisition_lock_timeout_ms = if version >= 2 {
            wire::i32(buf, "AcquisitionLockTimeoutMs")?
        } else {
            0
        };
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            acquisition_lock_timeout_ms,
            responses: wire::structs(buf, version, "Responses")?,
            node_endpoints: wire::structs(buf, version, "NodeEndpoints")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareAcknowledgeResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.throttle_time_ms);
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(out, self.error_message.as_deref(), "ErrorMessage")?;
        if version >= 2 {
            wire::put_i32(out, self.acquisition_lock_timeout_ms);
        }
        wire::put_structs(out, &self.responses, version, "Responses")?;
        wire::put_structs(out, &self.node_endpoints, version, "NodeEndpoints")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "ShareAcknowledgeResponse")
    }
}

// The schema's `"headerVersions": {"0+": "1"}`: a flexible response header at every version.
message!(ShareAcknowledgeResponse, 1..=2, header 1);

/// The partitions of one topic in a ShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareAcknowledgeTopicResponse {
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The topic partitions.
    pub partitions: Vec<PartitionData>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for ShareAcknowledgeTopicResponse {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "Responses.TopicId")?,
            partitions: wire::structs(buf, version, "Responses.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareAcknowledgeTopicResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "Responses.Partitions")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "ShareAcknowledgeTopicResponse",
        )
    }
}

/// One partition of a ShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PartitionData {
    /// The partition index.
    pub partition_index: i32,
    /// The error code, or 0 if there was no error.
    pub error_code: i16,
    /// The error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    /// The current leader of the partition.
    pub current_leader: LeaderIdAndEpoch,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for PartitionData {
    const MIN_SIZE: usize = 4 + 2 + 1 + LeaderIdAndEpoch::MIN_SIZE + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "PartitionData.PartitionIndex")?,
            error_code: wire::i16(buf, "PartitionData.ErrorCode")?,
            error_message: wire::nullable_string(buf, "PartitionData.ErrorMessage")?,
            current_leader: LeaderIdAndEpoch::read(buf, version)?,
            unknown_tagged_fields: wire::tagged_fields(buf, "PartitionData")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(
            out,
            self.error_message.as_deref(),
            "PartitionData.ErrorMessage",
        )?;
        self.current_leader.write(out, version)?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "PartitionData")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::test_support::assert_min_size;

    #[test]
    fn min_sizes_are_lower_bounds() {
        assert_min_size::<ShareAcknowledgeRequest>(1..=2);
        assert_min_size::<AcknowledgeTopic>(1..=2);
        assert_min_size::<AcknowledgePartition>(1..=2);
        assert_min_size::<ShareAcknowledgeResponse>(1..=2);
        assert_min_size::<ShareAcknowledgeTopicResponse>(1..=2);
        assert_min_size::<PartitionData>(1..=2);
    }
}
