//! Plans one einsum as `deinsum plan EXPR --sizes SIZES --procs P --format json` does (same
//! options, same JSON) and prints the JSON: for timing the planner without the CLI's crates.
//! Usage: plan_json EXPR SIZES P

use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::choose::choose_within_budget;
use deinsum_plan::PlanOptions;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let [_, expr, sizes, procs] = &a[..] else {
        eprintln!("usage: plan_json EXPR SIZES P");
        std::process::exit(2);
    };
    let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
    let einsum = parse(expr, &spec).expect("einsum");
    let opts = PlanOptions {
        procs: procs.parse().expect("P"),
        path: deinsum_path::PathOptions::with_strategy("auto"),
        inputs_in_place: true,
        ..PlanOptions::default()
    };
    let choice = choose_within_budget(&einsum, &opts).expect("plan");
    println!(
        "{}",
        serde_json::to_string_pretty(&choice.plan).expect("json")
    );
}
