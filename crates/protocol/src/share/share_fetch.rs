//! ShareFetch (api key 78) v1-2 (KIP-932). Version 2 adds the request's `ShareAcquireMode`
//! (KIP-1206) and `IsRenewAck` (KIP-1222, with acknowledge type 4 = Renew); the response is the
//! same at both versions. Version 0 (Kafka 4.0 early access) was removed in Kafka 4.1 and is not
//! supported.

use std::collections::BTreeMap;

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::wire::{self, Sink, Wire};
use super::{message, ShareFetchResponse as Response};

pub use super::{AcknowledgementBatch, LeaderIdAndEpoch, NodeEndpoint};

/// ShareFetch request. Defaults as in the schema: `group_id` null, `member_id` empty,
/// `max_bytes` `i32::MAX`, everything else zero/false/empty.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareFetchRequest {
    /// The group identifier.
    pub group_id: Option<GroupId>,
    /// The member ID.
    pub member_id: Option<StrBytes>,
    /// The current share session epoch: 0 to open a share session; -1 to close it; otherwise
    /// increments for consecutive requests.
    pub share_session_epoch: i32,
    /// The maximum time in milliseconds to wait for the response.
    pub max_wait_ms: i32,
    /// The minimum bytes to accumulate in the response.
    pub min_bytes: i32,
    /// The maximum bytes to fetch. See KIP-74 for cases where this limit may not be honored.
    pub max_bytes: i32,
    /// The maximum number of records to fetch. This limit can be exceeded for alignment of batch
    /// boundaries.
    pub max_records: i32,
    /// The optimal number of records for batches of acquired records and acknowledgements.
    pub batch_size: i32,
    /// v2+: the acquire mode, 0 batch-optimized, 1 record-limit.
    pub share_acquire_mode: i8,
    /// v2+: whether Renew type acknowledgements are present in the acknowledgement batches.
    pub is_renew_ack: bool,
    /// The topics to fetch.
    pub topics: Vec<FetchTopic>,
    /// The partitions to remove from this share session.
    pub forgotten_topics_data: Vec<ForgottenTopic>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Default for ShareFetchRequest {
    fn default() -> Self {
        Self {
            group_id: None,
            member_id: Some(StrBytes::default()),
            share_session_epoch: 0,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: i32::MAX,
            max_records: 0,
            batch_size: 0,
            share_acquire_mode: 0,
            is_renew_ack: false,
            topics: Vec::new(),
            forgotten_topics_data: Vec::new(),
            unknown_tagged_fields: BTreeMap::new(),
        }
    }
}

impl Wire for ShareFetchRequest {
    const MIN_SIZE: usize = 1 + 1 + 6 * 4 + 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        let group_id = wire::nullable_string(buf, "GroupId")?.map(GroupId);
        let member_id = wire::nullable_string(buf, "MemberId")?;
        let share_session_epoch = wire::i32(buf, "ShareSessionEpoch")?;
        let max_wait_ms = wire::i32(buf, "MaxWaitMs")?;
        let min_bytes = wire::i32(buf, "MinBytes")?;
        let max_bytes = wire::i32(buf, "MaxBytes")?;
        let max_records = wire::i32(buf, "MaxRecords")?;
        let batch_size = wire::i32(buf, "BatchSize")?;
        let (share_acquire_mode, is_renew_ack) = if version >= 2 {
            (
                wire::i8(buf, "ShareAcquireMode")?,
                wire::bool(buf, "IsRenewAck")?,
            )
        } else {
            (0, false)
        };
        Ok(Self {
            group_id,
            member_id,
            share_session_epoch,
            max_wait_ms,
            min_bytes,
            max_bytes,
            max_records,
            batch_size,
            share_acquire_mode,
            is_renew_ack,
            topics: wire::structs(buf, version, "Topics")?,
            forgotten_topics_data: wire::structs(buf, version, "ForgottenTopicsData")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareFetchRequest")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_nullable_string(out, self.group_id.as_deref().map(|g| &**g), "GroupId")?;
        wire::put_nullable_string(out, self.member_id.as_deref(), "MemberId")?;
        wire::put_i32(out, self.share_session_epoch);
        wire::put_i32(out, self.max_wait_ms);
        wire::put_i32(out, self.min_bytes);
        wire::put_i32(out, self.max_bytes);
        wire::put_i32(out, self.max_records);
        wire::put_i32(out, self.batch_size);
        if version >= 2 {
            wire::put_i8(out, self.share_acquire_mode);
            wire::put_bool(out, self.is_renew_ack);
        } else {
            wire::absent(&self.share_acquire_mode, &0, "ShareAcquireMode", version)?;
            wire::absent(&self.is_renew_ack, &false, "IsRenewAck", version)?;
        }
        wire::put_structs(out, &self.topics, version, "Topics")?;
        wire::put_structs(
            out,
            &self.forgotten_topics_data,
            version,
            "ForgottenTopicsData",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "ShareFetchRequest")
    }
}

message!(ShareFetchRequest, 1..=2, header 2);

impl kafka_protocol::protocol::Request for ShareFetchRequest {
    const KEY: i16 = 78;
    type Response = Response;
}

/// A topic to fetch from (and acknowledge in).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchTopic {
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The partitions to fetch.
    pub partitions: Vec<FetchPartition>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for FetchTopic {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "FetchTopic.TopicId")?,
            partitions: wire::structs(buf, version, "FetchTopic.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "FetchTopic")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "FetchTopic.Partitions")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "FetchTopic")
    }
}

