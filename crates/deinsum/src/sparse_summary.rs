//! The report of a sparse run as `deinsum run` prints it (text or JSON): the partition's
//! imbalance, predicted words per rank against measured and against replication, the costs
//! counted from the nonzeros, the time, and the check.

use deinsum_sparse::dist;
use deinsum_sparse::einsum::{Check, Form, Planned, SparseJob, SparseReport};
use deinsum_sparse::SparseTensor;
use serde_json::{json, Value};
use std::fmt;

/// What a sparse run's report says, with what it was run as.
pub struct SparseSummary<'a, T> {
    /// The einsum as given.
    pub expr: &'a str,
    /// Where the ranks ran (`in-process` or `MPI`).
    pub backend: &'a str,
    /// The element type's name when it is not f64 (said in the report).
    pub dtype: Option<&'a str>,
    /// The job.
    pub job: &'a SparseJob<T>,
    /// Its plan.
    pub plan: &'a Planned,
    /// The run's report.
    pub report: &'a SparseReport<T>,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
    /// The check, with its tolerance, when asked for.
    pub check: Option<(Check, f64)>,
}

/// The MTTKRP plan's grid and the grids it was chosen from.
fn grid_json(plan: &Planned) -> Option<Value> {
    let Planned::Mttkrp(p) = plan else {
        return None;
    };
    Some(json!({
        "parts_per_mode": p.grid,
        "splits": p.splits,
        "reduction_words": (0..p.procs).map(|r| p.reduction_words(r)).sum::<u64>(),
        "chosen_by": format!("among the grids with nonzero imbalance within {}x the least, the fewest words (factor halos and reduction) received and sent by the busiest rank (within {}% a tie), then the fewest received in all, then the 1D cut", dist::IMBALANCE_SLACK, 100.0 * dist::MAX_WORDS_TIE),
        "max_words": p.max_words(),
        "considered": p.considered.iter().map(|g| json!({
            "slabs": g.slabs, "splits": g.splits, "words": g.words,
            "max_words": g.max_words, "imbalance": g.imbalance,
        })).collect::<Vec<_>>(),
    }))
}

/// A sparse operand's shape, nonzeros and density.
fn density<T: deinsum_exec::Scalar>(t: &SparseTensor<T>) -> f64 {
    let size: f64 = t.shape().iter().map(|&n| n as f64).product();
    t.nnz() as f64 / size
}

impl<T: deinsum_exec::Scalar> SparseSummary<'_, T> {
    /// Whether every rank moved the planned words and the check (if any) passed.
    pub fn ok(&self) -> bool {
        self.report.exact() && self.check.is_none_or(|(c, tol)| c.max_rel <= tol)
    }

    /// Real flops in all, on the busiest rank, and the dense einsum's: a term of `n` operands
    /// is `n - 1` products and a sum, a complex product 6 real flops and a complex sum 2.
    fn flops(&self) -> (u64, u64, f64) {
        let n_ops = self.job.einsum().num_inputs() as u64;
        let per_term = if T::DTYPE.is_complex() {
            6 * n_ops.saturating_sub(1) + 2
        } else {
            n_ops
        };
        let r = self.report;
        (
            r.terms.iter().sum::<u64>() * per_term,
            r.terms.iter().copied().max().unwrap_or(0) * per_term,
            r.dense_terms * per_term as f64,
        )
    }

    /// (max per rank, total) of received words predicted; (max, total) of replication.
    fn volumes(&self) -> (u64, u64, u64, u64) {
        let r = self.report;
        let w = |b: u64| r.words(b);
        let pred_max = r.predicted.iter().map(|p| w(p.0)).max().unwrap_or(0);
        let pred_total = r.predicted.iter().map(|p| w(p.0)).sum();
        let repl_max = r.replication.iter().map(|&b| w(b)).max().unwrap_or(0);
        let repl_total = r.replication.iter().map(|&b| w(b)).sum();
        (pred_max, pred_total, repl_max, repl_total)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        let (job, plan, r) = (self.job, self.plan, self.report);
        let p = plan.plan();
        let w = |b: u64| r.words(b);
        let (pred_max, pred_total, repl_max, repl_total) = self.volumes();
        let (flops_total, flops_max, dense_flops) = self.flops();
        let operands: Vec<Value> = job
            .sparse()
            .iter()
            .map(|t| json!({"shape": t.shape(), "nnz": t.nnz(), "density": density(t)}))
            .collect();
        let scheme = plan.choice().map(|c| {
            let side = |(total, max, imb): (u64, u64, f64)| {
                json!({"total": total, "max_per_rank": max, "imbalance": imb})
            };
            json!({"in_use": if plan.fine_grain() { "fine" } else { "rows" }, "chosen_by": c.by,
                   "rows": side(c.rows), "fine": side(c.fine),
                   "replication_total": repl_total})
        });
        let mut v = json!({
            "expression": self.expr, "kernel": job.form().name(), "procs": p.procs(),
            "backend": self.backend, "sparse_operands": job.form().sparse_operands(),
            "operands": operands,
            "shape": job.sparse()[0].shape(), "nnz": job.sparse()[0].nnz(),
            "output_nnz": r.output_nnz(),
            "partition": plan.partition(),
            "imbalance": p.imbalance(), "work_imbalance": p.work_imbalance(),
            "grid": grid_json(plan),
            "nnz_per_rank": p.nnz(),
            "scheme": scheme,
            "predicted": {"max_per_rank": pred_max, "total": pred_total,
                          "received": r.predicted.iter().map(|p| w(p.0)).collect::<Vec<_>>()},
            "replication": {"max_per_rank": repl_max, "total": repl_total},
            "measured": {"total": r.measured.iter().map(|m| w(m.0)).sum::<u64>(), "exact": r.exact(),
                         "received": r.measured.iter().map(|m| w(m.0)).collect::<Vec<_>>()},
            "cost": {"terms_per_rank": r.terms, "flops_total": flops_total,
                     "flops_max_per_rank": flops_max, "dense_flops": dense_flops},
            "seconds": r.median_seconds(),
            "check": self.check.map(|(c, _)| json!({"max_abs_error": c.max_abs, "max_rel_error": c.max_rel, "reference": c.reference.describe()})),
        });
        // Said only when not the defaults, so that a default run's report is unchanged.
        if let Some(d) = self.dtype {
            v["dtype"] = json!(d);
        }
        if self.warmup > 0 {
            v["warmup"] = json!(self.warmup);
        }
        v
    }

    fn header(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let job = self.job;
        let ops: Vec<String> = job
            .sparse()
            .iter()
            .zip(job.form().sparse_operands())
            .map(|(t, k)| {
                let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
                format!(
                    "operand {k} is {} sparse ({} nonzeros, density {:.2e})",
                    dims.join(" x "),
                    t.nnz(),
                    density(t)
                )
            })
            .collect();
        let dense_desc = match job.form() {
            Form::Spmm { j, rest, .. } => format!(", B is {} x {}", job.ext(*j), job.width(rest)),
            _ => String::new(),
        };
        let dtype = self.dtype.map_or(String::new(), |d| format!(", {d}"));
        writeln!(
            f,
            "sparse {} ({}): {}{dense_desc}, P = {} ({}{dtype})",
            self.expr,
            job.form().name(),
            ops.join(", "),
            self.plan.plan().procs(),
            self.backend
        )
    }

    fn scheme_line(&self, f: &mut fmt::Formatter<'_>, repl_total: u64) -> fmt::Result {
        let Some(c) = self.plan.choice() else {
            return Ok(());
        };
        let pct = |w: u64| {
            if repl_total > 0 {
                100.0 * w as f64 / repl_total as f64
            } else {
                0.0
            }
        };
        writeln!(
            f,
            "scheme: {} ({}); the row cut moves {} words in all ({:.1}% of replicating B, max {} per rank, imbalance {:.3}), the fine-grain {} ({:.1}%, max {} per rank, imbalance {:.3})",
            if self.plan.fine_grain() { "fine-grain" } else { "row cut" },
            c.by,
            c.rows.0,
            pct(c.rows.0),
            c.rows.1,
            c.rows.2,
            c.fine.0,
            pct(c.fine.0),
            c.fine.1,
            c.fine.2
        )
    }
}

