//! InitProducerId v6 (KIP-939 two-phase commit): `kafka-protocol` 0.18's request type has the
//! `enable_2_pc` and `keep_prepared_txn` fields but decodes and encodes only to v5. Version 6
//! is version 5 plus those two booleans before the tagged fields (Kafka's
//! `InitProducerIdRequest.json`); its response type already goes to v6. This module reads and
//! writes the v6 request body into the same `kafka-protocol` struct, so every other version
//! and every user of the type stay as they are.

use anyhow::Result;
use bytes::BufMut;
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, VersionRange};

use crate::share::wire::{self, BufSink};

/// The request version that carries `Enable2Pc` and `KeepPreparedTxn`.
pub const TWO_PHASE_COMMIT_VERSION: i16 = 6;

/// Decodes an InitProducerId v6 request body.
///
/// # Errors
/// Truncated or malformed input.
pub(crate) fn decode_v6<B: ByteBuf>(buf: &mut B) -> Result<InitProducerIdRequest> {
    let transactional_id = wire::nullable_string(buf, "TransactionalId")?.map(TransactionalId);
    let transaction_timeout_ms = wire::i32(buf, "TransactionTimeoutMs")?;
    let producer_id = ProducerId(wire::i64(buf, "ProducerId")?);
    let producer_epoch = wire::i16(buf, "ProducerEpoch")?;
    let enable_2_pc = wire::bool(buf, "Enable2Pc")?;
    let keep_prepared_txn = wire::bool(buf, "KeepPreparedTxn")?;
    let unknown_tagged_fields = wire::tagged_fields(buf, "InitProducerIdRequest")?;
    Ok(InitProducerIdRequest::default()
        .with_transactional_id(transactional_id)
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(producer_id)
        .with_producer_epoch(producer_epoch)
        .with_enable_2_pc(enable_2_pc)
        .with_keep_prepared_txn(keep_prepared_txn)
        .with_unknown_tagged_fields(unknown_tagged_fields))
}

/// Encodes an InitProducerId v6 request body.
///
/// # Errors
/// A transactional id longer than Kafka allows.
pub(crate) fn encode_v6<B: BufMut>(r: &InitProducerIdRequest, buf: &mut B) -> Result<()> {
    let mut out = BufSink(buf);
    wire::put_nullable_string(
        &mut out,
        r.transactional_id.as_deref().map(|t| &**t),
        "TransactionalId",
    )?;
    wire::put_i32(&mut out, r.transaction_timeout_ms);
    wire::put_i64(&mut out, r.producer_id.0);
    wire::put_i16(&mut out, r.producer_epoch);
    wire::put_bool(&mut out, r.enable_2_pc);
    wire::put_bool(&mut out, r.keep_prepared_txn);
    wire::put_tagged_fields(&mut out, &r.unknown_tagged_fields, "InitProducerIdRequest")
}

/// An InitProducerId request that encodes and decodes through v6: for clients, which encode
/// with `kafka-protocol`'s traits (the broker decodes v6 in [`crate::decode_request`]).
/// Versions up to 5 are `kafka-protocol`'s own codec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InitProducerIdV6(pub InitProducerIdRequest);

impl Message for InitProducerIdV6 {
    const VERSIONS: VersionRange = VersionRange {
        min: 0,
        max: TWO_PHASE_COMMIT_VERSION,
    };
    const DEPRECATED_VERSIONS: Option<VersionRange> = None;
}

impl Encodable for InitProducerIdV6 {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version == TWO_PHASE_COMMIT_VERSION {
            encode_v6(&self.0, buf)
        } else {
            self.0.encode(buf, version)
        }
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        if version == TWO_PHASE_COMMIT_VERSION {
            let mut out = bytes::BytesMut::new();
            encode_v6(&self.0, &mut out)?;
            Ok(out.len())
        } else {
            self.0.compute_size(version)
        }
    }
}

impl Decodable for InitProducerIdV6 {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version == TWO_PHASE_COMMIT_VERSION {
            decode_v6(buf).map(InitProducerIdV6)
        } else {
            InitProducerIdRequest::decode(buf, version).map(InitProducerIdV6)
        }
    }
}