/// A partition to fetch from, with the acknowledgements for it. (v0's `PartitionMaxBytes` is
/// gone from v1.)
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchPartition {
    /// The partition index.
    pub partition_index: i32,
    /// Record batches to acknowledge.
    pub acknowledgement_batches: Vec<AcknowledgementBatch>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for FetchPartition {
    const MIN_SIZE: usize = 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "FetchPartition.PartitionIndex")?,
            acknowledgement_batches: wire::structs(
                buf,
                version,
                "FetchPartition.AcknowledgementBatches",
            )?,
            unknown_tagged_fields: wire::tagged_fields(buf, "FetchPartition")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_structs(
            out,
            &self.acknowledgement_batches,
            version,
            "FetchPartition.AcknowledgementBatches",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "FetchPartition")
    }
}

/// Partitions to remove from the share session.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForgottenTopic {
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The partitions indexes to forget.
    pub partitions: Vec<i32>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for ForgottenTopic {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "ForgottenTopic.TopicId")?,
            partitions: wire::i32s(buf, "ForgottenTopic.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ForgottenTopic")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_i32s(out, &self.partitions, "ForgottenTopic.Partitions")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "ForgottenTopic")
    }
}

/// ShareFetch response (identical at v1 and v2).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareFetchResponse {
    /// The duration in milliseconds for which the request was throttled due to a quota
    /// violation, or zero if the request did not violate any quota.
    pub throttle_time_ms: i32,
    /// The top-level response error code.
    pub error_code: i16,
    /// The top-level error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    /// The time in milliseconds for which the acquired records are locked.
    pub acquisition_lock_timeout_ms: i32,
    /// The response topics.
    pub responses: Vec<ShareFetchableTopicResponse>,
    /// Endpoints for all current leaders enumerated in PartitionData with error
    /// NOT_LEADER_OR_FOLLOWER.
    pub node_endpoints: Vec<NodeEndpoint>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for ShareFetchResponse {
    const MIN_SIZE: usize = 4 + 2 + 1 + 4 + 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            throttle_time_ms: wire::i32(buf, "ThrottleTimeMs")?,
            error_code: wire::i16(buf, "ErrorCode")?,
            error_message: wire::nullable_string(buf, "ErrorMessage")?,
            acquisition_lock_timeout_ms: wire::i32(buf, "AcquisitionLockTimeoutMs")?,
            responses: wire::structs(buf, version, "Responses")?,
            node_endpoints: wire::structs(buf, version, "NodeEndpoints")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareFetchResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.throttle_time_ms);
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(out, self.error_message.as_deref(), "ErrorMessage")?;
        wire::put_i32(out, self.acquisition_lock_timeout_ms);
        wire::put_structs(out, &self.responses, version, "Responses")?;
        wire::put_structs(out, &self.node_endpoints, version, "NodeEndpoints")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "ShareFetchResponse")
    }
}

