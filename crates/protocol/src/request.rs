//! Request decoding: header plus body into one [`Request`] enum value.
//!
//! The broker peeks the api key and version first ([`peek_header`]) so that it can answer an
//! unsupported ApiVersions with the v0 fallback and close the connection for anything else it
//! does not serve, exactly as Kafka does; only then is the body decoded.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{self as m, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, VersionRange};

use crate::api_key::ApiKey;
use crate::share;

/// The first fields of every request header, readable before anything else is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeekedHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Reads api key, version and correlation id without decoding the rest.
pub fn peek_header(frame: &[u8]) -> Option<PeekedHeader> {
    if frame.len() < 8 {
        return None;
    }
    Some(PeekedHeader {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    })
}

/// Why a request frame could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    #[error("request frame of {len} bytes is shorter than a request header")]
    Truncated { len: usize },
    #[error("unknown api key {api_key}")]
    UnknownApiKey { api_key: i16, correlation_id: i32 },
    #[error("api key {api_key} version {api_version} cannot be decoded")]
    UnsupportedVersion {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api_key:?} v{api_version} request: {reason}")]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
        reason: String,
    },
}

/// A decoded request with its header.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub body: Request,
}

impl RequestFrame {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

macro_rules! requests {
    ($($variant:ident => $ty:ty),* $(,)?) => {
        /// Every request body Shoal can decode. Whether a broker serves it (and at which
        /// versions) is the broker's ApiVersions table, not this enum.
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Request {
            $($variant($ty),)*
        }

        impl Request {
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Request::$variant(_) => ApiKey::$variant,)*
                }
            }

            /// A request of `api_key` with every field at its default, `None` when this crate
            /// has no codec for the key (for tests that walk the whole ApiVersions table).
            pub fn default_for(api_key: impl Into<ApiKey>) -> Option<Request> {
                match api_key.into() {
                    $(ApiKey::$variant => Some(Request::$variant(<$ty>::default())),)*
                    _ => None,
                }
            }

            /// Encodes the body alone at `version`.
            ///
            /// # Errors
            /// When a field this version cannot carry is set, or the version is unknown.
            pub fn encode_body(&self, buf: &mut BytesMut, version: i16) -> anyhow::Result<()> {
                match self {
                    Request::InitProducerId(body)
                        if version == crate::init_producer_id::TWO_PHASE_COMMIT_VERSION =>
                    {
                        crate::init_producer_id::encode_v6(body, buf)
                    }
                    $(Request::$variant(body) => Encodable::encode(body, buf, version),)*
                }
            }
        }

        fn header_version(api_key: ApiKey, api_version: i16) -> Option<i16> {
            match api_key {
                $(ApiKey::$variant => Some(<$ty as HeaderVersion>::header_version(api_version)),)*
                _ => None,
            }
        }

        /// The versions both the request decoder and the response encoder of `api_key`
        /// handle, or `None` when this crate has no codec for it.
        pub(crate) fn message_versions(api_key: ApiKey) -> Option<VersionRange> {
            if api_key == ApiKey::InitProducerId {
                // KIP-939's v6 request is this crate's own codec (crate::init_producer_id).
                return Some(intersect(
                    VersionRange {
                        min: <m::InitProducerIdRequest as Message>::VERSIONS.min,
                        max: crate::init_producer_id::TWO_PHASE_COMMIT_VERSION,
                    },
                    <m::InitProducerIdResponse as Message>::VERSIONS,
                ));
            }
            match api_key {
                $(ApiKey::$variant => Some(intersect(
                    <$ty as Message>::VERSIONS,
                    <<$ty as kafka_protocol::protocol::Request>::Response as Message>::VERSIONS,
                )),)*
                _ => None,
            }
        }

        fn decode_body(api_key: ApiKey, version: i16, buf: &mut Bytes) -> Option<anyhow::Result<Request>> {
            match api_key {
                ApiKey::InitProducerId if version == crate::init_producer_id::TWO_PHASE_COMMIT_VERSION => {
                    Some(crate::init_producer_id::decode_v6(buf).map(Request::InitProducerId))
                }
                $(ApiKey::$variant => Some(<$ty as Decodable>::decode(buf, version).map(Request::$variant)),)*
                _ => None,
            }
        }
    };
}

