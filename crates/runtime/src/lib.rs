//! Baton's runtime: application instances that process input into local state stores backed
//! by changelog topics, and hand tasks over only once their new owner has caught up.
//!
//! The layers, from pure to imperative: [`topology`] (what the application does, no I/O),
//! [`machine`] (a stream thread's decisions: events in, commands out, time as an input),
//! [`store`] (one persistent store per task and store), [`catchup`] (a store following its
//! changelog), [`thread`] and [`membership`] (the async driver of one machine), [`instance`]
//! (threads, drain, cleanup, metrics).

pub mod buffer_index;
pub mod cache;
pub mod catchup;
pub mod cleanup;
pub mod config;
pub mod context;
pub mod control;
pub mod error;
pub mod global;
pub mod heal;
pub mod instance;
pub mod layout;
pub mod legacy_layout;
pub use baton_core::machine;
pub mod membership;
pub mod metrics;
pub mod partitioner;
pub mod priority;
pub mod query;
pub mod record;
pub mod repeats;
pub mod reseed;
pub mod restore;
pub mod state_dir;
pub mod status;
pub mod store;
pub mod stream_time;
pub mod thread;
pub mod topology;
pub mod unreadable;

pub use config::RuntimeConfig;
pub use error::{Result, RuntimeError};
pub use machine::Exit;
pub use restore::{restore, RestoreStats};
pub use store::TaskStore;
pub use topology::{count_per_key, Stream, Topology};
