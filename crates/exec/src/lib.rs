//! Runs a [`deinsum_plan::Plan`] on P ranks over a [`Communicator`].

pub mod comm;
pub use comm::{CommError, Communicator, Traffic};
