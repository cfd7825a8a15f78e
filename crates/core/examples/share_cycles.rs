//! Times the share-partition machine's hot path: acquire + acknowledge cycles on one share
//! partition, as ShareFetch drives it, with no I/O around it.
//!
//! Four members take turns; each cycle one member acquires up to 100 records (log batches of
//! 10) from the next fetch offset and the acquisition made three cycles earlier is
//! acknowledged per offset: mostly ACCEPT, every 97th RELEASE (delivered again later, so runs
//! split and re-acquisition happens), every 13th REJECT. Prints the time per cycle.
//!
//! Run: `cargo run --release -p shoal-core --example share_cycles -- [CYCLES]`
//! (default 200000).

use std::collections::VecDeque;
use std::time::Instant;

use shoal_core::share_partition::{
    AckBatch, AcquireMode, AcquireRequest, AcquiredRecords, FetchedBatch, Isolation,
    SharePartition, SharePartitionConfig,
};

const MEMBERS: [&str; 4] = ["m0", "m1", "m2", "m3"];
const LOG_BATCH: i64 = 10;
const MAX_RECORDS: i32 = 100;
const OUTSTANDING: usize = 3;

fn fetched(from: i64) -> Vec<FetchedBatch> {
    let base = from - from.rem_euclid(LOG_BATCH);
    (0..i64::from(MAX_RECORDS) / LOG_BATCH)
        .map(|i| FetchedBatch {
            base_offset: base + i * LOG_BATCH,
            last_offset: base + (i + 1) * LOG_BATCH - 1,
            is_control: false,
            producer_id: -1,
            is_transactional: false,
        })
        .collect()
}

fn ack_batches(records: &[AcquiredRecords]) -> Vec<AckBatch> {
    records
        .iter()
        .map(|r| {
            let types = (r.first_offset..=r.last_offset)
                .map(|o| match o {
                    o if o % 13 == 0 => 3,
                    o if o % 97 == 0 => 2,
                    _ => 1,
                })
                .collect();
            AckBatch::new(r.first_offset, r.last_offset, types)
        })
        .collect()
}

fn main() {
    let cycles: u64 = std::env::args()
        .nth(1)
        .map_or(200_000, |a| a.parse().expect("CYCLES is a number"));
    let mut sp = SharePartition::new(SharePartitionConfig::default(), 0, 0).expect("valid config");
    let mut pending: VecDeque<(&str, Vec<AcquiredRecords>)> = VecDeque::new();
    let (mut acquired, mut writes) = (0i64, 0u64);
    let started = Instant::now();
    for i in 0..cycles {
        let now = i64::try_from(i).unwrap_or(i64::MAX);
        let member = MEMBERS[(i % 4) as usize];
        let from = sp.next_fetch_offset();
        let batches = fetched(from);
        let acquisition = sp
            .acquire(&AcquireRequest {
                member_id: member,
                fetch_offset: from,
                fetched: &batches,
                max_records: MAX_RECORDS,
                batch_size: MAX_RECORDS,
                mode: AcquireMode::BatchOptimized,
                isolation: Isolation::ReadUncommitted,
                now_ms: now,
            })
            .expect("acquire");
        acquired += acquisition
            .records
            .iter()
            .map(|r| r.last_offset - r.first_offset + 1)
            .sum::<i64>();
        pending.push_back((member, acquisition.records));
        if pending.len() > OUTSTANDING {
            let (member, records) = pending.pop_front().expect("pending");
            let write = sp
                .acknowledge(member, &ack_batches(&records), now)
                .expect("acknowledge");
            writes += u64::from(write.is_some());
        }
    }
    let elapsed = started.elapsed();
    println!(
        "cycles {cycles} records_acquired {acquired} writes {writes} spso {} ns_per_cycle {:.0}",
        sp.start_offset(),
        elapsed.as_nanos() as f64 / cycles as f64
    );
}
