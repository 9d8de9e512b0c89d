//! `deinsum plan/run --html FILE`: one self-contained page whose drawings match the plan (a
//! grid per group, a heat map per move, a timeline row per rank). `.ci/html.sh` loads the same
//! pages in headless Chromium; these tests hold the page text to the plan without a browser.

mod cli_support;
use cli_support::deinsum;

/// A fresh file path in the system's temporary directory.
fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("deinsum-html-{}-{name}", std::process::id()))
}

/// Groups and moves (redistributions, and every fetch of a phase) of a plan JSON.
fn groups_and_moves(plan: &serde_json::Value) -> (usize, usize) {
    let moves = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| match s["kind"].as_str().unwrap() {
            "redistribute" => 1,
            "compute_phase" => s["fetch"].as_array().unwrap().len(),
            _ => 0,
        })
        .sum();
    (plan["groups"].as_array().unwrap().len(), moves)
}

/// The page is one document with no script and nothing fetched.
fn assert_self_contained(page: &str) {
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.trim_end().ends_with("</html>"));
    for bad in [
        "<script", "<link", "<img", "<iframe", "src=", "href=", "http://", "https://",
    ] {
        assert!(!page.contains(bad), "page contains {bad}");
    }
    assert_eq!(page.matches("<svg").count(), page.matches("</svg>").count());
}

fn plan_page(args: &[&str]) -> (String, serde_json::Value) {
    // Files of their own per call: the tests run in parallel threads of one process.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let html = temp(&format!("plan{n}.html"));
    let json = temp(&format!("plan{n}.json"));
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--html",
        html.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    let (code, _, err) = deinsum(&all);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    let plan = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(html);
    let _ = std::fs::remove_file(json);
    (page, plan)
}

