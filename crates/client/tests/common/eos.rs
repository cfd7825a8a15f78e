//! Exactly-once helpers of the client tests (KIP-1289): a transactional producer, the
//! pipeline's outputs, the share group's state, the broker code inside a transaction error.

use shoal_client::admin::SharePartitionOffset;
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::ShareRecord;
use shoal_client::{Admin, Error};
use shoal_protocol::ErrorCode;

use super::share::value;
use super::{config, Broker};

/// An initialized transactional producer with id `id` and the `extra` settings.
pub async fn transactional(broker: &Broker, id: &str, extra: &[(&str, &str)]) -> Producer {
    let mut builder = ProducerConfig::builder(config(broker, &[]));
    builder.transactional_id(id);
    for (k, v) in extra {
        builder.set(k, v).unwrap();
    }
    let p = Producer::new(builder.build().unwrap()).await.unwrap();
    p.init_transactions().await.unwrap();
    p
}

/// The transformed outputs of `records` (value `out:<value>`, key kept), sent in the open
/// transaction and awaited.
pub async fn produce_outputs(p: &Producer, out: &str, records: &[ShareRecord]) {
    let mut deliveries = Vec::new();
    for r in records {
        let mut record = ProducerRecord::new(out, format!("out:{}", value(r)));
        if let Some(key) = &r.key {
            record = record.with_key(key.clone());
        }
        deliveries.push(p.send(record).await.unwrap());
    }
    for d in deliveries {
        d.await.unwrap();
    }
}

/// The share group's state of `topic`-0.
pub async fn share_offsets(broker: &Broker, group: &str, topic: &str) -> SharePartitionOffset {
    let admin = Admin::connect(config(broker, &[])).await.unwrap();
    let offsets = admin
        .describe_share_group_offsets(group, Some(&[(topic.to_owned(), 0)]))
        .await
        .unwrap();
    admin.close().await;
    *offsets[0].1.as_ref().unwrap()
}

/// The broker's code in a transaction error (else the error's own code).
pub fn txn_code(e: &Error) -> ErrorCode {
    match e {
        Error::Transaction(t) => match &t.kind {
            shoal_client::producer::transaction::TxnErrorKind::Broker { code, .. } => *code,
            _ => ErrorCode::NONE,
        },
        other => other.code(),
    }
}
