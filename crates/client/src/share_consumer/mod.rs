//! The share consumer (KIP-932): [`ShareConsumer`] ([`consumer`], the async shell) over its
//! sans-IO parts: the acknowledgement book ([`acknowledgements`]), membership
//! ([`membership`]) and the bounded decoding of fetched batches ([`records`]). Settings are
//! [`ShareConsumerConfig`] ([`config`]).

pub mod acknowledgements;
pub mod config;
pub mod consumer;
pub mod membership;
pub mod records;

pub use acknowledgements::{AcknowledgeType, AcknowledgementMode};
pub use config::{AcquireMode, ShareConsumerConfig};
pub use consumer::{
    ShareAcknowledgements, ShareConsumer, ShareGroupMetadata, ShareRecord, TopicIdPartition,
};
