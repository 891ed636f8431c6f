//! Your own stream-processing application on Baton: the crate an application depends on.
//!
//! A typed streams API with the meaning Kafka Streams gives its operations
//! ([`StreamsBuilder`], [`KStream`], [`KGroupedStream`], [`KTable`]), serdes that write Kafka's
//! wire formats ([`serdes`]), grouping through repartition topics, and [`main`]/[`run`]: the
//! whole `baton run` surface for the application's own `main`. Every store of every
//! sub-topology is scaled the KIP-441 way: warmed up on its new owner before the hand-over.
//! `docs/API.md` maps each Kafka Streams operation to Baton's.
//!
//! ```
//! use baton_streams::serdes::{Long, Str};
//! use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
//!
//! let builder = StreamsBuilder::new("wordcount");
//! builder
//!     .stream("lines", Consumed::with(Str, Str))
//!     .flat_map_values(|line: &String| {
//!         line.to_lowercase().split_whitespace().map(str::to_owned).collect::<Vec<_>>()
//!     })
//!     .group_by(|_, word: &String| word.clone(), Grouped::with(Str, Str).named("words"))
//!     .count(Materialized::named("counts"))
//!     .to_stream()
//!     .to("word-counts", Produced::with(Str, Long));
//! print!("{}", builder.describe());
//! ```

mod describe;
mod dsl;
mod fk_join;
mod global;
mod grouped_table;
mod joins;
mod merge;
mod process;
pub mod queries;
pub mod run;
pub mod serdes;
mod split;
mod suppress;
mod table;
mod table_joins;
mod windowed;
mod windows;

pub use dsl::{
    Consumed, Grouped, Joined, KGroupedStream, KStream, KTable, Materialized, Produced,
    Repartitioned, StreamsBuilder,
};
pub use fk_join::TableJoined;
pub use global::GlobalKTable;
pub use grouped_table::KGroupedTable;
pub use joins::{JoinWindows, StreamJoined};
pub use process::{KeyValueStore, Processor, ProcessorContext, Record, WindowStore};
pub use run::{main, parse_args, run, run_with_queries, RunArgs, RunError};
pub use serdes::{Window, Windowed};
pub use split::{Branched, BranchedKStream};
pub use suppress::{BufferConfig, EagerBufferConfig, StrictBufferConfig, Suppressed};
pub use windowed::{SessionWindowedKStream, TimeWindowedKStream, WindowedBy};
pub use windows::{SessionWindows, SlidingWindows, TimeWindows};
