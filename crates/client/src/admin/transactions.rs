//! Transactions: list (ListTransactions on every broker, with Kafka's filters) and describe
//! (DescribeTransactions to each transactional id's coordinator).

use std::time::Duration;

use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest, ProducerId,
    TransactionalId,
};
use shoal_protocol::ApiKey;

use super::{check, in_order, s, Admin, ItemResults};
use crate::cluster::CoordinatorType;
use crate::error::Error;

/// Which transactions [`Admin::list_transactions`] lists; the default lists all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTransactionsFilter {
    /// Only these states (`Ongoing`, `PrepareCommit`, `CompleteAbort`...); empty for all.
    pub states: Vec<String>,
    /// Only these producer ids; empty for all.
    pub producer_ids: Vec<i64>,
    /// Only transactions open at least this long (ListTransactions v1+).
    pub running_longer_than: Option<Duration>,
    /// Only transactional ids matching this regular expression (ListTransactions v2+).
    pub transactional_id_pattern: Option<String>,
}

/// A transaction in [`Admin::list_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
}

/// A transaction in [`Admin::describe_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout: Duration,
    /// When the open transaction started (ms since the epoch); `None` without one.
    pub start_time_ms: Option<i64>,
    /// The partitions in the transaction, as (topic, partition).
    pub partitions: Vec<(String, i32)>,
    /// The coordinator that answered.
    pub coordinator_id: i32,
}

impl Admin {
    /// The transactions of every broker's coordinator that match `filter`, broker by broker in
    /// the order each answered.
    ///
    /// # Errors
    /// A broker that could not be asked or answered with an error; a filter the broker's
    /// version lacks is an encoding error (nothing sent).
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>, Error> {
        let duration_ms = filter
            .running_longer_than
            .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let request = ListTransactionsRequest::default()
            .with_state_filters(filter.states.iter().map(|st| s(st)).collect())
            .with_producer_id_filters(filter.producer_ids.iter().map(|p| ProducerId(*p)).collect())
            .with_duration_filter(duration_ms)
            .with_transactional_id_pattern(filter.transactional_id_pattern.as_deref().map(s));
        let answers = self
            .on_every_broker(ApiKey::ListTransactions, &request, |r| r.error_code)
            .await?;
        let listed = answers
            .into_iter()
            .flat_map(|r| r.transaction_states)
            .map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect();
        Ok(listed)
    }

    /// Describes transactions by transactional id, one DescribeTransactions per id to its
    /// coordinator.
    ///
    /// # Errors
    /// Per id: TRANSACTIONAL_ID_NOT_FOUND, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, or the
    /// coordinator not found in time.
    pub async fn describe_transactions<S: AsRef<str>>(
        &self,
        transactional_ids: &[S],
    ) -> Result<ItemResults<String, TransactionDescription>, Error> {
        let mut results = Vec::new();
        for id in transactional_ids {
            let id = id.as_ref();
            let request = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s(id))]);
            let result = async {
                let coordinator = self
                    .cluster
                    .coordinator(CoordinatorType::Transaction, id)
                    .await?;
                self.coordinator_call(CoordinatorType::Transaction, id, &request, |r| {
                    transaction_described(id, coordinator, r)
                })
                .await
            }
            .await;
            results.push((id.to_owned(), result));
        }
        Ok(results)
    }
}

fn transaction_described(
    id: &str,
    coordinator_id: i32,
    response: DescribeTransactionsResponse,
) -> Result<TransactionDescription, Error> {
    let answers = response.transaction_states.into_iter().map(|t| {
        let result = check(ApiKey::DescribeTransactions, t.error_code, None).map(|()| {
            TransactionDescription {
                state: t.transaction_state.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
                timeout: Duration::from_millis(
                    u64::try_from(t.transaction_timeout_ms).unwrap_or(0),
                ),
                start_time_ms: (t.transaction_start_time_ms >= 0)
                    .then_some(t.transaction_start_time_ms),
                partitions: t
                    .topics
                    .into_iter()
                    .flat_map(|tp| {
                        let topic = tp.topic.0.to_string();
                        tp.partitions.into_iter().map(move |p| (topic.clone(), p))
                    })
                    .collect(),
                coordinator_id,
            }
        });
        (t.transactional_id.0.to_string(), result)
    });
    let mut one = in_order(ApiKey::DescribeTransactions, &[id.to_owned()], answers);
    one.pop().map_or_else(
        || {
            Err(Error::IncompleteResponse {
                api: ApiKey::DescribeTransactions,
                item: id.to_owned(),
            })
        },
        |(_, r)| r,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
    use kafka_protocol::messages::TopicName;
    use shoal_protocol::ErrorCode;

    #[test]
    fn a_described_transaction_flattens_partitions_and_maps_errors() {
        let response = DescribeTransactionsResponse::default().with_transaction_states(vec![
            TransactionState::default()
                .with_transactional_id(TransactionalId(s("t")))
                .with_transaction_state(s("Ongoing"))
                .with_producer_id(ProducerId(5))
                .with_transaction_timeout_ms(60_000)
                .with_transaction_start_time_ms(-1)
                .with_topics(vec![TopicData::default()
                    .with_topic(TopicName(s("a")))
                    .with_partitions(vec![0, 2])]),
        ]);
        let d = transaction_described("t", 1, response).unwrap();
        assert_eq!(
            d.partitions,
            vec![("a".to_string(), 0), ("a".to_string(), 2)]
        );
        assert_eq!(d.timeout, Duration::from_secs(60));
        assert_eq!(d.start_time_ms, None);
        let unknown = DescribeTransactionsResponse::default().with_transaction_states(vec![
            TransactionState::default()
                .with_transactional_id(TransactionalId(s("t")))
                .with_error_code(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.0),
        ]);
        let e = transaction_described("t", 1, unknown).unwrap_err();
        assert_eq!(e.code(), ErrorCode::TRANSACTIONAL_ID_NOT_FOUND);
        let e = transaction_described("t", 1, DescribeTransactionsResponse::default()).unwrap_err();
        assert!(matches!(e, Error::IncompleteResponse { .. }));
    }
}
