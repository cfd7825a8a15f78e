//! Response encoding: `[size][response header][body]` into a caller-owned buffer.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{self as m, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::api_key::ApiKey;
use crate::share;

macro_rules! responses {
    ($($variant:ident => $ty:ty),* $(,)?) => {
        /// Every response body Shoal can encode.
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Response {
            $($variant($ty),)*
        }

        impl Response {
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Response::$variant(_) => ApiKey::$variant,)*
                }
            }

            fn header_version(&self, version: i16) -> i16 {
                match self {
                    $(Response::$variant(_) => <$ty as HeaderVersion>::header_version(version),)*
                }
            }

            fn encode_body<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
                match self {
                    $(Response::$variant(body) => body.encode(buf, version),)*
                }
            }
        }

        /// Decodes a response frame (without its size prefix) of `api_key` at `version` into
        /// its correlation id and body: the inverse of [`encode_response`], for clients and
        /// tests.
        ///
        /// # Errors
        /// An api key without a codec, or bytes that do not decode at `version` (trailing
        /// bytes included).
        pub fn decode_response(
            api_key: impl Into<ApiKey>,
            version: i16,
            mut frame: Bytes,
        ) -> anyhow::Result<(i32, Response)> {
            let api_key: ApiKey = api_key.into();
            let (header_version, decode): (i16, fn(&mut Bytes, i16) -> anyhow::Result<Response>) =
                match api_key {
                    $(ApiKey::$variant => (
                        <$ty as HeaderVersion>::header_version(version),
                        |buf, version| <$ty as Decodable>::decode(buf, version).map(Response::$variant),
                    ),)*
                    _ => anyhow::bail!("no codec for {api_key:?}"),
                };
            let header = ResponseHeader::decode(&mut frame, header_version)?;
            let body = decode(&mut frame, version)?;
            if !frame.is_empty() {
                anyhow::bail!("{} bytes after the {api_key:?} v{version} response", frame.len());
            }
            Ok((header.correlation_id, body))
        }

        $(impl From<$ty> for Response {
            fn from(body: $ty) -> Self {
                Response::$variant(body)
            }
        })*
    };
}

responses! {
    Produce => m::ProduceResponse,
    Fetch => m::FetchResponse,
    ListOffsets => m::ListOffsetsResponse,
    Metadata => m::MetadataResponse,
    OffsetCommit => m::OffsetCommitResponse,
    OffsetFetch => m::OffsetFetchResponse,
    FindCoordinator => m::FindCoordinatorResponse,
    JoinGroup => m::JoinGroupResponse,
    Heartbeat => m::HeartbeatResponse,
    LeaveGroup => m::LeaveGroupResponse,
    SyncGroup => m::SyncGroupResponse,
    DescribeGroups => m::DescribeGroupsResponse,
    ListGroups => m::ListGroupsResponse,
    ApiVersions => m::ApiVersionsResponse,
    CreateTopics => m::CreateTopicsResponse,
    DeleteTopics => m::DeleteTopicsResponse,
    DeleteRecords => m::DeleteRecordsResponse,
    InitProducerId => m::InitProducerIdResponse,
    OffsetForLeaderEpoch => m::OffsetForLeaderEpochResponse,
    AddPartitionsToTxn => m::AddPartitionsToTxnResponse,
    AddOffsetsToTxn => m::AddOffsetsToTxnResponse,
    EndTxn => m::EndTxnResponse,
    WriteTxnMarkers => m::WriteTxnMarkersResponse,
    InitializeShareGroupState => m::InitializeShareGroupStateResponse,
    ReadShareGroupState => m::ReadShareGroupStateResponse,
    WriteShareGroupState => m::WriteShareGroupStateResponse,
    DeleteShareGroupState => m::DeleteShareGroupStateResponse,
    ReadShareGroupStateSummary => m::ReadShareGroupStateSummaryResponse,
    TxnOffsetCommit => m::TxnOffsetCommitResponse,
    DescribeAcls => m::DescribeAclsResponse,
    CreateAcls => m::CreateAclsResponse,
    DeleteAcls => m::DeleteAclsResponse,
    DescribeConfigs => m::DescribeConfigsResponse,
    AlterReplicaLogDirs => m::AlterReplicaLogDirsResponse,
    DescribeLogDirs => m::DescribeLogDirsResponse,
    AlterConfigs => m::AlterConfigsResponse,
    CreatePartitions => m::CreatePartitionsResponse,
    DeleteGroups => m::DeleteGroupsResponse,
    IncrementalAlterConfigs => m::IncrementalAlterConfigsResponse,
    OffsetDelete => m::OffsetDeleteResponse,
    UpdateFeatures => m::UpdateFeaturesResponse,
    DescribeCluster => m::DescribeClusterResponse,
    DescribeProducers => m::DescribeProducersResponse,
    DescribeTransactions => m::DescribeTransactionsResponse,
    ListTransactions => m::ListTransactionsResponse,
    DescribeTopicPartitions => m::DescribeTopicPartitionsResponse,
    SaslHandshake => m::SaslHandshakeResponse,
    SaslAuthenticate => m::SaslAuthenticateResponse,
    DescribeUserScramCredentials => m::DescribeUserScramCredentialsResponse,
    AlterUserScramCredentials => m::AlterUserScramCredentialsResponse,
    ShareGroupHeartbeat => m::ShareGroupHeartbeatResponse,
    ShareGroupDescribe => m::ShareGroupDescribeResponse,
    ShareFetch => share::ShareFetchResponse,
    ShareAcknowledge => share::ShareAcknowledgeResponse,
    DescribeShareGroupOffsets => share::DescribeShareGroupOffsetsResponse,
    AlterShareGroupOffsets => m::AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsets => m::DeleteShareGroupOffsetsResponse,
    TxnShareAcknowledge => share::TxnShareAcknowledgeResponse,
}

/// Appends one whole response frame (size prefix included) to `buf`.
///
/// # Errors
/// When the body cannot be encoded at `version` (a field this version cannot carry was set);
/// `buf` is then left as it was.
pub fn encode_response(
    buf: &mut BytesMut,
    correlation_id: i32,
    version: i16,
    response: &Response,
) -> anyhow::Result<()> {
    encode_frame(buf, correlation_id, version, response, |_| 0)
}

/// Appends `[size][header][body]` to `out`; the size counts `elsewhere(out)` more bytes than
/// `out` received (those sent apart, see [`crate::splice`]). On error `out` is cut back.
pub(crate) fn encode_frame<B: ByteBufMut>(
    out: &mut B,
    correlation_id: i32,
    version: i16,
    response: &Response,
    elsewhere: impl Fn(&B) -> usize,
) -> anyhow::Result<()> {
    let start = out.offset();
    out.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let result = header
        .encode(out, response.header_version(version))
        .and_then(|()| response.encode_body(out, version))
        .and_then(|()| {
            let size = out.offset() - start - 4 + elsewhere(out);
            i32::try_from(size).map_err(|_| anyhow::anyhow!("response of {size} bytes"))
        });
    match result {
        Ok(size) => {
            out.range(start..start + 4)
                .copy_from_slice(&size.to_be_bytes());
            Ok(())
        }
        Err(e) => {
            out.seek(start);
            Err(e)
        }
    }
}
