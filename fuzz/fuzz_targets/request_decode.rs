//! Arbitrary bytes as a request frame (`decode_request`) and as a byte stream (`FrameDecoder`).
//! A decoded TxnShareAcknowledge (Shoal's own codec, no kafka-protocol behind it) must also
//! re-encode, and decode again to the same value.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use shoal_protocol::frame::FrameDecoder;
use shoal_protocol::request::encode_request;
use shoal_protocol::{Request, RequestFrame};

// The broker binary runs with this allocator (crates/protocol/src/alloc.rs): kafka-protocol
// sizes arrays with `Vec::with_capacity(n)` for a wire-supplied `n`, and allocations of 1 GiB or
// more are served by `mmap(MAP_NORESERVE)` instead of aborting. Fuzz the same configuration.
// Those mappings bypass malloc, so libFuzzer's `-malloc_limit_mb` never sees them; see
// .ci/fuzz.sh for the limits used.
#[global_allocator]
static A: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

fn decode(frame: Bytes) {
    let Ok(decoded) = shoal_protocol::decode_request(frame) else {
        return;
    };
    if let RequestFrame {
        body: Request::TxnShareAcknowledge(body),
        ..
    } = &decoded
    {
        let mut buf = BytesMut::new();
        encode_request(&mut buf, decoded.correlation_id(), decoded.version(), &decoded.body)
            .expect("a decoded TxnShareAcknowledge re-encodes");
        match shoal_protocol::decode_request(buf.freeze()) {
            Ok(RequestFrame {
                body: Request::TxnShareAcknowledge(again),
                ..
            }) => assert_eq!(&again, body),
            other => panic!("re-encoded TxnShareAcknowledge decoded as {other:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decode(Bytes::copy_from_slice(data));

    // Same input as a stream: take frames off the front until it needs more bytes or errors,
    // and decode each frame it yields.
    let decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = decoder.decode(&mut buf) {
        decode(frame);
    }
});
