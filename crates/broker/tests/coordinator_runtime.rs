//! The coordinator runtime driving a toy shard: replies only after the pass is durable and
//! replayable, inputs applied in submission order, and a failed append answering nothing and
//! rebuilding the shard from the log.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::TestBroker;
use shoal_broker::coordinators::runtime::{Host, Runtime, Unavailable};
use shoal_broker::NodeState;
use shoal_core::coordinator::{
    CoordinatorShard, Emitted, EncodedRecord, RecordError, ReplyToken, ShardRecord, TxnMarker,
};

/// A log of numbers: each input appends one and is answered with the position it got.
#[derive(Default)]
struct Tally {
    numbers: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Number(u64);

impl ShardRecord for Number {
    fn partition(&self, _partitions: u32) -> u32 {
        0
    }

    fn encode(&self) -> Result<EncodedRecord, RecordError> {
        Ok((b"n".to_vec(), Some(self.0.to_be_bytes().to_vec())))
    }

    fn decode(_key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        let bytes: [u8; 8] = value
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| RecordError("not a number".to_string()))?;
        Ok(Number(u64::from_be_bytes(bytes)))
    }
}

impl CoordinatorShard for Tally {
    type Input = u64;
    type Reply = usize;
    type Record = Number;
    type Effect = u64;

    fn handle(&mut self, _now_ms: i64, token: ReplyToken, input: u64, out: &mut Emitted<Self>) {
        self.numbers.push(input);
        out.records.push(Number(input));
        out.effects.push(input);
        out.reply(token, self.numbers.len());
    }

    fn tick(&mut self, _now_ms: i64, _out: &mut Emitted<Self>) {}

    fn next_deadline(&self) -> Option<i64> {
        None
    }

    fn replay(&mut self, record: Number) {
        self.numbers.push(record.0);
    }

    fn replay_marker(&mut self, _marker: TxnMarker) {}

    fn loaded(&mut self, _now_ms: i64, _out: &mut Emitted<Self>) {}
}

/// Counts loads and the numbers the effects saw, and reports what each load replayed.
#[derive(Clone, Default)]
struct TallyHost {
    loads: Arc<AtomicUsize>,
    replayed: Arc<std::sync::Mutex<Vec<Vec<u64>>>>,
    effects: Arc<std::sync::Mutex<Vec<u64>>>,
    topic: &'static str,
}

impl Host<Tally> for TallyHost {
    fn topic(&self) -> &'static str {
        self.topic
    }

    async fn new_shard(&self, _node: &NodeState) -> anyhow::Result<Tally> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        Ok(Tally::default())
    }

    async fn after_replay(
        &self,
        _node: &NodeState,
        shard: &mut Tally,
        _first: bool,
        _out: &mut Emitted<Tally>,
    ) -> anyhow::Result<()> {
        self.replayed.lock().unwrap().push(shard.numbers.clone());
        Ok(())
    }

    fn pass_inputs(&self, _node: &NodeState, _shard: &Tally, _queued: &[&u64]) -> Vec<u64> {
        Vec::new()
    }

    fn effects(&self, _node: &Arc<NodeState>, effects: Vec<u64>) {
        self.effects.lock().unwrap().extend(effects);
    }
}

#[tokio::test]
async fn inputs_apply_in_submission_order_and_replay_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "tally-state", 1).await;
    let host = TallyHost {
        topic: "tally-state",
        ..TallyHost::default()
    };
    let runtime = Runtime::<Tally>::default();
    runtime
        .start(&broker.broker.node, host.clone())
        .await
        .unwrap();
    let mut replies = Vec::new();
    for n in 1..=50u64 {
        replies.push(runtime.submit(n).await.unwrap());
    }
    // Awaited last to first: positions still follow the submission order.
    let mut positions = Vec::new();
    for reply in replies.into_iter().rev() {
        positions.push(reply.await.unwrap());
    }
    positions.reverse();
    assert_eq!(positions, (1..=50).collect::<Vec<usize>>());
    // Effects come after the pass is durable, in order.
    assert_eq!(
        *host.effects.lock().unwrap(),
        (1..=50).collect::<Vec<u64>>()
    );

    // A new runtime on the same topic replays what the first one answered.
    let again = Runtime::<Tally>::default();
    again
        .start(&broker.broker.node, host.clone())
        .await
        .unwrap();
    assert_eq!(
        host.replayed.lock().unwrap().last().unwrap(),
        &(1..=50).collect::<Vec<u64>>()
    );
    assert_eq!(again.call(51).await, Ok(51));
    drop(conn);
    broker.stop().await;
}

#[tokio::test]
async fn a_failed_append_answers_nothing_and_rebuilds_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    // No such topic: every append fails.
    let host = TallyHost {
        topic: "tally-missing",
        ..TallyHost::default()
    };
    let runtime = Runtime::<Tally>::default();
    runtime
        .start(&broker.broker.node, host.clone())
        .await
        .unwrap();
    assert_eq!(host.loads.load(Ordering::SeqCst), 1);
    assert_eq!(runtime.call(7).await, Err(Unavailable));
    assert_eq!(runtime.call(8).await, Err(Unavailable));
    // Each failed pass rebuilt the shard from the (empty) log, so 7 was not kept.
    assert_eq!(host.loads.load(Ordering::SeqCst), 3);
    assert!(host.replayed.lock().unwrap().iter().all(Vec::is_empty));
    assert!(
        host.effects.lock().unwrap().is_empty(),
        "no effect of a failed pass"
    );
    broker.stop().await;
}
