//! `deinsum bound`: the fusion partition and the SOAP I/O lower bound of every group.

use deinsum_path::{optimize as optimize_path, PathError, PathOptions};
use deinsum_soap::{
    analyze_with, io_optimal, parallel_bound, Fusion, IoPathError, Partition, SearchMode,
};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Arguments of `deinsum bound`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il".
    pub expr: String,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Fast memory per rank, in words (required, > 0).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub mem: Option<String>,
    /// Number of ranks: adds the per-rank memory-independent and memory-dependent bounds.
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub procs: Option<String>,
    /// Path search strategy (as `deinsum path --optimize`).
    #[arg(long = "optimize", value_name = "NAME", default_value = "auto")]
    pub optimize: String,
    /// What the path search minimises: `flops` (opt_einsum's count) or `io` (per-step SOAP
    /// bound for --mem).
    #[arg(long = "path-cost", value_name = "MODEL", default_value = "flops")]
    pub path_cost: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
}

/// Parses `--mem`: a positive finite number of words.
fn parse_mem(s: Option<&str>) -> Result<f64, super::InputError> {
    let s = s.ok_or_else(|| {
        super::InputError("--mem S is required: the fast memory per rank, in words".into())
    })?;
    match s.trim().replace('_', "").parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(super::InputError(format!(
            "--mem must be a positive number of words, got `{s}`"
        ))),
        Err(_) => Err(super::InputError(format!(
            "--mem expects a number of words, got `{s}`"
        ))),
    }
}

