//! Relational joins on deinsum's distributed machinery.
//!
//! A table is a sparse relation over (key, row number); the join index of L and R on key k
//! is the sparse product `kl,kr->lr` ([`kernel::hash_join`] computes it locally, as
//! [`kernel::Pairs`]), and the distributed strategies are the sparse machinery's moves:
//! shuffle (both relations redistributed by key), broadcast (one replicated), semi-join (a
//! fetch of the rows whose keys the other side holds, or of those passing a Bloom filter of
//! them), join index (row numbers first, other columns last). [`placement`] says where the
//! tables are: split by rows over all ranks, each on its own group of ranks, or split by
//! columns (keys on one group, the other columns on another: [`columns`] joins them by the
//! join index alone, late materialization). An inspector pass ([`inspect`]) measures the keys, exactly or by
//! mergeable sketches ([`sketch`]), and predicts every strategy's bytes per rank; [`dist::join`] runs the chosen one and the communicator's
//! counts equal the prediction on every rank. [`agg`] computes a GROUP BY sum or count over
//! the join without materializing it.
//!
//! Semantics are SQL's `SELECT * FROM L JOIN R USING (k)` (as DuckDB): NULL keys never
//! match, duplicate keys give every pair, the key columns come once (coalesced in a full
//! join), then L's other columns, then R's.

pub mod agg;
pub mod bloom;
mod coll;
pub mod columns;
pub mod cost;
pub mod dist;
pub mod error;
pub mod gather;
pub mod inspect;
pub mod inspector;
pub mod io;
pub mod kernel;
pub mod placement;
pub mod report;
pub mod sketch;
pub mod table;

pub use cost::{Prediction, Strategy};
pub use dist::{join, JoinOptions, RankJoin};
pub use error::JoinError;
pub use inspect::{InspectMode, Inspection};
pub use kernel::{JoinKind, JoinShape};
pub use placement::Placement;
pub use table::{Column, DataType, Table};