fn intersect(a: VersionRange, b: VersionRange) -> VersionRange {
    VersionRange {
        min: a.min.max(b.min),
        max: a.max.min(b.max),
    }
}

requests! {
    Produce => m::ProduceRequest,
    Fetch => m::FetchRequest,
    ListOffsets => m::ListOffsetsRequest,
    Metadata => m::MetadataRequest,
    OffsetCommit => m::OffsetCommitRequest,
    OffsetFetch => m::OffsetFetchRequest,
    FindCoordinator => m::FindCoordinatorRequest,
    JoinGroup => m::JoinGroupRequest,
    Heartbeat => m::HeartbeatRequest,
    LeaveGroup => m::LeaveGroupRequest,
    SyncGroup => m::SyncGroupRequest,
    DescribeGroups => m::DescribeGroupsRequest,
    ListGroups => m::ListGroupsRequest,
    ApiVersions => m::ApiVersionsRequest,
    CreateTopics => m::CreateTopicsRequest,
    DeleteTopics => m::DeleteTopicsRequest,
    DeleteRecords => m::DeleteRecordsRequest,
    InitProducerId => m::InitProducerIdRequest,
    OffsetForLeaderEpoch => m::OffsetForLeaderEpochRequest,
    AddPartitionsToTxn => m::AddPartitionsToTxnRequest,
    AddOffsetsToTxn => m::AddOffsetsToTxnRequest,
    EndTxn => m::EndTxnRequest,
    WriteTxnMarkers => m::WriteTxnMarkersRequest,
    InitializeShareGroupState => m::InitializeShareGroupStateRequest,
    ReadShareGroupState => m::ReadShareGroupStateRequest,
    WriteShareGroupState => m::WriteShareGroupStateRequest,
    DeleteShareGroupState => m::DeleteShareGroupStateRequest,
    ReadShareGroupStateSummary => m::ReadShareGroupStateSummaryRequest,
    TxnOffsetCommit => m::TxnOffsetCommitRequest,
    DescribeAcls => m::DescribeAclsRequest,
    CreateAcls => m::CreateAclsRequest,
    DeleteAcls => m::DeleteAclsRequest,
    DescribeConfigs => m::DescribeConfigsRequest,
    AlterReplicaLogDirs => m::AlterReplicaLogDirsRequest,
    DescribeLogDirs => m::DescribeLogDirsRequest,
    AlterConfigs => m::AlterConfigsRequest,
    CreatePartitions => m::CreatePartitionsRequest,
    DeleteGroups => m::DeleteGroupsRequest,
    IncrementalAlterConfigs => m::IncrementalAlterConfigsRequest,
    OffsetDelete => m::OffsetDeleteRequest,
    UpdateFeatures => m::UpdateFeaturesRequest,
    DescribeCluster => m::DescribeClusterRequest,
    DescribeProducers => m::DescribeProducersRequest,
    DescribeTransactions => m::DescribeTransactionsRequest,
    ListTransactions => m::ListTransactionsRequest,
    DescribeTopicPartitions => m::DescribeTopicPartitionsRequest,
    SaslHandshake => m::SaslHandshakeRequest,
    SaslAuthenticate => m::SaslAuthenticateRequest,
    DescribeUserScramCredentials => m::DescribeUserScramCredentialsRequest,
    AlterUserScramCredentials => m::AlterUserScramCredentialsRequest,
    ShareGroupHeartbeat => m::ShareGroupHeartbeatRequest,
    ShareGroupDescribe => m::ShareGroupDescribeRequest,
    ShareFetch => share::ShareFetchRequest,
    ShareAcknowledge => share::ShareAcknowledgeRequest,
    DescribeShareGroupOffsets => share::DescribeShareGroupOffsetsRequest,
    AlterShareGroupOffsets => m::AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsets => m::DeleteShareGroupOffsetsRequest,
    TxnShareAcknowledge => share::TxnShareAcknowledgeRequest,
}

