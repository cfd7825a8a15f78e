//! TxnShareAcknowledge (api key [`TXN_SHARE_ACKNOWLEDGE_KEY`], 95) v0: KIP-1289's transactional
//! acknowledgements, sent by a transactional producer to the leader of each share partition.
//! `kafka-protocol` 0.18 has no such message. The layout is the spec's §3.1, which matches the
//! draft implementation's `TxnShareAcknowledge{Request,Response}.json`: version 0 only, flexible,
//! request header v2 and response header v1.
//!
//! **Nullability.** The draft schema makes only `TransactionalId` nullable; here `GroupId` and
//! `MemberId` decode a null too, so that the broker can answer a request with a null group or
//! member id with INVALID_REQUEST (spec §3.2 step 2) rather than failing to decode it. Their
//! defaults are the empty string, as Kafka's for a string field without a `default`.

use std::collections::BTreeMap;

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::messages::{GroupId, ProducerId, TransactionalId};
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::wire::{self, Sink, Wire};
use super::{message, TxnShareAcknowledgeResponse as Response};
use crate::api_key::TXN_SHARE_ACKNOWLEDGE_KEY;

pub use super::AcknowledgementBatch;

/// TxnShareAcknowledge request.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnShareAcknowledgeRequest {
    /// The transactional id of the producer (null on the wire is INVALID_REQUEST for the broker).
    pub transactional_id: Option<TransactionalId>,
    /// The share group id.
    pub group_id: Option<GroupId>,
    /// The producer id.
    pub producer_id: ProducerId,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The share-group member whose acquired records these are.
    pub member_id: Option<StrBytes>,
    /// That member's epoch when the records were fetched.
    pub member_epoch: i32,
    /// The topics and partitions to acknowledge.
    pub topics: Vec<TxnShareAcknowledgeTopic>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Default for TxnShareAcknowledgeRequest {
    fn default() -> Self {
        Self {
            transactional_id: Some(TransactionalId::default()),
            group_id: Some(GroupId::default()),
            producer_id: ProducerId(0),
            producer_epoch: 0,
            member_id: Some(StrBytes::default()),
            member_epoch: 0,
            topics: Vec::new(),
            unknown_tagged_fields: BTreeMap::new(),
        }
    }
}

impl Wire for TxnShareAcknowledgeRequest {
    const MIN_SIZE: usize = 1 + 1 + 8 + 2 + 1 + 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            transactional_id: wire::nullable_string(buf, "TransactionalId")?.map(TransactionalId),
            group_id: wire::nullable_string(buf, "GroupId")?.map(GroupId),
            producer_id: ProducerId(wire::i64(buf, "ProducerId")?),
            producer_epoch: wire::i16(buf, "ProducerEpoch")?,
            member_id: wire::nullable_string(buf, "MemberId")?,
            member_epoch: wire::i32(buf, "MemberEpoch")?,
            topics: wire::structs(buf, version, "Topics")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "TxnShareAcknowledgeRequest")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_nullable_string(
            out,
            self.transactional_id.as_deref().map(|t| &**t),
            "TransactionalId",
        )?;
        wire::put_nullable_string(out, self.group_id.as_deref().map(|g| &**g), "GroupId")?;
        wire::put_i64(out, self.producer_id.0);
        wire::put_i16(out, self.producer_epoch);
        wire::put_nullable_string(out, self.member_id.as_deref(), "MemberId")?;
        wire::put_i32(out, self.member_epoch);
        wire::put_structs(out, &self.topics, version, "Topics")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "TxnShareAcknowledgeRequest",
        )
    }
}

message!(TxnShareAcknowledgeRequest, 0..=0, header 2);

impl kafka_protocol::protocol::Request for TxnShareAcknowledgeRequest {
    const KEY: i16 = TXN_SHARE_ACKNOWLEDGE_KEY;
    type Response = Response;
}

/// A topic with records to acknowledge in the transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxnShareAcknowledgeTopic {
    /// The unique topic id.
    pub topic_id: Uuid,
    /// The partitions with records to acknowledge.
    pub partitions: Vec<TxnShareAcknowledgePartition>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for TxnShareAcknowledgeTopic {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "Topics.TopicId")?,
            partitions: wire::structs(buf, version, "Topics.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "TxnShareAcknowledgeTopic")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "Topics.Partitions")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "TxnShareAcknowledgeTopic")
    }
}

