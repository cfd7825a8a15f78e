//! DescribeShareGroupOffsets (api key 90) v0-1 (KIP-932). Version 1 (KIP-1226) adds the
//! response's per-partition `Lag`; the request is the same at both versions.

use std::collections::BTreeMap;

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::wire::{self, Sink, Wire};
use super::{message, DescribeShareGroupOffsetsResponse as Response};

/// DescribeShareGroupOffsets request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescribeShareGroupOffsetsRequest {
    /// The groups to describe offsets for.
    pub groups: Vec<DescribeShareGroupOffsetsRequestGroup>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for DescribeShareGroupOffsetsRequest {
    const MIN_SIZE: usize = 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            groups: wire::structs(buf, version, "Groups")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "DescribeShareGroupOffsetsRequest")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_structs(out, &self.groups, version, "Groups")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsRequest",
        )
    }
}

message!(DescribeShareGroupOffsetsRequest, 0..=1, header 2);

impl kafka_protocol::protocol::Request for DescribeShareGroupOffsetsRequest {
    const KEY: i16 = 90;
    type Response = Response;
}

/// One group to describe. `topics` defaults to an empty list, as in the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeShareGroupOffsetsRequestGroup {
    /// The group identifier.
    pub group_id: GroupId,
    /// The topics to describe offsets for, or null for all topic-partitions.
    pub topics: Option<Vec<DescribeShareGroupOffsetsRequestTopic>>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Default for DescribeShareGroupOffsetsRequestGroup {
    fn default() -> Self {
        Self {
            group_id: GroupId::default(),
            topics: Some(Vec::new()),
            unknown_tagged_fields: BTreeMap::new(),
        }
    }
}

impl Wire for DescribeShareGroupOffsetsRequestGroup {
    const MIN_SIZE: usize = 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            group_id: GroupId(wire::string(buf, "Groups.GroupId")?),
            topics: wire::nullable_structs(buf, version, "Groups.Topics")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "DescribeShareGroupOffsetsRequestGroup",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_string(out, &self.group_id, "Groups.GroupId")?;
        wire::put_nullable_structs(out, self.topics.as_deref(), version, "Groups.Topics")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsRequestGroup",
        )
    }
}

/// One topic to describe.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescribeShareGroupOffsetsRequestTopic {
    /// The topic name.
    pub topic_name: TopicName,
    /// The partitions.
    pub partitions: Vec<i32>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for DescribeShareGroupOffsetsRequestTopic {
    const MIN_SIZE: usize = 1 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> Result<Self> {
        Ok(Self {
            topic_name: TopicName(wire::string(buf, "Topics.TopicName")?),
            partitions: wire::i32s(buf, "Topics.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "DescribeShareGroupOffsetsRequestTopic",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> Result<()> {
        wire::put_string(out, &self.topic_name, "Topics.TopicName")?;
        wire::put_i32s(out, &self.partitions, "Topics.Partitions")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsRequestTopic",
        )
    }
}

/// DescribeShareGroupOffsets response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescribeShareGroupOffsetsResponse {
    /// The duration in milliseconds for which the request was throttled due to a quota
    /// violation, or zero if the request did not violate any quota.
    pub throttle_time_ms: i32,
    /// The results for each group.
    pub groups: Vec<DescribeShareGroupOffsetsResponseGroup>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for DescribeShareGroupOffsetsResponse {
    const MIN_SIZE: usize = 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            throttle_time_ms: wire::i32(buf, "ThrottleTimeMs")?,
            groups: wire::structs(buf, version, "Groups")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "DescribeShareGroupOffsetsResponse")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.throttle_time_ms);
        wire::put_structs(out, &self.groups, version, "Groups")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsResponse",
        )
    }
}

message!(DescribeShareGroupOffsetsResponse, 0..=1, header 1);

/// The results for one group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescribeShareGroupOffsetsResponseGroup {
    /// The group identifier.
    pub group_id: GroupId,
    /// The results for each topic.
    pub topics: Vec<DescribeShareGroupOffsetsResponseTopic>,
    /// The group-level error code, or 0 if there was no error.
    pub error_code: i16,
    /// The group-level error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for DescribeShareGroupOffsetsResponseGroup {
    const MIN_SIZE: usize = 1 + 1 + 2 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            group_id: GroupId(wire::string(buf, "Groups.GroupId")?),
            topics: wire::structs(buf, version, "Groups.Topics")?,
            error_code: wire::i16(buf, "Groups.ErrorCode")?,
            error_message: wire::nullable_string(buf, "Groups.ErrorMessage")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "DescribeShareGroupOffsetsResponseGroup",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_string(out, &self.group_id, "Groups.GroupId")?;
        wire::put_structs(out, &self.topics, version, "Groups.Topics")?;
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(out, self.error_message.as_deref(), "Groups.ErrorMessage")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsResponseGroup",
        )
    }
}

