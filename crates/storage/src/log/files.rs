//! Segment files opened on demand and closed when idle, within a process-wide bound.
//!
//! A broker with ten thousand partitions would otherwise hold a descriptor for every segment
//! for its whole life. Instead each segment's [`SegmentFile`] opens its file on first use and
//! keeps it until the pool needs room (least recently used first, once more than
//! [`set_open_files_limit`] are open) or [`close_idle_files`] finds it unused since the
//! previous sweep. A log releases its files once it has opened, so an idle partition costs
//! no descriptor at all.
//!
//! Callers get an `Arc<File>`: a read, a `FileRegion` or a `SyncHandle` holding one keeps its
//! descriptor alive past a close, so closing never interrupts I/O in flight. The bound is on
//! the descriptors the pool keeps, not on those borrowed for a moment. An fsync through a
//! descriptor other than the one written through is fine: the kernel writes back an inode's
//! dirty pages whichever descriptor asks.
//!
//! Invariants: `open` counts the slots holding a file; a slot is in `slots` from creation
//! until it is dropped (then pruned). Lock order: `slots`, then a slot's `state`; nothing takes
//! `slots` while holding a `state`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use crate::error::{Result, StorageError};

/// How many segment files the pool keeps open unless told otherwise.
pub const OPEN_FILES_LIMIT_DEFAULT: usize = 4096;

struct Pool {
    limit: AtomicUsize,
    /// Slots holding a file.
    open: AtomicUsize,
    /// Ticks once per use; orders uses for eviction.
    clock: AtomicU64,
    /// The clock at the previous idle sweep.
    last_sweep: AtomicU64,
    slots: Mutex<Slots>,
}

struct Slots {
    all: Vec<Weak<Slot>>,
    /// Length after the last pruning of dropped slots.
    pruned_len: usize,
}

struct Slot {
    state: Mutex<State>,
    last_used: AtomicU64,
}

struct State {
    path: PathBuf,
    file: Option<Arc<File>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        limit: AtomicUsize::new(OPEN_FILES_LIMIT_DEFAULT),
        open: AtomicUsize::new(0),
        clock: AtomicU64::new(0),
        last_sweep: AtomicU64::new(0),
        slots: Mutex::new(Slots {
            all: Vec::new(),
            pruned_len: 0,
        }),
    })
}

/// Sets how many segment files stay open at most (at least 1); closes the least recently
/// used ones if more are open now.
pub fn set_open_files_limit(limit: usize) {
    let pool = pool();
    pool.limit.store(limit.max(1), Ordering::Relaxed);
    pool.evict();
}

/// The current bound; see [`set_open_files_limit`].
pub fn open_files_limit() -> usize {
    pool().limit.load(Ordering::Relaxed)
}

/// How many segment files the pool holds open now.
pub fn open_files() -> usize {
    pool().open.load(Ordering::Relaxed)
}

/// Closes every segment file not used since the previous call; returns how many. Called
/// periodically, a file idle for one to two periods is closed.
pub fn close_idle_files() -> usize {
    let pool = pool();
    let since = pool
        .last_sweep
        .swap(pool.clock.load(Ordering::Relaxed), Ordering::Relaxed);
    let mut closed = 0;
    for slot in pool.live_slots() {
        if slot.last_used.load(Ordering::Relaxed) <= since && slot.close() {
            closed += 1;
        }
    }
    closed
}

impl Pool {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The slots not yet dropped (pruning the rest).
    fn live_slots(&self) -> Vec<Arc<Slot>> {
        let mut slots = lock(&self.slots);
        let live: Vec<Arc<Slot>> = slots.all.iter().filter_map(Weak::upgrade).collect();
        slots.all.retain(|w| w.strong_count() > 0);
        slots.pruned_len = slots.all.len();
        live
    }

    /// Closes the least recently used files until an eighth of the bound is free again.
    fn evict(&self) {
        let limit = self.limit.load(Ordering::Relaxed);
        if self.open.load(Ordering::Relaxed) <= limit {
            return;
        }
        let mut open: Vec<(u64, Arc<Slot>)> = self
            .live_slots()
            .into_iter()
            .filter(|s| s.is_open())
            .map(|s| (s.last_used.load(Ordering::Relaxed), s))
            .collect();
        let target = (limit - limit / 8).max(1);
        if open.len() <= target {
            return;
        }
        open.sort_unstable_by_key(|(t, _)| *t);
        let excess = open.len() - target;
        for (_, slot) in open.into_iter().take(excess) {
            slot.close();
        }
    }

    fn register(&self, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots.all.len() >= 2 * slots.pruned_len.max(512) {
            slots.all.retain(|w| w.strong_count() > 0);
            slots.pruned_len = slots.all.len();
        }
        slots.all.push(Arc::downgrade(slot));
    }
}

impl Slot {
    fn is_open(&self) -> bool {
        lock(&self.state).file.is_some()
    }

    /// Drops the kept file; whether there was one.
    fn close(&self) -> bool {
        let file = lock(&self.state).file.take();
        let had = file.is_some();
        if had {
            pool().open.fetch_sub(1, Ordering::Relaxed);
        }
        had
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if state.file.take().is_some() {
            pool().open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A segment's file, opened (read-write) when used. Clones share the same slot.
#[derive(Clone)]
pub(crate) struct SegmentFile(Arc<Slot>);

impl std::fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.0.state);
        f.debug_struct("SegmentFile")
            .field("path", &state.path)
            .field("open", &state.file.is_some())
            .finish()
    }
}

impl SegmentFile {
    /// The file at `path`, already open as `file`.
    pub(crate) fn new(path: PathBuf, file: File) -> SegmentFile {
        let pool = pool();
        let slot = Arc::new(Slot {
            state: Mutex::new(State {
                path,
                file: Some(Arc::new(file)),
            }),
            last_used: AtomicU64::new(pool.tick()),
        });
        pool.open.fetch_add(1, Ordering::Relaxed);
        pool.register(&slot);
        pool.evict();
        SegmentFile(slot)
    }

    /// The open file, opening it again if the pool closed it.
    ///
    /// # Errors
    /// `Io` if it cannot be opened (removed behind the log's back, or out of descriptors).
    pub(crate) fn get(&self) -> Result<Arc<File>> {
        let pool = pool();
        self.0.last_used.store(pool.tick(), Ordering::Relaxed);
        let mut state = lock(&self.0.state);
        if let Some(file) = &state.file {
            return Ok(Arc::clone(file));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&state.path)
            .map_err(|e| StorageError::io("open", &state.path, e))?;
        let file = Arc::new(file);
        // Counted before it can be seen (and closed), so the count never dips below zero.
        pool.open.fetch_add(1, Ordering::Relaxed);
        state.file = Some(Arc::clone(&file));
        drop(state);
        pool.evict();
        Ok(file)
    }

    /// Closes the kept file now (it reopens on the next use).
    pub(crate) fn release(&self) {
        self.0.close();
    }

    /// Records that the file was renamed to `path`.
    pub(crate) fn set_path(&self, path: &Path) {
        lock(&self.0.state).path = path.to_path_buf();
    }

    /// Whether both are the same segment file (not merely the same path).
    pub(crate) fn same(&self, other: &SegmentFile) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