/// Decodes a whole request frame (the bytes after the length prefix).
///
/// # Errors
/// [`RequestError`] for truncated frames, api keys this crate does not know, versions the
/// message type cannot decode, and malformed bodies (including trailing bytes).
pub fn decode_request(frame: Bytes) -> Result<RequestFrame, RequestError> {
    let peeked = peek_header(&frame).ok_or(RequestError::Truncated { len: frame.len() })?;
    let unknown = RequestError::UnknownApiKey {
        api_key: peeked.api_key,
        correlation_id: peeked.correlation_id,
    };
    let api_key = ApiKey::try_from(peeked.api_key).map_err(|_| unknown)?;
    let unsupported = || RequestError::UnsupportedVersion {
        api_key: peeked.api_key,
        api_version: peeked.api_version,
        correlation_id: peeked.correlation_id,
    };
    let Some(range) = codec_versions(api_key) else {
        return Err(unsupported());
    };
    if peeked.api_version < range.min || peeked.api_version > range.max {
        return Err(unsupported());
    }
    let malformed = |reason: String| RequestError::Malformed {
        api_key,
        api_version: peeked.api_version,
        correlation_id: peeked.correlation_id,
        reason,
    };
    let header_version =
        header_version(api_key, peeked.api_version).ok_or(RequestError::UnknownApiKey {
            api_key: peeked.api_key,
            correlation_id: peeked.correlation_id,
        })?;
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, header_version)
        .map_err(|e| malformed(format!("header: {e}")))?;
    let body = decode_body(api_key, peeked.api_version, &mut buf)
        .ok_or_else(unsupported)?
        .map_err(|e| malformed(format!("{e}")))?;
    // Kafka ignores bytes after the body; so do we, to accept what Kafka accepts.
    Ok(RequestFrame {
        header,
        api_key,
        body,
    })
}

/// Encodes a whole request frame without its size prefix: the header (at the version the api
/// key and version call for) and the body. The inverse of [`decode_request`], for clients and
/// tests.
///
/// # Errors
/// When the body cannot be encoded at `version`.
pub fn encode_request(
    buf: &mut BytesMut,
    correlation_id: i32,
    version: i16,
    request: &Request,
) -> anyhow::Result<()> {
    let api_key = request.api_key();
    let header_version = header_version(api_key, version)
        .ok_or_else(|| anyhow::anyhow!("no codec for {api_key:?}"))?;
    RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(
            "shoal",
        )))
        .encode(buf, header_version)?;
    request.encode_body(buf, version)
}

/// The versions this crate decodes requests and encodes responses at for `api_key`, or `None`
/// when it has no codec for the key.
///
/// This is the intersection of three ranges, all of which must hold for a version to be served:
/// [`ApiKey::valid_versions`] (kafka-protocol's table, which follows Kafka's JSON schemas), the
/// request type's own `VERSIONS` (what its decoder accepts) and the response type's `VERSIONS`
/// (what its encoder writes). They differ: kafka-protocol 0.18 lists OffsetCommit 2-10 and
/// OffsetFetch 1-10 in `valid_versions` but its request types decode only to v9, and
/// InitProducerId responses go to v6 while its requests stop at v5 (this crate adds v6,
/// [`crate::init_producer_id`]). The share RPCs use this
/// crate's own codecs ([`crate::share`]). [`crate::decode_request`] refuses versions outside
/// the range, and [`ApiTable`](crate::api::ApiTable) cannot hold one.
pub fn codec_versions(api_key: impl Into<ApiKey>) -> Option<VersionRange> {
    let api_key: ApiKey = api_key.into();
    let codec = message_versions(api_key)?;
    let range = match api_key {
        ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::DescribeShareGroupOffsets
        | ApiKey::TxnShareAcknowledge => codec,
        _ => {
            let listed = api_key.valid_versions();
            VersionRange {
                min: codec.min.max(listed.min),
                max: codec.max.min(listed.max),
            }
        }
    };
    (range.min <= range.max).then_some(range)
}
