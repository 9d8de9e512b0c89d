//! `deinsum parse`.

use std::process::ExitCode;

/// Arguments of `deinsum parse`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il".
    pub expr: String,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
}

/// Runs the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(super::NotImplemented("parse").into())
}
