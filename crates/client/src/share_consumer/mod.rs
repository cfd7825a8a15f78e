//! The share consumer's parts that decide without doing I/O: the acknowledgement bookkeeping
//! ([`acknowledgements`]). The consumer built on it (membership, share sessions, poll) comes
//! with issue 11.

pub mod acknowledgements;
