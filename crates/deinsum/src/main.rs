//! The `deinsum` command line: parse, path, bound, plan and run an einsum.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use deinsum::cli;

/// The binary's allocator (see Cargo.toml).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Compile an einsum into a distributed, communication-optimal plan, and run it.
#[derive(Parser, Debug)]
#[command(name = "deinsum", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse and validate an einsum; print its canonical form and its indices.
    Parse(cli::parse::Args),
    /// Find a contraction path (opt_einsum's strategies, exact where they are not).
    Path(cli::path::Args),
    /// SOAP I/O lower bounds and the fusion partition.
    Bound(cli::bound::Args),
    /// Build the distributed plan for P ranks.
    Plan(cli::plan::Args),
    /// Run the plan and report measured against predicted volumes.
    Run(cli::run::Args),
    /// Measure this machine and write the machine file plans predict seconds with.
    Calibrate(cli::calibrate::Args),
    /// Join two tables (CSV or Parquet) on P ranks, the strategy chosen by predicted cost.
    Join(cli::join::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version with exit 0 and usage errors with exit 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Parse(a) => cli::parse::run(a),
        Command::Path(a) => cli::path::run(a),
        Command::Bound(a) => cli::bound::run(a),
        Command::Plan(a) => cli::plan::run(a),
        Command::Run(a) => cli::run::run(a),
        Command::Calibrate(a) => cli::calibrate::run(a),
        Command::Join(a) => {
            keep_freed_memory();
            cli::join::run(a)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => cli::report(&e),
    }
}

/// mimalloc.h's (v2) `mi_option_purge_delay`: milliseconds before freed memory goes back to the
/// OS (-1: never).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the memory a join frees mapped for the rest of the process, so that the next phase's
/// buffers (the exchange after the reading, the output after the exchange, the next run of
/// `--repeat`) reuse it instead of faulting in fresh zeroed pages; a join process is short and
/// its peak is what it keeps. Left as it is when the user set `MIMALLOC_PURGE_DELAY`.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: FFI call with plain integers; mimalloc allows setting options at any time.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
    }
}
