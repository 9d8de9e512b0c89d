//! Allocations refused by the operating system (under `ulimit -v`, as a cgroup or other
//! processes would refuse them) are errors naming the rank, the tensor and the bytes, never an
//! abort; sizes the user gives are checked before they are used.

mod cli_support;

use cli_support::deinsum;

/// `deinsum ARGS...` under an address-space limit of `mb` MiB, with one malloc arena and one
/// thread per rank (so that the limit leaves the same room on any machine): (exit status, or
/// -1 when killed by a signal; stderr).
#[cfg(target_os = "linux")]
fn deinsum_limited(mb: u64, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg((mb * 1024).to_string())
        .arg(env!("CARGO_BIN_EXE_deinsum"))
        .args(args)
        .args(["--threads", "1"])
        .env("MALLOC_ARENA_MAX", "1")
        .output()
        .expect("sh runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Bytes of MemAvailable, when /proc/meminfo says.
#[cfg(target_os = "linux")]
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Checks that a refused allocation was reported once, as an error (exit 1) naming a rank, a
/// tensor with its indices, a step and the bytes; returns the stage ("load", ...) and bytes.
#[cfg(target_os = "linux")]
fn assert_out_of_memory(code: i32, err: &str) -> (String, u64) {
    assert_eq!(code, 1, "exit status (134 is an abort, -1 a signal): {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("memory allocation of"), "{err}");
    assert_eq!(
        err.matches("cannot allocate").count(),
        1,
        "said once: {err}"
    );
    assert!(
        !err.contains("failed: rank"),
        "the rank is named once: {err}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("cannot allocate"))
        .expect("the message");
    // "error: rank 1: cannot allocate 61.0 MiB (64000000 bytes) for T1 (jk) at step 2 (load): out of memory"
    let rest = line.strip_prefix("error: rank ").expect("names the rank");
    let (rank, rest) = rest.split_once(": cannot allocate ").expect("format");
    assert!(rank.parse::<usize>().unwrap() < 2, "{line}");
    let (_, rest) = rest.split_once(" (").expect("bytes");
    let (bytes, rest) = rest.split_once(" bytes) for ").expect("bytes");
    let bytes: u64 = bytes.parse().expect("a byte count");
    assert!(bytes > 0 && bytes.is_multiple_of(8), "f64 elements: {line}");
    let (tensor, rest) = rest.split_once(" at step ").expect("the step");
    assert!(
        ["T0 (ij)", "T1 (jk)", "out (ik)"].contains(&tensor),
        "a tensor with its indices: {line}"
    );
    let (_, stage) = rest.split_once(" (").expect("the step's kind");
    let stage = stage
        .strip_suffix("): out of memory")
        .expect("the reason")
        .to_string();
    (stage, bytes)
}

#[cfg(target_os = "linux")]
#[test]
fn an_input_block_beyond_the_address_space_limit_is_an_error_at_its_load() {
    // Blocks of 8192 x 4096 f64 = 256 MiB each, under a 256 MiB limit: the first block fails.
    // The preflight check passes when the machine has the run's 3 GiB available.
    // Canonical inputs: the loads are the C-order row blocks.
    let args = [
        "run",
        "ij,jk->ik",
        "--size",
        "8192",
        "--procs",
        "2",
        "--inputs-canonical",
    ];
    let (code, err) = deinsum_limited(256, &args);
    if mem_available().is_some_and(|m| m < 4 << 30) {
        // A small machine refuses the run before allocating: that is the other guard.
        assert!(code == 2 || code == 1, "{err}");
        return;
    }
    let (stage, bytes) = assert_out_of_memory(code, &err);
    assert_eq!(stage, "load", "{err}");
    assert_eq!(bytes, 8192 * 4096 * 8, "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_window_or_output_beyond_the_limit_is_an_error_at_its_step() {
    // Blocks of 4000 x 2000 f64 (61 MiB): the inputs fit under these limits, the phases'
    // windows and the output block do not (where exactly depends on the limit).
    let args = ["run", "ij,jk->ik", "--size", "4000", "--procs", "2"];
    let mut later = Vec::new();
    for mb in [300, 400, 500, 600] {
        let (code, err) = deinsum_limited(mb, &args);
        if code == 0 {
            continue;
        }
        let (stage, _) = assert_out_of_memory(code, &err);
        if stage != "load" {
            later.push((mb, stage));
        }
    }
    assert!(!later.is_empty(), "no limit failed after the loads");
    assert!(
        later
            .iter()
            .all(|(_, s)| ["compute", "compute_phase", "redistribute"].contains(&s.as_str())),
        "{later:?}"
    );
}

#[test]
fn a_plan_for_ten_thousand_ranks_is_small_json() {
    // Once 2.9 GB of transfers (and an abort as JSON): now structured moves.
    let (code, out, err) = deinsum(&[
        "plan",
        "ij,jk->ik",
        "--size",
        "4096",
        "--procs",
        "10000",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.len() < 1 << 20, "{} bytes of JSON", out.len());
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["procs"], 10000, "{out}");
}
