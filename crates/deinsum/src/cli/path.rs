//! `deinsum path`: find a contraction path and print it like opt_einsum's `PathInfo`.

use deinsum_path::{optimize, Count, PathError, PathInfo, PathOptions};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

/// Arguments of `deinsum path`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il".
    pub expr: String,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Search strategy (one of `deinsum_path::STRATEGIES`; the help lists them).
    #[arg(long = "optimize", value_name = "NAME", default_value = "auto", help = strategy_help())]
    pub optimize: String,
    /// Largest allowed intermediate (and output), in elements.
    #[arg(long = "memory-limit", value_name = "N")]
    pub memory_limit: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
}

/// The `--optimize` help, from the path crate's one table of names.
fn strategy_help() -> String {
    format!("Search strategy: {}", deinsum_path::strategy_list())
}

/// Parses `--memory-limit`: a positive whole number of elements.
fn parse_limit(s: &str) -> Result<u128, super::InputError> {
    let t = s.trim().replace('_', "");
    match t.parse::<u128>() {
        Ok(0) => Err(super::InputError(format!(
            "--memory-limit must be at least 1 element, got `{s}`"
        ))),
        Ok(v) => Ok(v),
        Err(_) => Err(super::InputError(format!(
            "--memory-limit expects a whole number of elements, got `{s}`"
        ))),
    }
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let einsum = super::einsum_from_args(&args.expr, &args.extents)?;
    let memory_limit = args.memory_limit.as_deref().map(parse_limit).transpose()?;
    let opts = PathOptions {
        strategy: args.optimize.clone(),
        memory_limit,
        ..PathOptions::default()
    };
    let info = optimize(&einsum, &opts).map_err(|e| match e {
        // Every search failure traces back to the request (strategy, limit, size of einsum).
        PathError::InvalidPath(_) => anyhow::Error::new(e),
        other => anyhow::Error::new(super::InputError(other.to_string())),
    })?;
    let expr = canonical(&einsum);
    let out = match args.format {
        super::Format::Text => render_text(&expr, einsum.extents(), &info, memory_limit),
        super::Format::Json => render_json(&expr, einsum.extents(), &info, memory_limit)?,
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The einsum as `ab,bc->ac` over distinct operand indices.
pub fn canonical(e: &deinsum_expr::ParsedEinsum) -> String {
    let ins: Vec<String> = e
        .inputs()
        .iter()
        .map(|o| o.indices.iter().collect())
        .collect();
    format!(
        "{}->{}",
        ins.join(","),
        e.output().iter().collect::<String>()
    )
}

/// A count for people: exact integers as integers, approximations in scientific notation.
fn human(c: &Count) -> String {
    match c {
        Count::Exact(v) if *v < 10u128.pow(15) => v.to_string(),
        other => format!("{:.3e}", other.as_f64()),
    }
}

/// The opt_einsum-style report.
pub fn render_text(
    expr: &str,
    extents: &BTreeMap<char, usize>,
    info: &PathInfo,
    limit: Option<u128>,
) -> String {
    let mut s = String::new();
    let ext: Vec<String> = extents.iter().map(|(c, n)| format!("{c}={n}")).collect();
    let scaling = |einsum: &str| {
        let mut v: Vec<char> = einsum
            .chars()
            .filter(|c| deinsum_expr::is_index(*c))
            .collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    let naive_scaling = extents.len();
    let opt_scaling = info
        .steps
        .iter()
        .map(|st| scaling(&st.einsum))
        .max()
        .unwrap_or(0);
    let _ = writeln!(s, "  Complete contraction:  {expr}");
    let _ = writeln!(s, "               Extents:  {}", ext.join(" "));
    let _ = writeln!(
        s,
        "              Strategy:  {} (minimising {})",
        info.strategy, info.cost_model
    );
    let _ = writeln!(s, "         Naive scaling:  {naive_scaling}");
    let _ = writeln!(s, "     Optimized scaling:  {opt_scaling}");
    let _ = writeln!(s, "      Naive FLOP count:  {}", human(&info.naive_flops));
    let _ = writeln!(s, "  Optimized FLOP count:  {}", human(&info.flops));
    let _ = writeln!(s, "   Theoretical speedup:  {:.3}", info.speedup());
    let _ = writeln!(
        s,
        "  Largest intermediate:  {} elements",
        human(&info.largest_intermediate)
    );
    let _ = writeln!(
        s,
        "          Memory limit:  {}",
        limit
            .map(|l| format!("{l} elements"))
            .unwrap_or_else(|| "none".into())
    );
    if limit.is_some() && info.tree.has_multi_operand_step() {
        // opt_einsum's answer when no pairwise path fits: everything in one step.
        let _ = writeln!(
            s,
            "                  Note:  no pairwise path fits the memory limit; one step over \
             all operands, as opt_einsum"
        );
    }
    let width = info
        .steps
        .iter()
        .map(|st| st.einsum.len())
        .max()
        .unwrap_or(6)
        .max(6);
    // Python's tuple spelling, as opt_einsum prints paths: `(0,)` for one operand.
    let tuples: Vec<String> = info
        .path
        .iter()
        .map(|p| {
            let pos: Vec<String> = p.iter().map(|x| x.to_string()).collect();
            match pos.as_slice() {
                [one] => format!("({one},)"),
                _ => format!("({})", pos.join(", ")),
            }
        })
        .collect();
    let pw = tuples.iter().map(|t| t.len()).max().unwrap_or(0).max(10);
    let _ = writeln!(s, "{}", "-".repeat(width + pw + 38));
    let _ = writeln!(
        s,
        "{:>4}  {:<pw$}  {:<width$}  {:>14}  {:>14}",
        "step", "path", "einsum", "flops", "intermediate"
    );
    let _ = writeln!(s, "{}", "-".repeat(width + pw + 38));
    for (k, (st, tuple)) in info.steps.iter().zip(&tuples).enumerate() {
        let _ = writeln!(
            s,
            "{:>4}  {:<pw$}  {:<width$}  {:>14}  {:>14}",
            k,
            tuple,
            st.einsum,
            human(&st.flops),
            human(&st.size)
        );
    }
    s
}

/// The JSON report: `path` in opt_einsum's linear format, totals, and every step.
pub fn render_json(
    expr: &str,
    extents: &BTreeMap<char, usize>,
    info: &PathInfo,
    limit: Option<u128>,
) -> anyhow::Result<String> {
    #[derive(serde::Serialize)]
    struct Report<'a> {
        expr: &'a str,
        extents: &'a BTreeMap<char, usize>,
        strategy: &'a str,
        cost_model: &'a str,
        memory_limit: Option<u128>,
        path: &'a [Vec<usize>],
        flops: Count,
        multiply_adds: Count,
        largest_intermediate: Count,
        naive_flops: Count,
        speedup: f64,
        cost: f64,
        steps: Vec<StepJson<'a>>,
    }
    // The JSON form of a step lives here, at the boundary: the path crate carries no serde.
    #[derive(serde::Serialize)]
    struct StepJson<'a> {
        einsum: &'a str,
        flops: Count,
        multiply_adds: Count,
        size: Count,
        cost: f64,
    }
    let r = Report {
        expr,
        extents,
        strategy: &info.strategy,
        cost_model: &info.cost_model,
        memory_limit: limit,
        path: &info.path,
        flops: info.flops,
        multiply_adds: info.multiply_adds,
        largest_intermediate: info.largest_intermediate,
        naive_flops: info.naive_flops,
        speedup: info.speedup(),
        cost: info.cost,
        steps: info
            .steps
            .iter()
            .map(|s| StepJson {
                einsum: &s.einsum,
                flops: s.flops,
                multiply_adds: s.multiply_adds,
                size: s.size,
                cost: s.cost,
            })
            .collect(),
    };
    Ok(serde_json::to_string_pretty(&r)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> (deinsum_expr::ParsedEinsum, PathInfo) {
        let spec = deinsum_expr::ExtentSpec {
            default: Some(10),
            ..Default::default()
        };
        let e = deinsum_expr::parse("ijk,ja,ka,al->il", &spec).unwrap();
        let i = optimize(&e, &PathOptions::with_strategy("optimal")).unwrap();
        (e, i)
    }

    #[test]
    fn text_report_lists_every_step_and_totals() {
        let (e, i) = info();
        let t = render_text(&canonical(&e), e.extents(), &i, None);
        assert!(t.contains("Optimized FLOP count:  23000"), "{t}");
        assert!(t.contains("Naive FLOP count:  400000"), "{t}");
        assert!(t.contains("Theoretical speedup:  17.391"), "{t}");
        for step in ["ja,ka->jka", "ijk,jka->ia", "ia,al->il"] {
            assert!(t.contains(step), "{t}");
        }
    }

    #[test]
    fn json_report_has_the_contract_fields() {
        let (e, i) = info();
        let j = render_json(&canonical(&e), e.extents(), &i, Some(5000)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["path"], serde_json::json!([[1, 2], [0, 2], [1, 0]]));
        assert_eq!(v["flops"], 23000);
        assert_eq!(v["largest_intermediate"], 1000);
        assert_eq!(v["naive_flops"], 400000);
        assert_eq!(v["memory_limit"], 5000);
        assert_eq!(v["steps"][0]["einsum"], "ja,ka->jka");
        assert_eq!(v["steps"][1]["flops"], 20000);
    }

    #[test]
    fn memory_limit_flag_is_validated() {
        assert_eq!(parse_limit("1_000").unwrap(), 1000);
        assert!(parse_limit("0").unwrap_err().0.contains("at least 1"));
        assert!(parse_limit("ten").unwrap_err().0.contains("whole number"));
    }
}
