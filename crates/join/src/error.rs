//! The join crate's errors: every one names the file, column or line it is about.

use deinsum_exec::CommError;

/// A join that cannot be read, matched or run.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A key (or aggregate) column the table does not have.
    #[error("{file}: no column `{column}` (it has: {available})")]
    MissingColumn {
        /// The table's file (or name).
        file: String,
        /// The column asked for.
        column: String,
        /// The columns it has, comma-separated.
        available: String,
    },
    /// A key column whose type differs between the two tables.
    #[error("key `{column}` is {left} in {left_file} but {right} in {right_file}")]
    KeyTypes {
        /// The key column.
        column: String,
        /// Its type on the left.
        left: String,
        /// The left table's file.
        left_file: String,
        /// Its type on the right.
        right: String,
        /// The right table's file.
        right_file: String,
    },
    /// A CSV line that cannot be read (wrong field count, a value not of its column's type).
    #[error("{file}:{line}: {message}")]
    Csv {
        /// The file.
        file: String,
        /// The 1-based line number in the file (the header is line 1).
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A file read as Parquet that is not one.
    #[error("{file}: not a Parquet file ({message})")]
    NotParquet {
        /// The file.
        file: String,
        /// The Parquet reader's reason.
        message: String,
    },
    /// A column whose type joins do not take.
    #[error(
        "{file}: column `{column}` has type {ty} (joins take int64, float64, string and bool)"
    )]
    Unsupported {
        /// The file.
        file: String,
        /// The column.
        column: String,
        /// Its type as the file says it.
        ty: String,
    },
    /// A file that cannot be opened, read or written.
    #[error("{file}: {message}")]
    Io {
        /// The file.
        file: String,
        /// The system's reason.
        message: String,
    },
    /// A `--schema` that cannot be read.
    #[error(
        "bad schema `{0}`: expected NAME:TYPE,... with TYPE one of int64, float64, string, bool"
    )]
    Schema(String),
    /// The join's output exceeds the memory limit; refused before any row moves.
    #[error(
        "the join's output would be {rows} rows ({bytes} bytes), over the limit of {limit} bytes"
    )]
    TooLarge {
        /// Output rows.
        rows: u64,
        /// Output bytes (encoded as the join moves rows).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Arguments that do not fit (an unknown strategy, kind, placement).
    #[error("{0}")]
    Invalid(String),
    /// Another rank failed on its part of the input: its error, as it said it.
    #[error("{message}")]
    PeerInput {
        /// The rank that failed.
        rank: usize,
        /// Its error.
        message: String,
    },
    /// A communication failure.
    #[error(transparent)]
    Comm(#[from] CommError),
}

impl JoinError {
    /// Whether the user's input caused it (the CLI's exit status 2).
    pub fn is_input(&self) -> bool {
        !matches!(self, JoinError::Comm(_))
    }
}
