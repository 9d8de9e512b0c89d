//! Where an input operand's data is before a plan runs ([`Source`]), and the relabelling
//! that lets a distribution made for one einsum serve as an operand's layout in another
//! ([`relabel`]).

use crate::{Distribution, PlanError, PlanOptions};
use deinsum_expr::Index;

/// Where input operand data sits before the plan runs: a planning input, since moving an
/// operand costs time that computing in its layout would not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Source {
    /// Readable in whatever layout the plan wants (generated, a `.npy` file, a caller's whole
    /// array): the plan loads it where its first use computes, or in the canonical
    /// distribution when that predicts better.
    #[default]
    Anywhere,
    /// In the canonical distribution ([`crate::canonical_distribution`]).
    Canonical,
    /// Already distributed in this layout (a distribution over the operand's distinct
    /// indices, in the einsum's order): the plan starts from it.
    Given(Distribution),
}

impl Source {
    /// Its name in reports: `anywhere`, `canonical` or `given`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Anywhere => "anywhere",
            Source::Canonical => "canonical",
            Source::Given(_) => "given",
        }
    }
}

impl PlanOptions {
    /// Operand `k`'s source: [`PlanOptions::sources`]`[k]`, or for an operand the list does
    /// not reach, `Anywhere` under [`PlanOptions::inputs_in_place`] and `Canonical` otherwise.
    pub fn source(&self, k: usize) -> Source {
        match self.sources.get(k) {
            Some(s) => s.clone(),
            None if self.inputs_in_place => Source::Anywhere,
            None => Source::Canonical,
        }
    }

    /// True when some of the `n` operands is `Anywhere`.
    pub(crate) fn any_anywhere(&self, n: usize) -> bool {
        (0..n).any(|k| self.source(k) == Source::Anywhere)
    }

    /// These options with every `Anywhere` operand of the `n` given where `plan` loads it.
    pub(crate) fn anywhere_as_loaded(&self, plan: &crate::Plan, n: usize) -> PlanOptions {
        let mut o = self.clone();
        o.sources = (0..n)
            .map(|k| match (self.source(k), plan.load_dist(k)) {
                (Source::Anywhere, Some(d)) if d.window.is_empty() && !d.is_partial() => {
                    Source::Given(d.clone())
                }
                (s, _) => s,
            })
            .collect();
        o
    }

    /// These options with every `Anywhere` operand of the `n` read canonically instead.
    pub(crate) fn anywhere_as_canonical(&self, n: usize) -> PlanOptions {
        let mut o = self.clone();
        o.sources = (0..n)
            .map(|k| match self.source(k) {
                Source::Anywhere => Source::Canonical,
                s => s,
            })
            .collect();
        o
    }
}

impl crate::Plan {
    /// Words (over all ranks) that step `i` moves of tensor `t`: a redistribution of it, or
    /// the windows of it that a phase fetches and prefetches; 0 for any other step.
    pub fn step_words_of(&self, i: usize, t: crate::TensorId) -> u64 {
        match self.steps.get(i) {
            Some(crate::PlanStep::Redistribute { tensor, volume, .. }) if *tensor == t => {
                volume.total
            }
            Some(crate::PlanStep::ComputePhase {
                fetch, prefetch, ..
            }) => fetch
                .iter()
                .chain(prefetch)
                .filter(|f| f.tensor == t)
                .map(|f| f.volume.total)
                .sum(),
            _ => 0,
        }
    }

    /// Words (over all ranks) moved to bring input tensor `t` to where it computes: its
    /// redistributions and phase windows. 0 for an input read in place (loaded where its
    /// group computes).
    pub fn input_words(&self, t: crate::TensorId) -> u64 {
        (0..self.steps.len())
            .map(|i| self.step_words_of(i, t))
            .sum()
    }
}

/// Checks that every `Given` layout fits its operand: one split list per distinct index, a
/// grid of at most `procs` ranks naming only its own dims, no partial sums and no phase window.
pub(crate) fn check_sources(opts: &PlanOptions, operands: &[Vec<Index>]) -> Result<(), PlanError> {
    for (k, idx) in operands.iter().enumerate() {
        let Source::Given(d) = opts.source(k) else {
            continue;
        };
        let bad = |why: String| PlanError::BadSource { operand: k, why };
        if d.split.len() != idx.len() {
            return Err(bad(format!(
                "its layout splits {} indices, the operand has {}",
                d.split.len(),
                idx.len()
            )));
        }
        if d.grid.size() > opts.procs.max(1) {
            return Err(bad(format!(
                "its layout's grid has {} ranks, the plan {}",
                d.grid.size(),
                opts.procs
            )));
        }
        if d.split.iter().flatten().any(|&g| g >= d.grid.dims.len()) {
            return Err(bad("its layout splits by a grid dimension it lacks".into()));
        }
        if d.is_partial() || !d.window.is_empty() {
            return Err(bad("its layout holds partial sums or a phase window".into()));
        }
    }
    Ok(())
}

/// `d`, a layout over a tensor's dims, with its grid dims renamed for an operand whose
/// distinct indices are `indices`: a dim that splits tensor dim `v` takes `indices[v]`'s
/// name, the others (replicas) names from Unicode's private use area, so that no name
/// claims an index of the einsum it now serves. The blocks do not change (names only label
/// grid dims).
pub fn relabel(d: &Distribution, indices: &[Index]) -> Distribution {
    let mut out = d.clone();
    let mut spare = ('\u{E000}'..='\u{F8FF}').filter(|c| !indices.contains(c));
    for (g, dim) in out.grid.dims.iter_mut().enumerate() {
        let owner = d.split.iter().position(|s| s.contains(&g));
        dim.index = match owner.and_then(|v| indices.get(v)) {
            Some(&c) => c,
            None => spare.next().unwrap_or('\u{F8FF}'),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical_distribution;

    #[test]
    fn default_source_follows_inputs_in_place() {
        let mut o = PlanOptions::default();
        assert_eq!(o.source(0), Source::Canonical);
        o.inputs_in_place = true;
        assert_eq!(o.source(3), Source::Anywhere);
        o.sources = vec![Source::Canonical];
        assert_eq!(o.source(0), Source::Canonical);
        assert_eq!(o.source(1), Source::Anywhere);
        let c = o.anywhere_as_canonical(2);
        assert_eq!(c.sources, vec![Source::Canonical, Source::Canonical]);
    }

    #[test]
    fn relabel_keeps_blocks_and_renames_dims() {
        let d = canonical_distribution(&['i', 'j'], &[10, 7], 6);
        let r = relabel(&d, &['a', 'b']);
        assert_eq!(r.grid.dims[0].index, 'a');
        assert_eq!(r.grid.dims[1].index, 'b');
        for rank in 0..6 {
            assert_eq!(d.block(rank, &[10, 7]), r.block(rank, &[10, 7]));
        }
    }

    #[test]
    fn a_layout_that_does_not_fit_is_refused() {
        let d = canonical_distribution(&['i', 'j'], &[10, 7], 6);
        let o = PlanOptions {
            procs: 4,
            sources: vec![Source::Given(d.clone())],
            ..PlanOptions::default()
        };
        assert!(check_sources(&o, &[vec!['i', 'j']]).is_err());
        let o = PlanOptions {
            procs: 6,
            sources: vec![Source::Given(d)],
            ..PlanOptions::default()
        };
        assert!(check_sources(&o, &[vec!['i']]).is_err());
        assert!(check_sources(&o, &[vec!['i', 'j']]).is_ok());
    }
}
