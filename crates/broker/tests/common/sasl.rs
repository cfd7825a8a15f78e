//! Raw frames for SASL tests that pipeline requests or read answers at their own pace.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use shoal_client::Connection;

/// `request` at `version` as one size-prefixed frame, ready for [`Connection::send_raw`].
pub fn request_frame<R>(version: i16, correlation_id: i32, request: &R) -> Vec<u8>
where
    R: Request + Encodable + HeaderVersion,
{
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut body, R::header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(i32::try_from(body.len()).unwrap());
    frame.put_slice(&body);
    frame.to_vec()
}

/// Reads the next frame as the response to an `R` at `version`; its correlation id too.
///
/// # Panics
/// When the connection closes or the frame does not decode.
pub async fn read_response<R>(conn: &mut Connection, version: i16) -> (i32, R::Response)
where
    R: Request + HeaderVersion,
    R::Response: Decodable + HeaderVersion,
{
    let mut frame = conn.read_frame().await.expect("a response frame");
    let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version)).unwrap();
    (
        header.correlation_id,
        R::Response::decode(&mut frame, version).unwrap(),
    )
}