/// Parses `--procs`: a whole number >= 1.
fn parse_procs(s: &str) -> Result<usize, super::InputError> {
    match s.trim().replace('_', "").parse::<usize>() {
        Ok(0) => Err(super::InputError(format!(
            "--procs must be at least 1, got `{s}`"
        ))),
        Ok(p) => Ok(p),
        Err(_) => Err(super::InputError(format!(
            "--procs expects a whole number of ranks, got `{s}`"
        ))),
    }
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mem = parse_mem(args.mem.as_deref())?;
    let procs = args.procs.as_deref().map(parse_procs).transpose()?;
    let einsum = super::einsum_from_args(&args.expr, &args.extents)?;
    let (text, json) = bound_report(&einsum, mem, procs, &args.optimize, &args.path_cost)?;
    let out = match args.format {
        super::Format::Text => text,
        super::Format::Json => serde_json::to_string_pretty(&json)? + "\n",
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The bound report of `einsum` for fast memory `mem` (and `procs` ranks): its text and its
/// JSON, as `deinsum bound` prints them. Errors the caller caused are [`super::InputError`]s.
pub fn bound_report(
    einsum: &deinsum_expr::ParsedEinsum,
    mem: f64,
    procs: Option<usize>,
    optimize: &str,
    path_cost: &str,
) -> anyhow::Result<(String, Value)> {
    let opts = PathOptions {
        strategy: optimize.to_string(),
        ..PathOptions::default()
    };
    let user = |e: PathError| match e {
        PathError::InvalidPath(_) => anyhow::Error::new(e),
        other => anyhow::Error::new(super::InputError(other.to_string())),
    };
    let tree = match path_cost {
        "flops" => optimize_path(einsum, &opts).map_err(user)?.tree,
        // The tree of least I/O after fusion (never more than the flops tree's).
        "io" => match io_optimal(einsum, &opts, mem) {
            Ok((info, _)) => info.tree,
            Err(IoPathError::Path(e)) => return Err(user(e)),
            Err(e) => return Err(super::InputError(e.to_string()).into()),
        },
        other => {
            return Err(super::InputError(format!(
                "--path-cost must be `flops` or `io`, got `{other}`"
            ))
            .into())
        }
    };
    let (fusion, runner) =
        analyze_with(&tree, mem, SearchMode::Auto).map_err(|e| super::InputError(e.to_string()))?;
    let ins: Vec<String> = einsum
        .inputs()
        .iter()
        .map(|o| o.indices.iter().collect())
        .collect();
    let expr = format!(
        "{}->{}",
        ins.join(","),
        einsum.output().iter().collect::<String>()
    );
    let report = Report {
        expr: &expr,
        mem,
        procs,
        fusion: &fusion,
        runner: runner.as_ref(),
    };
    Ok((report.text(), report.json()))
}

/// What `deinsum bound` prints.
struct Report<'a> {
    expr: &'a str,
    mem: f64,
    procs: Option<usize>,
    fusion: &'a Fusion,
    runner: Option<&'a Partition>,
}

/// Sum of the groups' bounds, without the intermediates that cross between groups.
fn q_groups(f: &Fusion) -> f64 {
    f.groups.iter().map(|g| g.bound.q).sum()
}

/// A float for people: integers up to 1e15 exactly, the rest in scientific notation.
fn num(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else if x.is_finite() && x.abs() >= 0.01 && x.abs() < 1e6 {
        format!("{x:.4}")
    } else {
        format!("{x:.4e}")
    }
}

impl Report<'_> {
    fn text(&self) -> String {
        let f = self.fusion;
        let mut s = String::new();
        let _ = writeln!(s, "einsum: {}", self.expr);
        let _ = writeln!(s, "fast memory S = {} words", num(self.mem));
        let parts: Vec<String> = f.groups.iter().map(|g| format!("{:?}", g.steps)).collect();
        let _ = writeln!(
            s,
            "partition: {} group(s) of tree steps {}",
            f.groups.len(),
            parts.join(" ")
        );
        let (mut mi, mut md, mut bind) = (0.0, 0.0, 0.0);
        for (k, g) in f.groups.iter().enumerate() {
            let b = &g.bound;
            let _ = writeln!(
                s,
                "group {k}: {}   (steps {:?})",
                g.einsum_string(),
                g.steps
            );
            let tile: Vec<String> = b
                .tile
                .iter()
                .map(|(c, t)| format!("{c}={}", num(*t)))
                .collect();
            let _ = writeln!(
                s,
                "  |V| = {}  rho = {}  X0 = {}  Q = {}",
                num(g.volume),
                num(b.rho),
                num(b.x0),
                num(b.q)
            );
            let _ = writeln!(s, "  tile: {}", tile.join(" "));
            if let Some(p) = self.procs {
                let pb = parallel_bound(g, p, self.mem);
                mi += pb.memory_independent;
                md += pb.memory_dependent;
                bind += pb.binding();
                let _ = writeln!(
                    s,
                    "  per rank (P = {p}): memory-independent {}  memory-dependent {}  binds: {}",
                    num(pb.memory_independent),
                    num(pb.memory_dependent),
                    pb.binds().replace('_', "-")
                );
            }
        }
        let qg = q_groups(f);
        let _ = writeln!(
            s,
            "total Q = {} (groups {} + intermediates crossing groups {})",
            num(f.q_total),
            num(qg),
            num(f.q_total - qg)
        );
        match self.runner {
            Some(r) => {
                let parts: Vec<String> = r.groups.iter().map(|g| format!("{g:?}")).collect();
                let _ = writeln!(
                    s,
                    "runner-up partition {}: Q = {} ({:.3}x)",
                    parts.join(" "),
                    num(r.q_total),
                    r.q_total / f.q_total
                );
            }
            None => {
                let _ = writeln!(s, "runner-up: none (no other legal partition)");
            }
        }
        if let Some(p) = self.procs {
            let _ = writeln!(
                s,
                "per rank (P = {p}): memory-independent {}  memory-dependent {}  binding {}",
                num(mi),
                num(md),
                num(bind)
            );
        }
        s
    }

    fn json(&self) -> Value {
        let f = self.fusion;
        let (mut mi, mut md, mut bind) = (0.0, 0.0, 0.0);
        let groups: Vec<Value> = f
            .groups
            .iter()
            .map(|g| {
                let tile: serde_json::Map<String, Value> = g
                    .bound
                    .tile
                    .iter()
                    .map(|(c, t)| (c.to_string(), json!(t)))
                    .collect();
                let mut v = json!({
                    "steps": g.steps,
                    "einsum": g.einsum_string(),
                    "indices": g.indices.iter().collect::<String>(),
                    "volume": g.volume,
                    "rho": g.bound.rho,
                    "x0": g.bound.x0,
                    "tile": tile,
                    "q": g.bound.q,
                });
                if let Some(p) = self.procs {
                    let pb = parallel_bound(g, p, self.mem);
                    mi += pb.memory_independent;
                    md += pb.memory_dependent;
                    bind += pb.binding();
                    v["per_rank"] = json!({
                        "memory_independent": pb.memory_independent,
                        "memory_dependent": pb.memory_dependent,
                        "binds": pb.binds(),
                    });
                }
                v
            })
            .collect();
        let qg = q_groups(f);
        let mut out = json!({
            "einsum": self.expr,
            "mem": self.mem,
            "groups": groups,
            "q_groups": qg,
            "q_crossing": f.q_total - qg,
            "q_total": f.q_total,
            "runner_up": self.runner.map(|r| json!({"groups": r.groups, "q_total": r.q_total})),
        });
        if let Some(p) = self.procs {
            out["procs"] = json!(p);
            out["per_rank"] = json!({
                "memory_independent": mi,
                "memory_dependent": md,
                "binding": bind,
            });
        }
        out
    }
}