/// A partition with records to acknowledge in the transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxnShareAcknowledgePartition {
    /// The partition index.
    pub partition_index: i32,
    /// Offset ranges to acknowledge, each with one type per offset or one for the range. Only
    /// ACCEPT (1), REJECT (3) and GAP (0) are valid in a transaction; not validated here.
    pub acknowledgement_batches: Vec<AcknowledgementBatch>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for TxnShareAcknowledgePartition {
    const MIN_SIZE: usize = 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "Partitions.PartitionIndex")?,
            acknowledgement_batches: wire::structs(
                buf,
                version,
                "Partitions.AcknowledgementBatches",
            )?,
            unknown_tagged_fields: wire::tagged_fields(buf, "TxnShareAcknowledgePartition")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_structs(
            out,
            &self.acknowledgement_batches,
            version,
            "Partitions.AcknowledgementBatches",
        )?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "TxnShareAcknowledgePartition",
        )
    }
}

/// TxnShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxnShareAcknowledgeResponse {
    /// The duration in milliseconds for which the request was throttled due to a quota
    /// violation, or zero if the request did not violate any quota.
    pub throttle_time_ms: i32,
    /// The top-level error code, or 0 if there was no error.
    pub error_code: i16,
    /// The results for each topic.
    pub responses: Vec<TxnShareAcknowledgeTopicResponse>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for TxnShareAcknowledgeResponse {
    const MIN_SIZE: usize = 4 + 2 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            throttle_time_ms: wire::i32(buf, "ThrottleTimeMs")?,
            error_code: wire::i16(buf, "ErrorCode")?,
            responses: wire::structs(buf, version, "Responses")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "TxnShareAcknowledgeResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.throttle_time_ms);
        wire::put_i16(out, self.error_code);
        wire::put_structs(out, &self.responses, version, "Responses")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "TxnShareAcknowledgeResponse",
        )
    }
}

message!(TxnShareAcknowledgeResponse, 0..=0, header 1);

/// The partitions of one topic in a TxnShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxnShareAcknowledgeTopicResponse {
    /// The unique topic id.
    pub topic_id: Uuid,
    /// The results for each partition.
    pub partitions: Vec<TxnShareAcknowledgePartitionResponse>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for TxnShareAcknowledgeTopicResponse {
    const MIN_SIZE: usize = 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_id: wire::uuid(buf, "Responses.TopicId")?,
            partitions: wire::structs(buf, version, "Responses.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "TxnShareAcknowledgeTopicResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "Responses.Partitions")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "TxnShareAcknowledgeTopicResponse",
        )
    }
}

/// One partition of a TxnShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxnShareAcknowledgePartitionResponse {
    /// The partition index.
    pub partition_index: i32,
    /// The error code, or 0 if there was no error.
    pub error_code: i16,
    /// The error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for TxnShareAcknowledgePartitionResponse {
    const MIN_SIZE: usize = 4 + 2 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> Result<Self> {
        Ok(Self {
            partition_index: wire::i32(buf, "Partitions.PartitionIndex")?,
            error_code: wire::i16(buf, "Partitions.ErrorCode")?,
            error_message: wire::nullable_string(buf, "Partitions.ErrorMessage")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "TxnShareAcknowledgePartitionResponse",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(
            out,
            self.error_message.as_deref(),
            "Partitions.ErrorMessage",
        )?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "TxnShareAcknowledgePartitionResponse",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::test_support::assert_min_size;

    #[test]
    fn min_sizes_are_lower_bounds() {
        assert_min_size::<TxnShareAcknowledgeRequest>(0..=0);
        assert_min_size::<TxnShareAcknowledgeTopic>(0..=0);
        assert_min_size::<TxnShareAcknowledgePartition>(0..=0);
        assert_min_size::<TxnShareAcknowledgeResponse>(0..=0);
        assert_min_size::<TxnShareAcknowledgeTopicResponse>(0..=0);
        assert_min_size::<TxnShareAcknowledgePartitionResponse>(0..=0);
    }
}
