//! Which APIs a broker advertises, at which versions.
//!
//! ApiVersions must list exactly what is implemented: clients use the highest version both sides
//! support for every API, and start using APIs merely because they are listed. The broker builds
//! its table from [`ApiTable`] and adds or removes keys with the finalized feature levels.

use crate::api_key::ApiKey;

pub use crate::request::codec_versions;

/// One advertised api key with its inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub api_key: ApiKey,
    pub min: i16,
    pub max: i16,
}

impl ApiRange {
    /// The range the codec can decode for `api_key` ([`codec_versions`]), `None` when it has no
    /// codec for the key.
    pub fn full(api_key: impl Into<ApiKey>) -> Option<Self> {
        let api_key: ApiKey = api_key.into();
        codec_versions(api_key).map(|range| Self {
            api_key,
            min: range.min,
            max: range.max,
        })
    }

    pub fn contains(&self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }
}

/// Kafka advertises Produce from version 0 although versions 0-2 are gone, to work around a
/// librdkafka bug (KAFKA-18659); a request at those versions is still refused.
pub const PRODUCE_ADVERTISED_MIN_VERSION: i16 = 0;

/// The APIs a broker serves, in api-key order.
#[derive(Debug, Clone, Default)]
pub struct ApiTable {
    ranges: Vec<ApiRange>,
}

