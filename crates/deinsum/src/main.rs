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
        Command::Join(a) => cli::join::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => cli::report(&e),
    }
}
