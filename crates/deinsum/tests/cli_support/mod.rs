//! Runs the `deinsum` binary for the CLI tests: exit status, stdout and stderr.

use std::process::Command;

/// `deinsum ARGS...`: (exit status, or -1 when killed; stdout; stderr).
pub fn deinsum(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deinsum"))
        .args(args)
        .output()
        .expect("the deinsum binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
