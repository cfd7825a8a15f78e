//! Hand-written codecs for the share-group RPCs at the versions Kafka 4.2 clients use and
//! `kafka-protocol` 0.18 lacks:
//!
//! | api | key | versions here | `kafka-protocol` 0.18 |
//! |---|---|---|---|
//! | ShareFetch | 78 | 1-2 ([`share_fetch`]) | 1 |
//! | ShareAcknowledge | 79 | 1-2 ([`share_acknowledge`]) | 1 |
//! | DescribeShareGroupOffsets | 90 | 0-1 ([`describe_share_group_offsets`]) | 0 |
//! | TxnShareAcknowledge (KIP-1289) | 95 | 0 ([`txn_share_acknowledge`]) | none |
//!
//! Field names, order and defaults are Apache Kafka's message schemas
//! (`clients/src/main/resources/common/message/*.json`; TxnShareAcknowledge: the project's
//! KIP-1289 spec §3.1, which follows the draft implementation's schema). Every version of these messages is
//! flexible: compact strings and arrays, a tagged-field section after every struct (unknown tags
//! are kept in `unknown_tagged_fields`), request header v2 and response header v1.
//!
//! The top-level types implement `kafka-protocol`'s [`Encodable`], [`Decodable`],
//! [`HeaderVersion`] and [`Message`] (and the requests its [`Request`] trait), so they plug into
//! [`crate::Request`], [`crate::Response`] and a client exactly like the crate's own types.
//! Encoding a field at a version that lacks it fails unless the field holds its default (or the
//! schema marks it ignorable, when it is dropped), as Kafka's generated writers do.
//!
//! The structs have public fields and `Default` values per the schemas; build them with
//! `Type { field, ..Default::default() }`.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;

pub mod describe_share_group_offsets;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod txn_share_acknowledge;
pub(crate) mod wire;

pub use describe_share_group_offsets::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
};
pub use share_acknowledge::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
pub use share_fetch::{ShareFetchRequest, ShareFetchResponse};
pub use txn_share_acknowledge::{TxnShareAcknowledgeRequest, TxnShareAcknowledgeResponse};

use wire::{Sink, Wire};

#[cfg(doc)]
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request};

/// Implements `kafka-protocol`'s message traits for a top-level message over its [`Wire`] impl.
macro_rules! message {
    ($ty:ty, $min:literal..=$max:literal, header $header:literal) => {
        impl kafka_protocol::protocol::Message for $ty {
            const VERSIONS: kafka_protocol::protocol::VersionRange =
                kafka_protocol::protocol::VersionRange {
                    min: $min,
                    max: $max,
                };
            const DEPRECATED_VERSIONS: Option<kafka_protocol::protocol::VersionRange> = None;
        }

        impl kafka_protocol::protocol::Encodable for $ty {
            fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(
                &self,
                buf: &mut B,
                version: i16,
            ) -> anyhow::Result<()> {
                $crate::share::check_version::<Self>(version)?;
                $crate::share::wire::Wire::write(
                    self,
                    &mut $crate::share::wire::BufSink(buf),
                    version,
                )
            }

            fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
                $crate::share::check_version::<Self>(version)?;
                let mut counter = $crate::share::wire::Counter::default();
                $crate::share::wire::Wire::write(self, &mut counter, version)?;
                Ok(counter.0)
            }
        }

        impl kafka_protocol::protocol::Decodable for $ty {
            fn decode<B: kafka_protocol::protocol::buf::ByteBuf>(
                buf: &mut B,
                version: i16,
            ) -> anyhow::Result<Self> {
                $crate::share::check_version::<Self>(version)?;
                <Self as $crate::share::wire::Wire>::read(buf, version)
            }
        }

        impl kafka_protocol::protocol::HeaderVersion for $ty {
            fn header_version(_version: i16) -> i16 {
                $header
            }
        }
    };
}
use message;

fn check_version<M: kafka_protocol::protocol::Message>(version: i16) -> anyhow::Result<()> {
    let range = M::VERSIONS;
    if version < range.min || version > range.max {
        anyhow::bail!(
            "version {version} is outside {}-{} for this message",
            range.min,
            range.max
        );
    }
    Ok(())
}