#[test]
fn plan_pages_draw_a_grid_per_group_and_a_heat_map_per_move() {
    for args in [
        &["ij,jk->ik", "--size", "16", "--procs", "1"][..],
        &["ijk,ja,ka,al->il", "--size", "24", "--procs", "8"],
        &[
            "ij,jk,kl->il",
            "--sizes",
            "i=37,j=23,k=41,l=19",
            "--procs",
            "7",
        ],
        // Phased under a budget: a heat map per fetch.
        &[
            "ij,jk->ik",
            "--size",
            "60",
            "--procs",
            "12",
            "--mem",
            "1500",
        ],
        // Heat maps summed over blocks of ranks.
        &["ijk,ja,ka,al->il", "--size", "40", "--procs", "300"],
    ] {
        let (page, plan) = plan_page(args);
        assert_self_contained(&page);
        let (groups, moves) = groups_and_moves(&plan);
        assert_eq!(
            page.matches(r#"<svg class="grid""#).count(),
            groups,
            "{args:?}"
        );
        assert_eq!(
            page.matches(r#"<svg class="heatmap""#).count(),
            moves,
            "{args:?}"
        );
        assert_eq!(page.matches(r#"<svg class="tree""#).count(), 1);
        // The expression is escaped, never raw markup.
        assert!(page.contains(&args[0].replace('>', "&gt;")), "{args:?}");
        // Words per rank, I/O against the bound, memory against the budget.
        // Every plan now carries predicted seconds (the built-in machine model): a fourth
        // chart, the predicted time per step.
        let timed = plan["prediction"]["step_seconds"]
            .as_array()
            .is_some_and(|v| !v.is_empty());
        assert!(timed, "{args:?}: the plan has predicted seconds");
        assert_eq!(page.matches(r#"<svg class="bars""#).count(), 4, "{args:?}");
        assert!(page.contains("SOAP per-rank bound"));
        if args.contains(&"--mem") {
            assert!(page.contains("budget S"));
            assert!(page.contains("phases along"));
        }
        // No run, no timeline; the predicted time per step is shown.
        assert!(!page.contains("timeline-row"));
        assert!(page.contains("Predicted time per step"), "{args:?}");
    }
}

#[test]
fn a_plan_for_a_million_ranks_states_its_sampling() {
    // Canonical inputs, so that the plan has moves to draw.
    let (page, plan) = plan_page(&[
        "ij,jk->ik",
        "--size",
        "4000",
        "--procs",
        "1000000",
        "--inputs-canonical",
    ]);
    assert_self_contained(&page);
    let (groups, moves) = groups_and_moves(&plan);
    assert_eq!(page.matches(r#"<svg class="grid""#).count(), groups);
    assert_eq!(page.matches(r#"<svg class="heatmap""#).count(), moves);
    assert!(
        page.contains("one receiving rank per block"),
        "heat maps say they sample"
    );
    assert!(
        page.contains("evenly spaced ranks of each block"),
        "charts say they sample"
    );
    // Bounded size: at most 48 × 48 cells per heat map, 48 bars per chart.
    assert!(page.len() < 2_000_000, "{} bytes", page.len());
}

#[test]
fn run_pages_have_a_timeline_row_per_rank_and_measured_beside_predicted() {
    for procs in ["1", "5", "8"] {
        let html = temp(&format!("run{procs}.html"));
        let (code, out, err) = deinsum(&[
            "run",
            "ijk,ja,ka,al->il",
            "--size",
            "12",
            "--procs",
            procs,
            "--repeat",
            "2",
            "--format",
            "json",
            "--html",
            html.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let page = std::fs::read_to_string(&html).unwrap();
        let _ = std::fs::remove_file(&html);
        assert_self_contained(&page);
        let p: usize = procs.parse().unwrap();
        assert_eq!(page.matches(r#"<g class="timeline-row""#).count(), p);
        for r in 0..p {
            assert!(page.contains(&format!(r#"data-rank="{r}""#)));
        }
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["volume_exact"], true);
        // One table row per step, every one as planned.
        let steps = report["steps"].as_array().unwrap().len();
        assert_eq!(page.matches("<td>yes</td>").count(), steps, "{procs} ranks");
        assert!(!page.contains("DIFFERS"));
        // Measured waiting is drawn, and only inside rows (P = 1 has no peer to wait for).
        let waits = page.matches(r#"<rect class="waiting""#).count();
        if p == 1 {
            assert_eq!(waits, 0);
        }
        assert!(page.contains("waiting (measured)"));
    }
}

#[test]
fn an_unwritable_html_path_is_a_clear_error() {
    let (code, _, err) = deinsum(&[
        "plan",
        "ij,jk->ik",
        "--procs",
        "2",
        "--html",
        "/nonexistent-dir/x.html",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot write /nonexistent-dir/x.html"),
        "{err}"
    );
}

#[test]
fn step_times_are_ordered_on_each_rank_from_the_common_start() {
    use deinsum::expr::ExtentSpec;
    use deinsum::{Einsum, ExecOptions, InProcess, Inputs, Options};
    let spec = ExtentSpec {
        default: Some(10),
        ..ExtentSpec::default()
    };
    let c = Einsum::compile("ijk,ja,ka,al->il", &spec, &Options::procs(6)).unwrap();
    let world = InProcess::new(6).unwrap();
    let opts = ExecOptions {
        repeat: 3,
        ..ExecOptions::default()
    };
    let reports = world
        .run(|comm| {
            c.run_measured::<f64, _>(comm, &Inputs::Seeded { seed: 1 }, &opts)
                .map(|(_, r)| r)
        })
        .unwrap();
    for rep in &reports {
        let mut at = 0.0;
        for m in &rep.steps {
            assert!(
                m.start >= at,
                "rank {} step {}: starts before the last ended",
                rep.rank,
                m.step
            );
            assert!(m.end >= m.start);
            // The step's own time lies within its span (both from the same clock).
            assert!((m.seconds - (m.end - m.start)).abs() < 1e-9, "{m:?}");
            // Waiting is part of the step's own time.
            assert!(m.blocked >= 0.0 && m.blocked <= m.seconds + 1e-6, "{m:?}");
            at = m.end;
        }
        assert!(at > 0.0 && at <= rep.seconds, "rank {}", rep.rank);
    }
    // Every member but the last to arrive parks in a collective: some rank waited.
    let waited: f64 = reports
        .iter()
        .flat_map(|r| &r.steps)
        .map(|m| m.blocked)
        .sum();
    assert!(waited > 0.0, "no rank was measured waiting");
}
