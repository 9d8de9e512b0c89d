//! The text forms of an inspection and of a run, which the CLI and Python print.

use crate::dist::choose;
use crate::{Inspection, RankJoin, Strategy};
use std::fmt::Write;

/// Every strategy's predicted bytes per rank and seconds, and the one `auto` picks.
pub fn explain_text(ins: &Inspection) -> String {
    let mut s = String::new();
    let rows = |f: fn(&crate::inspect::RankFigures) -> u64| ins.ranks.iter().map(f).sum::<u64>();
    let _ = writeln!(
        s,
        "join on {} ranks: left {} rows, right {} rows; output {} rows ({} bytes)",
        ins.procs,
        rows(|f| f.left_rows),
        rows(|f| f.right_rows),
        ins.output_rows,
        ins.output_bytes
    );
    let best = choose(ins);
    for p in &ins.predictions {
        let bcast = match (p.strategy, ins.broadcast_left) {
            (Strategy::Broadcast, true) => " (left)",
            (Strategy::Broadcast, false) => " (right)",
            _ => "",
        };
        let _ = writeln!(
            s,
            "{}{:<10}{bcast:<8} predicted {:.3e} s, max sent {} B, max received {} B, {} all-to-all",
            if p.strategy == best { "* " } else { "  " },
            p.strategy.name(),
            p.seconds,
            p.sent.iter().max().unwrap_or(&0),
            p.received.iter().max().unwrap_or(&0),
            p.calls,
        );
        let _ = writeln!(s, "      sent per rank     {:?}", p.sent);
        let _ = writeln!(s, "      received per rank {:?}", p.received);
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
        "strategy {}{}: {} output rows; predicted {:.3e} s",
        first.strategy.name(),
        if auto { " (auto)" } else { "" },
        runs.iter().map(|r| r.table.rows()).sum::<usize>(),
        pred.seconds
    );
    for (q, r) in runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  rank {q}: sent {} B (predicted {}), received {} B (predicted {}); inspector {} B sent",
            r.measured.sent, pred.sent[q], r.measured.received, pred.received[q], r.inspector.sent
        );
    }
    s
}
