//! What the facade's end-to-end tests share: extents by name, and a distributed run held to
//! the serial reference and to the plan's predicted words and peak on every rank.

use deinsum::exec::reference::{max_error, naive_seeded};
use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, ExecOptions, InProcess, Inputs};
use std::collections::BTreeMap;

/// Extents given index by index.
pub fn sizes(s: &[(char, usize)]) -> ExtentSpec {
    ExtentSpec {
        sizes: s.iter().copied().collect::<BTreeMap<_, _>>(),
        ..ExtentSpec::default()
    }
}

/// Runs `c` on `p` in-process ranks with inputs from `seed`, and holds the gathered output to
/// the serial reference, every rank's measured words per step to the plan's, and every rank's
/// peak to the plan's prediction. `what` names the case in failures.
pub fn check_run(c: &Einsum, what: &str, p: usize, seed: u64) {
    let plan = c.plan();
    let world = InProcess::new(p).unwrap();
    let outs = world
        .run(|comm| {
            let (t, rep) =
                c.run_measured::<f64, _>(comm, &Inputs::Seeded { seed }, &ExecOptions::default())?;
            Ok::<_, deinsum::Error>((t.gather(comm)?, rep))
        })
        .unwrap_or_else(|e| panic!("{what} P={p}: {e}"));
    let want = naive_seeded(&plan.einsum, seed);
    let got = outs[0].0.as_ref().expect("rank 0 gathers");
    assert_eq!(got.len(), want.len(), "{what} P={p}");
    let (abs, rel) = max_error(got, &want);
    assert!(rel < 1e-12, "{what} P={p}: abs {abs} rel {rel}");
    for (_, rep) in &outs {
        for m in &rep.steps {
            let (ps, pr) = plan.step_words(m.step, rep.rank);
            assert_eq!(
                (m.sent, m.received),
                (ps, pr),
                "{what} P={p} step {} rank {}",
                m.step,
                rep.rank
            );
        }
        let (predicted, _) = plan.peak_of(rep.rank);
        assert!(
            rep.peak_words <= predicted,
            "{what} P={p} rank {}: peak {} > {predicted}",
            rep.rank,
            rep.peak_words
        );
    }
}
