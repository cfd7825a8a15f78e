//! A deterministic simulation that tries to break exactly-once queues (issue 13), in the manner
//! of TigerBeetle's VOPR and FoundationDB's simulator: one seed chooses everything, virtual
//! time orders everything, and the checker runs after every step.
//!
//! - [`broker`]: Shoal's sans-IO machines from `shoal-core`, wired as `shoal-broker` wires
//!   them (persist before answering, markers written lazily and rewritten after a crash,
//!   replay at start) over the simulated [`disk`].
//! - [`runtime`]: the coordinator runtime's I/O over the simulated disk, around the order of
//!   work the broker ships (`shoal_core::coordinator::Passes`).
//! - [`client`]: model clients: exactly-once pipeline workers with transactional
//!   acknowledgements, plain share consumers in explicit mode; the world makes zombies of
//!   them, pauses them past their session, kills and restarts them. About half the seeds give
//!   the share group a dead-letter queue (KIP-1191) and make some inputs poison
//!   ([`broker::Poison`]): workers reject exactly those, in their transactions, whose dead
//!   letters the transactions carry.
//! - [`world`]: the event queue, a network that delays, drops, duplicates and reorders, broker
//!   crashes that lose an unflushed suffix of each log, the quiet phase, and [`world::run`].
//! - [`check`]: the reference model and the invariants.
//! - [`shrink`]: the shortest failing prefix of a failing seed.
//!
//! Determinism: no clocks, no threads, no hash-ordered iteration in this crate; every random
//! choice comes from the run's [`rng::Rng`]. Known bugs can be switched back on
//! ([`world::Bugs`]; `shoal_core::faults` for those in the core machines).

pub mod broker;
pub mod check;
pub mod client;
pub mod disk;
pub mod proto;
pub mod rng;
pub mod runtime;
pub mod shrink;
pub mod world;

pub use world::{run, Bugs, Outcome, RunConfig};
