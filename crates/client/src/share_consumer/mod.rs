//! The share consumer (KIP-932): [`ShareConsumer`] ([`consumer`], the async shell) over its
//! sans-IO parts: the acknowledgement book ([`acknowledgements`]), membership
//! ([`membership`]), the bounded decoding of fetched batches ([`records`]) and what it hands
//! to a transaction ([`transactional`]). Settings are
//! [`ShareConsumerConfig`] ([`config`]).

pub mod acknowledgements;
pub mod config;
pub mod consumer;
pub mod membership;
pub mod records;
pub mod transactional;

pub use acknowledgements::{AcknowledgeType, AcknowledgementMode};
pub use config::{AcquireMode, ShareConsumerConfig};
pub use consumer::ShareConsumer;
pub use records::{ShareRecord, TopicIdPartition};
pub use transactional::{ShareAcknowledgements, ShareGroupMetadata};