/// The results for one topic.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescribeShareGroupOffsetsResponseTopic {
    /// The topic name.
    pub topic_name: TopicName,
    /// The unique topic ID.
    pub topic_id: Uuid,
    /// The results for each partition.
    pub partitions: Vec<DescribeShareGroupOffsetsResponsePartition>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for DescribeShareGroupOffsetsResponseTopic {
    const MIN_SIZE: usize = 1 + 16 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(Self {
            topic_name: TopicName(wire::string(buf, "Topics.TopicName")?),
            topic_id: wire::uuid(buf, "Topics.TopicId")?,
            partitions: wire::structs(buf, version, "Topics.Partitions")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "DescribeShareGroupOffsetsResponseTopic",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_string(out, &self.topic_name, "Topics.TopicName")?;
        wire::put_uuid(out, &self.topic_id);
        wire::put_structs(out, &self.partitions, version, "Topics.Partitions")?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsResponseTopic",
        )
    }
}

/// The results for one partition. `lag` defaults to -1, as in the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeShareGroupOffsetsResponsePartition {
    /// The partition index.
    pub partition_index: i32,
    /// The share-partition start offset.
    pub start_offset: i64,
    /// The leader epoch of the partition.
    pub leader_epoch: i32,
    /// v1+: the share-partition lag (-1 when unknown).
    pub lag: i64,
    /// The partition-level error code, or 0 if there was no error.
    pub error_code: i16,
    /// The partition-level error message, or null if there was no error.
    pub error_message: Option<StrBytes>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Default for DescribeShareGroupOffsetsResponsePartition {
    fn default() -> Self {
        Self {
            partition_index: 0,
            start_offset: 0,
            leader_epoch: 0,
            lag: -1,
            error_code: 0,
            error_message: None,
            unknown_tagged_fields: BTreeMap::new(),
        }
    }
}

impl Wire for DescribeShareGroupOffsetsResponsePartition {
    /// The v0 size: v1 adds eight bytes of `lag`.
    const MIN_SIZE: usize = 4 + 8 + 4 + 2 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        let partition_index = wire::i32(buf, "Partitions.PartitionIndex")?;
        let start_offset = wire::i64(buf, "Partitions.StartOffset")?;
        let leader_epoch = wire::i32(buf, "Partitions.LeaderEpoch")?;
        let lag = if version >= 1 {
            wire::i64(buf, "Partitions.Lag")?
        } else {
            -1
        };
        Ok(Self {
            partition_index,
            start_offset,
            leader_epoch,
            lag,
            error_code: wire::i16(buf, "Partitions.ErrorCode")?,
            error_message: wire::nullable_string(buf, "Partitions.ErrorMessage")?,
            unknown_tagged_fields: wire::tagged_fields(
                buf,
                "DescribeShareGroupOffsetsResponsePartition",
            )?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, version: i16) -> Result<()> {
        wire::put_i32(out, self.partition_index);
        wire::put_i64(out, self.start_offset);
        wire::put_i32(out, self.leader_epoch);
        if version >= 1 {
            wire::put_i64(out, self.lag);
        } else {
            wire::absent(&self.lag, &-1, "Lag", version)?;
        }
        wire::put_i16(out, self.error_code);
        wire::put_nullable_string(
            out,
            self.error_message.as_deref(),
            "Partitions.ErrorMessage",
        )?;
        wire::put_tagged_fields(
            out,
            &self.unknown_tagged_fields,
            "DescribeShareGroupOffsetsResponsePartition",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::test_support::assert_min_size;

    #[test]
    fn min_sizes_are_lower_bounds() {
        assert_min_size::<DescribeShareGroupOffsetsRequest>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsRequestGroup>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsRequestTopic>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsResponse>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsResponseGroup>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsResponseTopic>(0..=1);
        assert_min_size::<DescribeShareGroupOffsetsResponsePartition>(0..=1);
    }
}