/// One batch of acknowledgements in a ShareFetch, ShareAcknowledge or TxnShareAcknowledge
/// request (the schemas' `AcknowledgementBatch` / `TxnShareAcknowledgeBatch`, identical in all).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AcknowledgementBatch {
    /// First offset of the batch of records to acknowledge.
    pub first_offset: i64,
    /// Last offset (inclusive) of the batch of records to acknowledge.
    pub last_offset: i64,
    /// One type for the whole batch or one per offset: 0 Gap, 1 Accept, 2 Release, 3 Reject,
    /// 4 Renew (v2, with `is_renew_ack`). Not validated here.
    pub acknowledge_types: Vec<i8>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for AcknowledgementBatch {
    const MIN_SIZE: usize = 8 + 8 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> anyhow::Result<Self> {
        Ok(Self {
            first_offset: wire::i64(buf, "AcknowledgementBatch.FirstOffset")?,
            last_offset: wire::i64(buf, "AcknowledgementBatch.LastOffset")?,
            acknowledge_types: wire::i8s(buf, "AcknowledgementBatch.AcknowledgeTypes")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "AcknowledgementBatch")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> anyhow::Result<()> {
        wire::put_i64(out, self.first_offset);
        wire::put_i64(out, self.last_offset);
        wire::put_i8s(
            out,
            &self.acknowledge_types,
            "AcknowledgementBatch.AcknowledgeTypes",
        )?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "AcknowledgementBatch")
    }
}

/// The current leader of a partition in a ShareFetch or ShareAcknowledge response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeaderIdAndEpoch {
    /// The ID of the current leader or -1 if the leader is unknown.
    pub leader_id: i32,
    /// The latest known leader epoch.
    pub leader_epoch: i32,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for LeaderIdAndEpoch {
    const MIN_SIZE: usize = 4 + 4 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> anyhow::Result<Self> {
        Ok(Self {
            leader_id: wire::i32(buf, "CurrentLeader.LeaderId")?,
            leader_epoch: wire::i32(buf, "CurrentLeader.LeaderEpoch")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "CurrentLeader")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> anyhow::Result<()> {
        wire::put_i32(out, self.leader_id);
        wire::put_i32(out, self.leader_epoch);
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "CurrentLeader")
    }
}

/// The endpoint of a leader named in a response's NOT_LEADER_OR_FOLLOWER partitions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeEndpoint {
    /// The ID of the associated node.
    pub node_id: BrokerId,
    /// The node's hostname.
    pub host: StrBytes,
    /// The node's port.
    pub port: i32,
    /// The rack of the node, or null if it has not been assigned to a rack.
    pub rack: Option<StrBytes>,
    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
}

impl Wire for NodeEndpoint {
    const MIN_SIZE: usize = 4 + 1 + 4 + 1 + 1;

    fn read<B: ByteBuf>(buf: &mut B, _version: i16) -> anyhow::Result<Self> {
        Ok(Self {
            node_id: BrokerId(wire::i32(buf, "NodeEndpoint.NodeId")?),
            host: wire::string(buf, "NodeEndpoint.Host")?,
            port: wire::i32(buf, "NodeEndpoint.Port")?,
            rack: wire::nullable_string(buf, "NodeEndpoint.Rack")?,
            unknown_tagged_fields: wire::tagged_fields(buf, "NodeEndpoint")?,
        })
    }

    fn write<S: Sink>(&self, out: &mut S, _version: i16) -> anyhow::Result<()> {
        wire::put_i32(out, self.node_id.0);
        wire::put_string(out, &self.host, "NodeEndpoint.Host")?;
        wire::put_i32(out, self.port);
        wire::put_nullable_string(out, self.rack.as_deref(), "NodeEndpoint.Rack")?;
        wire::put_tagged_fields(out, &self.unknown_tagged_fields, "NodeEndpoint")
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::wire::{BufSink, Wire};

    /// Asserts that `T::MIN_SIZE` is the encoded size of `T::default()` (the smallest value) at the
    /// version where it is smallest: a larger bound would refuse valid arrays.
    pub(crate) fn assert_min_size<T: Wire + Default>(versions: std::ops::RangeInclusive<i16>) {
        let smallest = versions
            .map(|version| {
                let mut out = Vec::new();
                T::default()
                    .write(&mut BufSink(&mut out), version)
                    .expect("default encodes");
                out.len()
            })
            .min();
        assert_eq!(
            Some(T::MIN_SIZE),
            smallest,
            "{}",
            std::any::type_name::<T>()
        );
    }

    #[test]
    fn common_min_sizes_are_lower_bounds() {
        assert_min_size::<super::AcknowledgementBatch>(1..=2);
        assert_min_size::<super::LeaderIdAndEpoch>(1..=2);
        assert_min_size::<super::NodeEndpoint>(1..=2);
    }
}
