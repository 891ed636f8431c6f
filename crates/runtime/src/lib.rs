//! Baton's runtime: application instances that process input into local state stores backed
//! by changelog topics, and hand tasks over only once their new owner has caught up.
//!
//! The layers, from pure to imperative: [`topology`] (what the application does, no I/O),
//! [`store`] (one persistent store per task and store), [`catchup`] (a store following its
//! changelog), [`task`] (one task's steps),
//! [`thread`] (a group member driving its tasks), [`instance`] (threads, drain, cleanup,
//! metrics).

pub mod catchup;
pub mod cleanup;
pub mod config;
pub mod context;
pub mod control;
pub mod error;
pub mod instance;
pub mod metrics;
pub mod partitioner;
pub mod restore;
pub mod status;
pub mod store;
pub mod task;
pub mod thread;
pub mod topology;

pub use config::RuntimeConfig;
pub use error::{Result, RuntimeError};
pub use restore::{restore, RestoreStats};
pub use store::TaskStore;
pub use thread::Exit;
pub use topology::{count_per_key, Stream, Topology};