message!(ShareFetchResponse, 1..=2, header 1);

/// The partitions of one topic in a ShareFetch response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareFetchableTopicResponse {
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The topic partitions.
    pub partitions: Vec<PartitionData>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for ShareFetchableTopicResponse {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "Responses.TopicId")?,
            partitions: wire::structs(buf, version, "Responses.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "ShareFetchableTopicResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "Responses.Partitions")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "ShareFetchableTopicResponse",
        )
    }
}

/// One partition of a ShareFetch response: its records and which of them were acquired.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PartitionData {
    /// The partition index.
    pub partition_index: i32,
    /// The fetch error code, or 0 if there was no fetch error.
    pub error_code: i16,
    /// The fetch error message, or null if there was no fetch error.
    pub error_message: Option<StrBytes>,
    /// The acknowledge error code, or 0 if there was no acknowledge error.
    pub acknowledge_error_code: i16,
    /// The acknowledge error message, or null if there was no acknowledge error.
    pub acknowledge_error_message: Option<StrBytes>,
    /// The current leader of the partition.
    pub current_leader: LeaderIdAndEpoch,
    /// The record data: whole record batches as read from the log (not nullable from v1).
    pub records: Bytes,
    /// The acquired records.
    pub acquired_records: Vec<AcquiredRecords>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for PartitionData {
    const MIN_SIZE: usize = 4 + 2 + 1 + 2 + 1 + LeaderIdAndEpoch::MIN_SIZE + 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "PartitionData.PartitionIndex")?,
            error_code: wire::i16(buf, "PartitionData.ErrorCode")?,
            error_message: wire::nullable_string(buf, "PartitionData.ErrorMessage")?,
            acknowledge_error_code: wire::i16(buf, "PartitionData.AcknowledgeErrorCode")?,
            acknowledge_error_message: wire::nullable_string(
                buf,
                "PartitionData.AcknowledgeErrorMessage",
            )?,
            current_leader: LeaderIdAndEpoch::read(buf, version)?,
            records: wire::bytes(buf, "PartitionData.Records")?,
            acquired_records: wire::structs(buf, version, "PartitionData.AcquiredRecords")?,
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
        wire::put_i16(out, self.acknowledge_error_code);
        wire::put_nullable_string(
            out,
            self.acknowledge_error_message.as_deref(),
            "PartitionData.AcknowledgeErrorMessage",
        )?;
        self.current_leader.write(out, version)?;
        wire::put_bytes(out, &self.records, "PartitionData.Records")?;
        wire::put_structs(
            out,
            &self.acquired_records,
            version,
            "PartitionData.AcquiredRecords",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "PartitionData")
    }
}

/// A range of records acquired for this member.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AcquiredRecords {
    /// The earliest offset in this batch of acquired records.
    pub first_offset: i64,
    /// The last offset of this batch of acquired records.
    pub last_offset: i64,
    /// The delivery count of this batch of acquired records.
    pub delivery_count: i16,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for AcquiredRecords {
    const MIN_SIZE: usize = 8 + 8 + 2 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> Result<Self> {
        Ok(Self {
            first_offset: wire::i64(buf, "AcquiredRecords.FirstOffset")?,
            last_offset: wire::i64(buf, "AcquiredRecords.LastOffset")?,
            delivery_count: wire::i16(buf, "AcquiredRecords.DeliveryCount")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "AcquiredRecords")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> Result<()> {
        wire::put_i64(out, self.first_offset);
        wire::put_i64(out, self.last_offset);
        wire::put_i16(out, self.delivery_count);
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "AcquiredRecords")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::test_support::assert_min_size;

    #[test]
    fn min_sizes_are_lower_bounds() {
        assert_min_size::<ShareFetchRequest>(1..=2);
        assert_min_size::<FetchTopic>(1..=2);
        assert_min_size::<FetchPartition>(1..=2);
        assert_min_size::<ForgottenTopic>(1..=2);
        assert_min_size::<ShareFetchResponse>(1..=2);
        assert_min_size::<ShareFetchableTopicResponse>(1..=2);
        assert_min_size::<PartitionData>(1..=2);
        assert_min_size::<AcquiredRecords>(1..=2);
    }
}
