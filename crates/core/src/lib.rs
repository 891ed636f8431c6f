//! Baton's decisions, with no I/O: no sockets, files, clocks or async runtime. Events come in,
//! commands go out, and time is an input, so the runtime (`baton-runtime`), the simulator
//! and the schedule fuzzer drive the same code.
//!
//! - [`machine`]: a stream thread's task lifecycle, rebalance triggers, writes and commits.
//! - [`backoff`]: the one retry policy (the Kafka client's requests and the machine's task
//!   retries).
//! - [`status`]: the words the machine and the status board share ([`status::Role`],
//!   [`status::Phase`]); [`config`]: the settings the machine reads.

pub mod backoff;
pub mod config;
pub mod machine;
pub mod status;

pub use backoff::{Backoff, Retrying};
