//! DescribeProducers: the producers a partition knows (idempotence and transaction state), as
//! Kafka's `kafka-transactions describe-producers` shows them.

use shoal_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use shoal_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use shoal_protocol::ErrorCode;

use crate::broker::Broker;
use crate::producer_state::state_config;

fn partition_producers(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> Result<Vec<ProducerState>, ErrorCode> {
    let topic = broker
        .topic(topic)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let partition = broker.led_partition(&topic, index)?;
    let mut log = partition.lock();
    let producers = partition
        .producers(&mut log, state_config(&broker.config), broker.now_ms())
        .map_err(|e| ErrorCode(e.kafka_error_code()))?;
    Ok(producers
        .state()
        .entries()
        .map(|(id, e)| {
            ProducerState::default()
                .with_producer_id(ProducerId(id.0))
                .with_producer_epoch(i32::from(e.epoch().0))
                .with_last_sequence(e.last_sequence().unwrap_or(-1))
                .with_last_timestamp(e.last_timestamp())
                .with_coordinator_epoch(e.coordinator_epoch())
                .with_current_txn_start_offset(e.current_txn_first_offset().unwrap_or(-1))
        })
        .collect())
}

pub fn describe_producers(
    broker: &Broker,
    request: &DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let mut out = PartitionResponse::default().with_partition_index(index);
                    match partition_producers(broker, t.name.0.as_str(), index) {
                        Ok(active) => out.active_producers = active,
                        Err(code) => out.error_code = code.code(),
                    }
                    out
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
