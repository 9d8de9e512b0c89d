//! Subcommands of the `deinsum` binary, one module each, and what they share. They live in the
//! library so that other front ends (the Python binding) print exactly what the CLI prints.

pub mod bound;
pub mod calibrate;
pub mod html;
pub mod inputs;
pub mod join;
pub mod parse;
pub mod path;
pub mod plan;
pub mod plan_file;
pub mod run;
pub mod run_args;
pub mod sparse;
pub mod sparse_inputs;

use std::process::ExitCode;

/// An error the user caused (bad expression, extents, flags): exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// Prints an error and maps it to the exit status: 2 for input errors, 1 otherwise. Under an
/// MPI launcher every rank finds the same input error; only rank 0 prints it.
pub fn report(e: &anyhow::Error) -> ExitCode {
    let input = e.chain().any(|c| {
        c.downcast_ref::<InputError>().is_some()
            || c.downcast_ref::<deinsum_expr::ExprError>().is_some()
    });
    if !input || launch_rank().unwrap_or(0) == 0 {
        eprintln!("error: {}", chain_text(e));
    } else {
        // The launcher ends the job at the first non-zero exit: let rank 0's message out first.
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    if input {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// Output format of a subcommand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable text.
    #[default]
    Text,
    /// JSON on standard output.
    Json,
}

/// The extent every index gets when none of --sizes, --size, --shapes is given (the
/// Deinsum paper's example size), so that `deinsum plan "ijk,ja,ka,al->il" --procs 8` works.
pub const DEFAULT_SIZE: usize = 10;

/// The extent flags every subcommand takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ExtentArgs {
    /// Extents by index, such as `i=64,j=32`.
    #[arg(long, value_name = "I=N,...")]
    pub sizes: Option<String>,
    /// Extent of every index not named by --sizes [default: 10 when no extent flag is given].
    #[arg(long, value_name = "N")]
    pub size: Option<String>,
    /// Per-operand shapes, such as `64x32,32x16` (the only way to give `...` dimensions).
    #[arg(long, value_name = "AxB,...")]
    pub shapes: Option<String>,
}

/// Parses `expr` with the extent flags of `a`. With no extent flag at all every index gets
/// [`DEFAULT_SIZE`]. Errors are [`deinsum_expr::ExprError`]s, which [`report`] maps to exit 2.
pub fn einsum_from_args(expr: &str, a: &ExtentArgs) -> anyhow::Result<deinsum_expr::ParsedEinsum> {
    let mut spec = deinsum_expr::ExtentSpec::from_flags(
        a.sizes.as_deref(),
        a.size.as_deref(),
        a.shapes.as_deref(),
    )?;
    if a.sizes.is_none() && a.size.is_none() && a.shapes.is_none() {
        spec.default = Some(DEFAULT_SIZE);
    }
    Ok(deinsum_expr::parse(expr, &spec)?)
}

/// This process's rank when an MPI launcher started it (from the launcher's environment:
/// Open MPI's `OMPI_COMM_WORLD_RANK`, PMI's `PMI_RANK`, PMIx's `PMIX_RANK`), else `None`.
pub fn launch_rank() -> Option<usize> {
    launcher_count(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"])
}

/// How many ranks the launcher started on this node, from its environment (Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's `MPI_LOCALNRANKS`), else `None`.
pub fn launch_local_size() -> Option<usize> {
    launcher_count(&["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]).filter(|&n| n > 0)
}

/// The first of the launcher's environment variables `names` that holds a number.
fn launcher_count(names: &[&str]) -> Option<usize> {
    names
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// The cores of this node (the online CPUs, else the cores this process may use).
pub use deinsum_runtime::node_cores;

/// The world size when an MPI launcher started this process (`OMPI_COMM_WORLD_SIZE`,
/// `PMI_SIZE`), else `None`.
pub fn launch_size() -> Option<usize> {
    launcher_count(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])
}

/// An error and its causes on one line, each said once: a cause whose text is already in the
/// line (errors that print their source) is left out.
pub fn chain_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for c in e.chain() {
        let t = c.to_string();
        if out.contains(&t) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&t);
    }
    out
}
