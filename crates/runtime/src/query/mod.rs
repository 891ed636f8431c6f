//! Interactive queries: each store read where it is held, through every scale-out, drain and
//! crash, with the staleness of the copy that answered stated in the answer.
//!
//! [`format`] (how keys and values read), [`routing`] (where copies live, from the
//! assignment), [`plan`] (which copy answers: pure), [`copies`] (the stores held here, read
//! beside the stream threads), [`server`] and [`forward`] (HTTP), [`metrics`].

pub mod copies;
pub mod format;
pub mod forward;
pub mod metrics;
pub mod plan;
pub mod routing;
pub mod server;
