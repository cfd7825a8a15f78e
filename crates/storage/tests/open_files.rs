//! Segment files are opened on demand, closed when idle and kept within the process-wide
//! bound, counted as the kernel sees them (`/proc/self/fd`).

mod common;

use std::path::Path;
use std::sync::Mutex;

use common::batch;
use shoal_storage::log::{close_idle_files, open_files, set_open_files_limit};
use shoal_storage::{Log, LogConfig};

/// The pool is process-wide: the tests here take turns.
static POOL: Mutex<()> = Mutex::new(());

/// Descriptors this process holds on files under `dir`.
fn fds_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 200,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// A log in `dir` of several segments; returns the batches written, in order.
fn fill(dir: &Path, tag: &str) -> Vec<Vec<u8>> {
    let mut log = Log::open(dir, config()).unwrap();
    let mut written = Vec::new();
    for i in 0..8 {
        let mut b = batch(3, i, &format!("{tag}-{i}"));
        log.append(&mut b, 0).unwrap();
        written.push(b);
    }
    assert!(
        log.segment_count() > 2,
        "the log must span several segments"
    );
    log.close().unwrap();
    written
}

fn all_batches(log: &Log) -> Vec<Vec<u8>> {
    log.iter_batches(0)
        .map(|b| b.unwrap().bytes.to_vec())
        .collect()
}

#[test]
fn idle_logs_hold_no_descriptors_and_busy_ones_stay_within_the_bound() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    const LIMIT: usize = 8;
    set_open_files_limit(LIMIT);
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = (0..20)
        .map(|i| root.path().join(format!("t-{i}")))
        .collect();
    let written: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| fill(d, &i.to_string()))
        .collect();

    // Opened (a clean start): every log recovered, none holding a file.
    let mut logs: Vec<Log> = dirs
        .iter()
        .map(|d| Log::open(d, config()).unwrap())
        .collect();
    assert_eq!(fds_under(root.path()), 0);

    // Read everything: files open on demand, never more than the bound at once.
    for (log, want) in logs.iter().zip(&written) {
        assert_eq!(&all_batches(log), want);
        assert!(fds_under(root.path()) <= LIMIT);
        assert!(open_files() <= LIMIT);
    }
    assert!(
        fds_under(root.path()) > 0,
        "reads left no file open to reuse"
    );

    // Appends after the active file was closed reopen it and land where they should.
    for (i, log) in logs.iter_mut().enumerate() {
        let mut b = batch(2, 9, &format!("more-{i}"));
        log.append(&mut b, 0).unwrap();
        log.sync().unwrap();
        assert!(fds_under(root.path()) <= LIMIT);
    }

    // Two sweeps with no use in between close every file.
    close_idle_files();
    close_idle_files();
    assert_eq!(fds_under(root.path()), 0);

    for (i, log) in logs.into_iter().enumerate() {
        let got = all_batches(&log);
        assert_eq!(&got[..got.len() - 1], &written[i][..]);
        log.close().unwrap();
    }
}

#[test]
fn a_region_keeps_its_file_readable_after_the_pool_closes_it() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    set_open_files_limit(1);
    let root = tempfile::tempdir().unwrap();
    let want = fill(root.path(), "r");
    let log = Log::open(root.path(), config()).unwrap();
    let region = log
        .read_slice(0, 1 << 20, None, false)
        .unwrap()
        .region
        .unwrap();

    // Another log's reads push this file out of the pool; the region still holds it.
    let other = tempfile::tempdir().unwrap();
    fill(other.path(), "o");
    let other_log = Log::open(other.path(), config()).unwrap();
    all_batches(&other_log);
    close_idle_files();
    close_idle_files();
    assert_eq!(fds_under(root.path()), 1, "the region's descriptor");
    let read = region.read().unwrap();
    assert!(read.len() >= want[0].len());
    assert!(want.concat().starts_with(&read));
    drop(region);
    assert_eq!(fds_under(root.path()), 0);
}

#[test]
fn logs_used_from_many_threads_share_a_small_pool_without_losing_a_byte() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    set_open_files_limit(3);
    let root = tempfile::tempdir().unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let root = root.path();
            scope.spawn(move || {
                for l in 0..3 {
                    let dir = root.join(format!("t{t}-{l}"));
                    let mut written = fill(&dir, &format!("{t}{l}"));
                    let mut log = Log::open(&dir, config()).unwrap();
                    for round in 0..5 {
                        assert_eq!(all_batches(&log), written);
                        let mut b = batch(2, 20 + round, &format!("x{t}{l}{round}"));
                        log.append(&mut b, 0).unwrap();
                        log.sync().unwrap();
                        written.push(b);
                        close_idle_files();
                    }
                    log.close().unwrap();
                }
            });
        }
    });
    close_idle_files();
    close_idle_files();
    assert_eq!(fds_under(root.path()), 0);
    assert_eq!(open_files(), 0);
}
