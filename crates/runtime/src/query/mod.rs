//! Interactive queries: each store read where it is held, through every scale-out, drain and
//! crash, with the staleness of the copy that answered stated in the answer.
//!
//! - [`format`]: how keys and values read; [`routing`]: where copies live, from the assignment.
//! - [`plan`]: which copy answers; [`staleness`]: `lag_ms`. Both pure.
//! - [`lookup`]: a query checked and resolved to its task; [`engine`]: its course, copy by
//!   copy; [`read`]: this instance's own copy ([`copies`]: the stores held here);
//!   [`upstream`]: `at_least` on an input upstream of the store, resolved hop by hop.
//! - [`server`] and [`forward`]: HTTP; [`api`]: the same queries in-process; [`metrics`].

pub mod api;
pub mod copies;
pub mod engine;
pub mod format;
pub mod forward;
pub mod global;
pub mod lookup;
pub mod metrics;
pub mod plan;
pub mod read;
pub mod routing;
pub mod server;
pub mod staleness;
pub mod upstream;
