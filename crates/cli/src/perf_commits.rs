//! `shoal perf commits`: what a client that pipelines OffsetCommits on its coordinator
//! connection (librdkafka sends every asynchronous commit at once) waits for. Each round writes
//! `--commits` OffsetCommit requests of one standalone group (generation -1, offsets rising)
//! to one connection in one write, then reads every response; the round's time is from the
//! write to the last response. Prints one JSON line: rounds, commits per round, the rounds'
//! p50 / p90 / max in ms and commits per second over all rounds. Afterwards it checks that every
//! commit was answered without error, in order, and that the group's committed offset is the
//! last one sent (OffsetFetch), and fails otherwise. A measurement, not a test.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::BytesMut;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, GroupId, OffsetCommitRequest, OffsetFetchRequest, RequestHeader,
    TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use shoal_client::Connection;
use shoal_protocol::response::{decode_response, Response};
use shoal_protocol::ErrorCode;

/// OffsetCommit and OffsetFetch versions used (librdkafka 2.x sends v8 / v7).
const COMMIT_VERSION: i16 = 8;
const FETCH_VERSION: i16 = 7;
/// Bounds, so that a typo cannot flood the broker.
const ROUNDS_MAX: usize = 10_000;
const COMMITS_MAX: usize = 10_000;

#[derive(clap::Args, Debug, Clone)]
pub struct CommitsArgs {
    /// Rounds of pipelined commits.
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// OffsetCommit requests written at once per round.
    #[arg(long, default_value_t = 201)]
    pub commits: usize,
    /// Give up after this many seconds in all.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

/// Runs the harness against `bootstrap` (loopback only).
///
/// # Errors
/// Bad bounds, a broker not on loopback, an error code, a timeout or a wrong committed offset.
pub async fn commits(bootstrap: SocketAddr, args: &CommitsArgs) -> anyhow::Result<()> {
    if !bootstrap.ip().is_loopback() {
        bail!("shoal perf runs against a broker on loopback only, not {bootstrap}");
    }
    if args.rounds == 0 || args.rounds > ROUNDS_MAX {
        bail!("--rounds must be within 1..={ROUNDS_MAX}");
    }
    if args.commits == 0 || args.commits > COMMITS_MAX {
        bail!("--commits must be within 1..={COMMITS_MAX}");
    }
    let limit = Duration::from_secs(args.timeout_secs);
    tokio::time::timeout(limit, run(bootstrap, args))
        .await
        .map_err(|_| anyhow!("gave up after {} s", args.timeout_secs))?
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn run(bootstrap: SocketAddr, args: &CommitsArgs) -> anyhow::Result<()> {
    let mut conn = Connection::connect(bootstrap).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("perf-commits-{}", &run_id[..8]);
    let group = format!("perf-commits-{}", &run_id[..8]);
    let created = conn
        .request(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s(&topic)))
                    .with_num_partitions(1)
                    .with_replication_factor(-1)]),
        )
        .await?;
    let t = created
        .topics
        .first()
        .context("empty CreateTopics response")?;
    if t.error_code != 0 {
        bail!("creating {topic}: {}", ErrorCode(t.error_code));
    }
    let mut rounds_ms = Vec::with_capacity(args.rounds);
    let mut next_offset: i64 = 0;
    let mut correlation_id: i32 = 1_000_000;
    let started = Instant::now();
    for _ in 0..args.rounds {
        let mut wire = BytesMut::new();
        let first_id = correlation_id;
        for _ in 0..args.commits {
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(&topic)))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(next_offset)])]);
            let mut frame = BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(ApiKey::OffsetCommit as i16)
                .with_request_api_version(COMMIT_VERSION)
                .with_correlation_id(correlation_id)
                .with_client_id(Some(s("shoal-perf-commits")))
                .encode(
                    &mut frame,
                    OffsetCommitRequest::header_version(COMMIT_VERSION),
                )?;
            request.encode(&mut frame, COMMIT_VERSION)?;
            wire.extend_from_slice(&(frame.len() as i32).to_be_bytes());
            wire.extend_from_slice(&frame);
            correlation_id += 1;
            next_offset += 1;
        }
        let round = Instant::now();
        conn.send_raw(&wire).await?;
        for expected in first_id..correlation_id {
            let frame = conn.read_frame().await?;
            let (id, response) = decode_response(ApiKey::OffsetCommit, COMMIT_VERSION, frame)?;
            if id != expected {
                bail!("response {id} came where {expected} was due");
            }
            let Response::OffsetCommit(r) = response else {
                bail!("not an OffsetCommit response");
            };
            for p in r.topics.iter().flat_map(|t| &t.partitions) {
                if p.error_code != 0 {
                    bail!("commit {id}: {}", ErrorCode(p.error_code));
                }
            }
        }
        rounds_ms.push(round.elapsed().as_secs_f64() * 1000.0);
    }
    let seconds = started.elapsed().as_secs_f64();
    let fetched = conn
        .request(
            FETCH_VERSION,
            &OffsetFetchRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(&topic)))
                    .with_partition_indexes(vec![0])])),
        )
        .await?;
    let committed = fetched
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.committed_offset)
        .context("empty OffsetFetch response")?;
    if committed != next_offset - 1 {
        bail!(
            "the group committed {committed}, not the last offset sent ({})",
            next_offset - 1
        );
    }
    rounds_ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        rounds_ms[((rounds_ms.len() as f64 * q).ceil() as usize).clamp(1, rounds_ms.len()) - 1]
    };
    println!(
        "{{\"rounds\":{},\"commits_per_round\":{},\"round_ms_p50\":{:.2},\"round_ms_p90\":{:.2},\"round_ms_max\":{:.2},\"commits_per_s\":{:.0}}}",
        args.rounds,
        args.commits,
        at(0.5),
        at(0.9),
        at(1.0),
        (args.rounds * args.commits) as f64 / seconds
    );
    Ok(())
}
