//! Baton's Kafka layer: a small async client on `kafka-protocol` messages, and a group member
//! that runs the classic rebalance protocol with Baton's assignor on the leader.

pub mod batch;
pub mod buffers;
pub mod client;
pub mod connection;
pub mod error;
pub mod inspect;
pub mod member;
pub mod offsets;
pub mod records;
pub mod testing;

pub use client::{Backoff, Client};
pub use error::{Error, Result};
pub use member::{Beat, GroupMember, MemberConfig, Pulse};
