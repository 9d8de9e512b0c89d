//! Runs a [`deinsum_plan::Plan`] on P ranks over a [`Communicator`].
//!
//! - [`InProcess`]: P ranks as threads with message passing (the default backend);
//! - [`execute`], [`execute_measured`], [`execute_lent`], [`execute_lent_blocks`]: the executor, generic over the
//!   communicator, following the plan's step semantics (Load / Redistribute / Compute / Free);
//! - [`kernels`]: local contractions (transpose + GEMM, tiled fused groups);
//! - [`gemm`]: which library runs the GEMMs (faer, or a system CBLAS with feature `blas`);
//! - [`data`]: the seeded generator and caller-supplied inputs;
//! - [`reference`]: serial evaluators for checks;
//! - [`preflight`]: memory and rank-count checks made before a run allocates anything.
//!
//! The executor's internals (moves, bundles, the memory tally, tuning) are private modules:
//! see docs/tuning.md.

mod atb;
#[cfg(feature = "blas-external")]
mod blas;
mod block;
pub mod buffers;
mod bundle;
pub mod comm;
pub mod data;
mod execute;
pub mod gemm;
mod held;
pub mod kernels;
mod layout;
mod linger;
mod local;
mod mem;
mod moves;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod npy;
mod npy_input;
pub mod preflight;
pub mod reference;
pub mod scalar;
mod threads;
mod tune;
pub use buffers::OutOfMemory;
pub use comm::{Calls, Collective, CommError, Communicator, Traffic};
pub use data::Inputs;
/// The element type as a value (defined with the plan, which records it).
pub use deinsum_plan::DType;
pub use execute::{
    assemble, assemble_onto, execute, execute_lent, execute_lent_blocks, execute_measured,
    gather_reports, plan_hash, primary_slabs, slab_in, DistTensor, ExecError, ExecOptions,
    RunReport, Stage, StepKind, StepMeasure,
};
pub use gemm::Gemm;
pub use local::{InProcess, LocalComm, RankFailure};
pub use scalar::Scalar;