impl HeaderVersion for InitProducerIdV6 {
    fn header_version(version: i16) -> i16 {
        <InitProducerIdRequest as HeaderVersion>::header_version(version)
    }
}

impl kafka_protocol::protocol::Request for InitProducerIdV6 {
    const KEY: i16 = <InitProducerIdRequest as kafka_protocol::protocol::Request>::KEY;
    type Response = InitProducerIdResponse;
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    use super::*;

    fn request(
        id: Option<&str>,
        timeout: i32,
        pid: i64,
        epoch: i16,
        flags: (bool, bool),
    ) -> InitProducerIdRequest {
        InitProducerIdRequest::default()
            .with_transactional_id(id.map(|s| TransactionalId(StrBytes::from_string(s.into()))))
            .with_transaction_timeout_ms(timeout)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_enable_2_pc(flags.0)
            .with_keep_prepared_txn(flags.1)
    }

    #[test]
    fn v6_is_v5_plus_two_booleans_before_the_tags() {
        let r = request(Some("tid"), 45_000, 1234, 7, (true, false));
        let mut v5 = BytesMut::new();
        r.encode(&mut v5, 5).unwrap();
        let mut v6 = BytesMut::new();
        encode_v6(&r, &mut v6).unwrap();
        // v5 ends with an empty tagged-field section (one zero byte).
        assert_eq!(v5.last(), Some(&0));
        let mut want = v5[..v5.len() - 1].to_vec();
        want.extend_from_slice(&[1, 0, 0]);
        assert_eq!(&v6[..], &want[..]);
        // A v5 decode of the v5 bytes agrees on the shared fields.
        let back = InitProducerIdRequest::decode(&mut v5.freeze(), 5).unwrap();
        assert_eq!(back.transactional_id, r.transactional_id);
    }

    #[test]
    fn v6_bytes_are_kafka_4_4s() {
        // Kafka 4.4's generated InitProducerIdRequestData at v6 (MessageUtil), for
        // TransactionalId "tid", timeout 45000, producer 1234 epoch 7, Enable2Pc only.
        let kafka = "047469640000afc800000000000004d20007010000";
        let r = request(Some("tid"), 45_000, 1234, 7, (true, false));
        let mut ours = BytesMut::new();
        encode_v6(&r, &mut ours).unwrap();
        let hex: String = ours.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, kafka);
    }

    #[test]
    fn the_wrapper_is_kafka_protocols_codec_below_v6() {
        let r = request(Some("tid"), 45_000, 1234, 7, (false, false));
        for version in 0..=TWO_PHASE_COMMIT_VERSION {
            let r = if version < 3 {
                request(Some("tid"), 45_000, -1, -1, (false, false))
            } else {
                r.clone()
            };
            let mut ours = BytesMut::new();
            InitProducerIdV6(r.clone())
                .encode(&mut ours, version)
                .unwrap();
            assert_eq!(
                ours.len(),
                InitProducerIdV6(r.clone()).compute_size(version).unwrap()
            );
            if version < TWO_PHASE_COMMIT_VERSION {
                let mut theirs = BytesMut::new();
                r.encode(&mut theirs, version).unwrap();
                assert_eq!(ours, theirs, "v{version}");
            }
            let back = InitProducerIdV6::decode(&mut ours.freeze(), version).unwrap();
            assert_eq!(back.0, r, "v{version}");
        }
    }

    proptest! {
        #[test]
        fn v6_round_trips(
            id in proptest::option::of("[a-z]{0,20}"),
            timeout in any::<i32>(),
            pid in any::<i64>(),
            epoch in any::<i16>(),
            flags in any::<(bool, bool)>(),
        ) {
            let r = request(id.as_deref(), timeout, pid, epoch, flags);
            let mut buf = BytesMut::new();
            encode_v6(&r, &mut buf).unwrap();
            let mut bytes = buf.freeze();
            let back = decode_v6(&mut bytes).unwrap();
            prop_assert_eq!(back, r);
            prop_assert!(bytes.is_empty());
        }

        #[test]
        fn v6_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_v6(&mut Bytes::from(bytes));
        }
    }
}
