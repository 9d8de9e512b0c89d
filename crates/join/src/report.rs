//! The text forms of an inspection and of a run, which the CLI and Python print.

use crate::dist::choose;
use crate::{Inspection, RankJoin, Strategy};
use std::fmt::Write;

/// Every strategy's predicted bytes per rank and seconds, and the one `auto` picks.
pub fn explain_text(ins: &Inspection) -> String {
    let mut s = String::new();
    let rows = |f: fn(&crate::inspect::RankFigures) -> u64| ins.ranks.iter().map(f).sum::<u64>();
    // Figures the sketch inspector estimated are marked `~`, as the mode line says.
    let est = |exact: bool| if exact { "" } else { "~" };
    let out_exact = ins.sketch.is_none();
    let _ = writeln!(
        s,
        "join on {} ranks: left {} rows, right {} rows; output {}{} rows ({}{} bytes)",
        ins.procs,
        rows(|f| f.left_rows),
        rows(|f| f.right_rows),
        est(out_exact),
        ins.output_rows,
        est(out_exact),
        ins.output_bytes
    );
    match &ins.sketch {
        None => {
            let _ = writeln!(s, "inspector: exact (every figure exact)");
        }
        Some(k) => {
            let _ = writeln!(
                s,
                "inspector: sketch (~ marks an estimate): distinct keys left ~{}, right ~{}, \
                 matched ~{} (HyperLogLog, ±{:.1}%); {} heavy-hitter candidates counted exactly \
                 (Misra-Gries, {} counters a side, undercount ≤ {} left, ≤ {} right)",
                k.left_distinct,
                k.right_distinct,
                k.matched_distinct,
                100.0 * k.distinct_rel_error,
                k.candidates,
                k.counters,
                k.left_count_error,
                k.right_count_error
            );
        }
    }
    let best = choose(ins);
    for p in &ins.predictions {
        let bcast = match (p.strategy, ins.broadcast_left) {
            (Strategy::Broadcast, true) => " (left)",
            (Strategy::Broadcast, false) => " (right)",
            _ => "",
        };
        let (b, t) = (est(p.bytes_exact), est(p.bytes_exact && p.rows_exact));
        let _ = writeln!(
            s,
            "{}{:<10}{bcast:<8} predicted {t}{:.3e} s, max sent {b}{} B, max received {b}{} B, {} all-to-all ({})",
            if p.strategy == best { "* " } else { "  " },
            p.strategy.name(),
            p.seconds,
            p.sent.iter().max().unwrap_or(&0),
            p.received.iter().max().unwrap_or(&0),
            p.calls,
            if p.bytes_exact && p.rows_exact {
                "exact"
            } else if p.bytes_exact {
                "bytes exact, rows estimated"
            } else {
                "estimated"
            },
        );
        let _ = writeln!(s, "      sent per rank     {b}{:?}", p.sent);
        let _ = writeln!(s, "      received per rank {b}{:?}", p.received);
    }
    let _ = writeln!(s, "auto picks {}", best.name());
    s
}

/// A run's strategy and, per rank, its measured bytes against the prediction.
pub fn run_text(runs: &[RankJoin], auto: bool) -> String {
    let mut s = String::new();
    let Some(first) = runs.first() else { return s };
    let pred = first.inspection.prediction(first.strategy);
    let _ = writeln!(
        s,
        "strategy {}{}: {} output rows; predicted {}{:.3e} s ({} inspector)",
        first.strategy.name(),
        if auto { " (auto)" } else { "" },
        runs.iter().map(|r| r.table.rows()).sum::<usize>(),
        if pred.bytes_exact && pred.rows_exact {
            ""
        } else {
            "~"
        },
        pred.seconds,
        first.inspection.mode().name()
    );
    for (q, r) in runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  rank {q}: sent {} B (predicted {b}{}), received {} B (predicted {b}{}); inspector {} B sent",
            r.measured.sent, pred.sent[q], r.measured.received, pred.received[q], r.inspector.sent,
            b = if pred.bytes_exact { "" } else { "~" }
        );
    }
    s
}
