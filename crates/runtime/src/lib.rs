//! Baton's runtime: stateful tasks with persistent stores backed by changelog topics.
//!
//! Work in progress (issue 5): the persistent task store and changelog restore are here; stream
//! threads, the task lifecycle, `baton run`, `baton produce` and `baton drain` are not yet.

pub mod restore;
pub mod store;

pub use restore::{restore, RestoreStats};
pub use store::TaskStore;
