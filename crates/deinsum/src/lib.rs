//! deinsum: compile an einsum into a distributed, communication-optimal execution plan and run
//! it, on in-process ranks or on MPI.
//!
//! The facade re-exports the pipeline's crates; [`Einsum::compile`] and `.run(&world, inputs)`
//! are the library entry points.

pub use deinsum_exec as exec;
pub use deinsum_expr as expr;
pub use deinsum_path as path;
pub use deinsum_plan as plan;
pub use deinsum_soap as soap;
