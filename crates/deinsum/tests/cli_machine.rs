//! `--machine`, `--objective` and `deinsum calibrate` from the command line.

mod cli_support;
use cli_support::deinsum;

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("deinsum-cli-machine-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn a_bad_machine_file_is_refused_naming_the_field() {
    let good = deinsum_plan::Machine::default().to_json();
    let bad = temp("bad.json");
    std::fs::write(&bad, good.replace("\"alpha\"", "\"latency\"")).unwrap();
    for cmd in ["plan", "run"] {
        let (code, _, err) = deinsum(&[
            cmd,
            "ij,jk->ik",
            "--size",
            "4",
            "--procs",
            "2",
            "--machine",
            bad.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(
            err.contains("alpha") && err.contains("missing"),
            "{cmd}: {err}"
        );
    }
    let (code, _, err) = deinsum(&[
        "plan",
        "ij,jk->ik",
        "--procs",
        "2",
        "--machine",
        "/nonexistent/m.json",
    ]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = deinsum(&["plan", "ij,jk->ik", "--procs", "2", "--objective", "speed"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("time, flops, volume"), "{err}");
}

#[test]
fn calibrate_writes_a_machine_file_that_plan_and_run_read() {
    let m = temp("m.json");
    let (code, _, err) = deinsum(&["calibrate", "--quick", "-o", m.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // One progress line per measurement.
    for what in [
        "ping-pong",
        "gemm large",
        "gemm medium",
        "gemm small",
        "stream copy",
        "collective",
    ] {
        assert!(err.contains(what), "no {what} line: {err}");
    }
    let text = std::fs::read_to_string(&m).unwrap();
    let machine = deinsum_plan::Machine::from_json(&text).unwrap();
    assert!(machine.name.contains("calibrate --quick"));
    // Two ranks per core share the cores: a share far from 1 is a broken measurement (with
    // quarter-millisecond windows --quick wrote 0.001 and 268). Wide bounds: tests run in
    // parallel on loaded machines.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        for class in deinsum_plan::machine::RateClass::ALL {
            let share = machine.oversubscribed_share(class);
            assert!((0.1..=10.0).contains(&share), "{class:?}: {share}");
        }
    }
    let (code, out, err) = deinsum(&[
        "plan",
        "ijk,ja,ka->ia",
        "--size",
        "8",
        "--procs",
        "3",
        "--machine",
        m.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("predicted time:") && out.contains("runner-up:"),
        "{out}"
    );
    let (code, out, err) = deinsum(&[
        "run",
        "ijk,ja,ka->ia",
        "--size",
        "8",
        "--procs",
        "3",
        "--machine",
        m.to_str().unwrap(),
        "--check",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("pred [ms]") && out.contains("against measured median"),
        "{out}"
    );
}

#[test]
fn plan_json_carries_seconds_per_step() {
    let (code, json, err) = deinsum(&[
        "plan",
        "ij,jk,kl->il",
        "--size",
        "6",
        "--procs",
        "4",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let steps = v["steps"].as_array().unwrap().len();
    let secs = v["prediction"]["step_seconds"].as_array().unwrap();
    assert_eq!(secs.len(), steps);
    let total: f64 = secs.iter().map(|x| x.as_f64().unwrap()).sum();
    assert!(total > 0.0);
    assert!((v["prediction"]["seconds"].as_f64().unwrap() - total).abs() <= 1e-12);
}