impl<T: deinsum_exec::Scalar> fmt::Display for SparseSummary<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (plan, r) = (self.plan, self.report);
        let p = plan.plan();
        let (pred_max, pred_total, repl_max, repl_total) = self.volumes();
        let (flops_total, flops_max, dense_flops) = self.flops();
        self.header(f)?;
        let wi = p
            .work_imbalance()
            .map_or(String::new(), |w| format!(", {} {w:.3}", plan.work_name()));
        writeln!(
            f,
            "{}: imbalance {:.3} (max nonzeros per rank over the mean){wi}",
            plan.partition(),
            p.imbalance()
        )?;
        if let Some(n) = r.output_nnz() {
            writeln!(f, "output: sparse, {n} stored entries")?;
        }
        self.scheme_line(f, repl_total)?;
        writeln!(f, "cost from nonzeros: {flops_total} flops in all, {flops_max} on the busiest rank; the dense einsum would do {dense_flops:.3e}")?;
        let pct = if repl_total > 0 {
            100.0 * pred_total as f64 / repl_total as f64
        } else {
            0.0
        };
        writeln!(f, "fetch ({}): busiest rank receives {pred_max} words, {pred_total} in all; replicating would move {repl_max} per rank, {repl_total} in all ({pct:.1}% of it)", plan.fetched(self.job.form()))?;
        if r.exact() {
            let total: u64 = r.measured.iter().map(|m| r.words(m.0)).sum();
            writeln!(
                f,
                "measured: every rank received and sent exactly the planned words ({total} in all)"
            )?;
        } else {
            writeln!(
                f,
                "measured: MISMATCH against the plan: {:?} (bytes received, sent), planned {:?}",
                r.measured, r.predicted
            )?;
        }
        let warm = if self.warmup > 0 {
            format!(", after {} untimed", self.warmup)
        } else {
            String::new()
        };
        writeln!(
            f,
            "time: {:.6} s (slowest rank, median of {}{warm})",
            r.median_seconds(),
            r.seconds.len()
        )?;
        if let Some((c, tol)) = self.check {
            let verdict = if c.max_rel <= tol { "ok" } else { "FAILED" };
            writeln!(
                f,
                "check against {}: {verdict} (max abs error {:.3e}, max rel error {:.3e})",
                c.reference.describe(),
                c.max_abs,
                c.max_rel
            )?;
        }
        Ok(())
    }
}
