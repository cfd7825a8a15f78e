//! Which APIs a broker advertises, at which versions.
//!
//! ApiVersions must list exactly what is implemented: clients use the highest version both sides
//! support for every API, and start using APIs merely because they are listed. The broker builds
//! its table from [`ApiTable`] and adds or removes keys with the finalized feature levels.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Message, VersionRange};

use crate::share;

/// The versions the codec decodes and encodes for `api_key`: `kafka-protocol`'s range
/// ([`ApiKey::valid_versions`]), except for the share RPCs whose codecs are this crate's own
/// ([`crate::share`]): ShareFetch and ShareAcknowledge 1-2, DescribeShareGroupOffsets 0-1.
/// [`crate::decode_request`] refuses versions outside it.
pub fn codec_versions(api_key: ApiKey) -> VersionRange {
    match api_key {
        ApiKey::ShareFetch => share::ShareFetchRequest::VERSIONS,
        ApiKey::ShareAcknowledge => share::ShareAcknowledgeRequest::VERSIONS,
        ApiKey::DescribeShareGroupOffsets => share::DescribeShareGroupOffsetsRequest::VERSIONS,
        _ => api_key.valid_versions(),
    }
}

/// One advertised api key with its inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub api_key: ApiKey,
    pub min: i16,
    pub max: i16,
}

impl ApiRange {
    /// The range the codec can decode for `api_key` ([`codec_versions`]).
    pub fn full(api_key: ApiKey) -> Self {
        let range = codec_versions(api_key);
        Self {
            api_key,
            min: range.min,
            max: range.max,
        }
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
    pub fn with(mut self, api_key: ApiKey) -> Self {
        self.insert(ApiRange::full(api_key));
        self
    }

    /// Adds `api_key` at `min..=max`.
    ///
    /// # Panics
    /// If the range is empty or outside what the codec decodes (a programming error).
    pub fn with_range(mut self, api_key: ApiKey, min: i16, max: i16) -> Self {
        let full = ApiRange::full(api_key);
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

    pub fn without(mut self, api_key: ApiKey) -> Self {
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
                range.contains(version) && ApiRange::full(range.api_key).contains(version)
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
}