impl ApiTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `api_key` at every version the codec can decode ([`codec_versions`]).
    ///
    /// # Panics
    /// If this crate has no codec for `api_key` (a programming error: it could not be served).
    pub fn with(mut self, api_key: impl Into<ApiKey>) -> Self {
        let api_key: ApiKey = api_key.into();
        let full = ApiRange::full(api_key)
            .unwrap_or_else(|| panic!("{api_key:?} has no codec and cannot be advertised"));
        self.insert(full);
        self
    }

    /// Adds `api_key` at `min..=max`.
    ///
    /// # Panics
    /// If the range is empty or outside what the codec decodes (a programming error).
    pub fn with_range(mut self, api_key: impl Into<ApiKey>, min: i16, max: i16) -> Self {
        let api_key: ApiKey = api_key.into();
        let full = ApiRange::full(api_key)
            .unwrap_or_else(|| panic!("{api_key:?} has no codec and cannot be advertised"));
        assert!(min <= max, "empty range for {api_key:?}");
        assert!(
            full.min <= min && max <= full.max,
            "{api_key:?} {min}-{max} outside the codec's {}-{}",
            full.min,
            full.max
        );
        self.insert(ApiRange { api_key, min, max });
        self
    }

    pub fn without(mut self, api_key: impl Into<ApiKey>) -> Self {
        let api_key: ApiKey = api_key.into();
        self.ranges.retain(|r| r.api_key != api_key);
        self
    }

    fn insert(&mut self, range: ApiRange) {
        self.ranges.retain(|r| r.api_key != range.api_key);
        self.ranges.push(range);
        self.ranges.sort_by_key(|r| r.api_key as i16);
    }

    pub fn get(&self, api_key: i16) -> Option<&ApiRange> {
        self.ranges.iter().find(|r| r.api_key as i16 == api_key)
    }

    /// Whether a request at this key and version is served. Produce below its decodable minimum
    /// is advertised but not served.
    pub fn serves(&self, api_key: i16, version: i16) -> bool {
        match self.get(api_key) {
            Some(range) => {
                range.contains(version)
                    && ApiRange::full(range.api_key).is_some_and(|full| full.contains(version))
            }
            None => false,
        }
    }

    /// The ranges to advertise in ApiVersions.
    pub fn advertised(&self) -> impl Iterator<Item = ApiRange> + '_ {
        self.ranges.iter().map(|r| {
            let mut r = *r;
            if r.api_key == ApiKey::Produce {
                r.min = PRODUCE_ADVERTISED_MIN_VERSION;
            }
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_is_advertised_from_zero_but_served_from_three() {
        let table = ApiTable::new().with(ApiKey::Produce).with(ApiKey::Metadata);
        let produce = table
            .advertised()
            .find(|r| r.api_key == ApiKey::Produce)
            .unwrap();
        assert_eq!(produce.min, 0);
        assert!(!table.serves(0, 2));
        assert!(table.serves(0, 3));
        assert!(table.serves(3, 0));
        assert!(!table.serves(1, 4));
    }

    #[test]
    fn table_is_sorted_and_deduplicated() {
        let table = ApiTable::new()
            .with(ApiKey::Metadata)
            .with(ApiKey::Produce)
            .with_range(ApiKey::Metadata, 1, 2);
        let keys: Vec<_> = table
            .advertised()
            .map(|r| (r.api_key as i16, r.max))
            .collect();
        assert_eq!(keys, vec![(0, 13), (3, 2)]);
    }

    fn range(api_key: ApiKey) -> (i16, i16) {
        let r = codec_versions(api_key).unwrap();
        (r.min, r.max)
    }

    #[test]
    fn ranges_stop_where_the_message_types_stop() {
        // kafka-protocol 0.18 lists v10 for both in ApiKey::valid_versions, but its request
        // types decode only to v9: an advertised v10 closed every krafka consumer's connection.
        assert_eq!(ApiKey::OffsetFetch.valid_versions().max, 10);
        assert_eq!(range(ApiKey::OffsetFetch), (1, 9));
        assert_eq!(ApiKey::OffsetCommit.valid_versions().max, 10);
        assert_eq!(range(ApiKey::OffsetCommit), (2, 9));
        // kafka-protocol's request type stops at v5; this crate adds v6 (KIP-939).
        assert_eq!(range(ApiKey::InitProducerId), (0, 6));
        // Keys without a codec have no range and cannot enter a table.
        assert_eq!(codec_versions(ApiKey::Vote), None);
        assert!(ApiRange::full(ApiKey::Vote).is_none());
        assert!(!ApiTable::new().serves(ApiKey::Vote as i16, 0));
    }

    #[test]
    #[should_panic(expected = "outside the codec")]
    fn a_range_beyond_the_codec_cannot_be_added() {
        let _ = ApiTable::new().with_range(ApiKey::OffsetFetch, 1, 10);
    }

    #[test]
    #[should_panic(expected = "has no codec")]
    fn a_key_without_codec_cannot_be_added() {
        let _ = ApiTable::new().with(ApiKey::Vote);
    }

    /// Every version of every key with a codec: a default request encodes, decodes back
    /// through [`crate::decode_request`], and one version past each end is refused.
    #[test]
    fn every_codec_version_round_trips_a_default_request() {
        use crate::request::{decode_request, encode_request, Request, RequestError};
        let mut keys = 0;
        for key in 0i16..200 {
            let Ok(api_key) = ApiKey::try_from(key) else {
                continue;
            };
            let Some(r) = codec_versions(api_key) else {
                assert!(Request::default_for(api_key).is_none(), "{api_key:?}");
                continue;
            };
            keys += 1;
            let request = Request::default_for(api_key).unwrap();
            for version in r.min..=r.max {
                let mut buf = bytes::BytesMut::new();
                encode_request(&mut buf, 9, version, &request)
                    .unwrap_or_else(|e| panic!("{api_key:?} v{version} encode: {e}"));
                let frame = decode_request(buf.freeze())
                    .unwrap_or_else(|e| panic!("{api_key:?} v{version} decode: {e}"));
                assert_eq!(frame.api_key, api_key);
                assert_eq!(frame.version(), version);
            }
            for version in [r.min - 1, r.max + 1] {
                let mut buf = bytes::BytesMut::new();
                buf.extend_from_slice(&key.to_be_bytes());
                buf.extend_from_slice(&version.to_be_bytes());
                buf.extend_from_slice(&9i32.to_be_bytes());
                buf.extend_from_slice(&[0xff, 0xff, 0]);
                assert!(
                    matches!(
                        decode_request(buf.freeze()),
                        Err(RequestError::UnsupportedVersion { .. })
                    ),
                    "{api_key:?} v{version}"
                );
            }
        }
        assert!(keys > 40, "{keys} keys with a codec");
    }
}
