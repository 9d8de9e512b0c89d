//! One interface over the four sparse plan kinds ([`SparsePlan`]) and the plan of a sparse
//! einsum ([`Planned`]: which kind, with the SpMV/SpMM scheme choice when there was one).

use crate::dist::{self, MttkrpPlan, SpgemmPlan};
use crate::fine::{FinePlan, VERTEX_WORK};
use crate::halo::HaloPlan;

/// What every distributed sparse plan states: its kind, its ranks, the bytes each rank is
/// predicted to receive and send (exact, held against the communicator's count), what
/// replicating the fetched operand would move, and the nonzeros per rank.
///
/// Volumes are in bytes for values of `value_bytes` bytes each, so that one plan serves every
/// element type; [`SparsePlan::word_bytes`] says how many bytes a reported word is.
pub trait SparsePlan {
    /// The plan kind: `halo`, `fine`, `spgemm` or `mttkrp`.
    fn kind(&self) -> &'static str;
    /// Number of ranks.
    fn procs(&self) -> usize;
    /// Bytes rank `r` receives in one run.
    fn received_bytes(&self, r: usize, value_bytes: usize) -> u64;
    /// Bytes rank `r` sends in one run.
    fn sent_bytes(&self, r: usize, value_bytes: usize) -> u64;
    /// Bytes rank `r` would receive with the fetched operand replicated.
    fn replication_bytes(&self, r: usize, value_bytes: usize) -> u64;
    /// Bytes of a reported word: a value's, or 8 where a word may also be a length or a column.
    fn word_bytes(&self, value_bytes: usize) -> usize {
        value_bytes
    }
    /// Nonzeros of the sparse operand per rank.
    fn nnz(&self) -> &[usize];
    /// Max nonzeros per rank over the mean.
    fn imbalance(&self) -> f64 {
        crate::fetch::imbalance(self.nnz())
    }
    /// The imbalance of the work, where it is not that of the nonzeros.
    fn work_imbalance(&self) -> Option<f64> {
        None
    }
}

/// The plan kinds that count words of values: bytes are words times the value's size.
macro_rules! word_plan {
    ($plan:ty, $kind:literal $(, $work:expr)?) => {
        impl SparsePlan for $plan {
            fn kind(&self) -> &'static str {
                $kind
            }
            fn procs(&self) -> usize {
                self.procs
            }
            fn received_bytes(&self, r: usize, vb: usize) -> u64 {
                self.received_words(r) * vb as u64
            }
            fn sent_bytes(&self, r: usize, vb: usize) -> u64 {
                self.sent_words(r) * vb as u64
            }
            fn replication_bytes(&self, r: usize, vb: usize) -> u64 {
                self.replication_words(r) * vb as u64
            }
            fn nnz(&self) -> &[usize] {
                &self.nnz
            }
            $(fn work_imbalance(&self) -> Option<f64> {
                Some($work(self))
            })?
        }
    };
}

word_plan!(HaloPlan, "halo");
word_plan!(FinePlan, "fine", FinePlan::work_imbalance);
word_plan!(MttkrpPlan, "mttkrp");

impl SparsePlan for SpgemmPlan {
    fn kind(&self) -> &'static str {
        "spgemm"
    }
    fn procs(&self) -> usize {
        self.procs
    }
    fn received_bytes(&self, r: usize, vb: usize) -> u64 {
        SpgemmPlan::received_bytes(self, r, vb)
    }
    fn sent_bytes(&self, r: usize, vb: usize) -> u64 {
        SpgemmPlan::sent_bytes(self, r, vb)
    }
    fn replication_bytes(&self, r: usize, vb: usize) -> u64 {
        self.fetch.csr_replication_bytes(r, &self.b_row_len, vb)
    }
    /// Lengths and columns travel as 8-byte words beside the values.
    fn word_bytes(&self, _value_bytes: usize) -> usize {
        8
    }
    fn nnz(&self) -> &[usize] {
        &self.nnz
    }
    fn work_imbalance(&self) -> Option<f64> {
        Some(SpgemmPlan::work_imbalance(self))
    }
}

/// How SpMV/SpMM with a square sparse matrix is distributed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheme {
    /// The one whose plan moves fewer words in all (the row cut on a tie).
    #[default]
    Auto,
    /// Rows cut by nonzeros; each rank fetches the x rows its nonzeros touch.
    Rows,
    /// Each cross nonzero at its row's owner, which fetches x, or its column's, which pushes
    /// a partial y, as a minimum vertex cover chooses ([`crate::fine`]).
    Fine,
}

/// Both SpMV/SpMM schemes' words (in all, max per rank) and nonzero imbalance, and how the
/// one in use was chosen.
#[derive(Clone, Debug)]
pub struct SchemeChoice {
    /// The row cut's (total words, max words per rank, imbalance).
    pub rows: (u64, u64, f64),
    /// The fine-grain scheme's.
    pub fine: (u64, u64, f64),
    /// How the one in use was chosen.
    pub by: &'static str,
}

/// The plan of a sparse einsum: one of the four kinds.
#[derive(Clone, Debug)]
pub enum Planned {
    /// The row cut's halo (SpMM, SpMV, SDDMM), with the scheme choice for a square SpMM/SpMV.
    Halo(HaloPlan, Option<SchemeChoice>),
    /// The fine-grain SpMV/SpMM, with the scheme choice.
    Fine(FinePlan, SchemeChoice),
    /// The distributed SpGEMM.
    Spgemm(SpgemmPlan),
    /// The distributed MTTKRP.
    Mttkrp(MttkrpPlan),
}

impl Planned {
    /// The plan as its common interface.
    pub fn plan(&self) -> &dyn SparsePlan {
        match self {
            Planned::Halo(p, _) => p,
            Planned::Fine(p, _) => p,
            Planned::Spgemm(p) => p,
            Planned::Mttkrp(p) => p,
        }
    }

    /// The SpMV/SpMM scheme choice, when there was one.
    pub fn choice(&self) -> Option<&SchemeChoice> {
        match self {
            Planned::Halo(_, c) => c.as_ref(),
            Planned::Fine(_, c) => Some(c),
            _ => None,
        }
    }

    /// Whether this is the fine-grain SpMV/SpMM.
    pub fn fine_grain(&self) -> bool {
        matches!(self, Planned::Fine(..))
    }

    /// What the imbalance of [`SparsePlan::work_imbalance`] counts.
    pub fn work_name(&self) -> String {
        match self {
            Planned::Fine(..) => format!("work (nonzeros + {VERTEX_WORK} per vertex)"),
            _ => "multiply-adds".to_string(),
        }
    }

    /// What each rank fetches, in words, for the kernel `form`.
    pub fn fetched(&self, form: &super::Form) -> &'static str {
        use super::Form;
        match (form, self) {
            (Form::Spmm { .. }, Planned::Fine(..)) => {
                "the rows of B its row-side nonzeros touch, and the partial rows of C its column-side nonzeros give other ranks"
            }
            (Form::Spmm { .. }, _) => "the rows of B its nonzeros touch",
            (Form::Sddmm { .. }, _) => "the rows of V its nonzeros touch (U's rows are its own)",
            (Form::Spgemm, _) => "the rows of B its columns touch (length, columns and values)",
            (Form::Mttkrp { .. }, Planned::Mttkrp(p)) if !p.splits.is_empty() => {
                "the factor rows its nonzeros touch, per mode, and the partial output rows of its slab's other ranks"
            }
            (Form::Mttkrp { .. }, _) => "the factor rows its nonzeros touch, per mode",
        }
    }

    /// How the plan partitions the work, in words.
    pub fn partition(&self) -> String {
        match self {
            Planned::Mttkrp(p) => mttkrp_partition(p),
            Planned::Spgemm(_) => "rows of A cut by multiply-adds".into(),
            Planned::Fine(..) => "fine-grain: each cross nonzero at its row's owner (fetching x) or its column's (pushing a partial y), by a minimum vertex cover; vertices (rows of B and C) cut into blocks, the work balanced by shifting nonzeros both ends reach".into(),
            Planned::Halo(..) => "rows cut by nonzeros".into(),
        }
    }
}

/// The MTTKRP plan's grid, how it cuts, and the words of the grids it was chosen from.
fn mttkrp_partition(p: &MttkrpPlan) -> String {
    let dims: Vec<String> = p.grid.iter().map(usize::to_string).collect();
    let cut = if p.splits.is_empty() {
        format!(
            "the tensor cut along mode {} (the output mode) at nnz-balanced points, each factor at its mode's points",
            p.mode
        )
    } else {
        let levels: Vec<String> = p
            .splits
            .iter()
            .map(|(m, b)| format!("along mode {m} into {b}"))
            .collect();
        format!(
            "{} slabs of mode {} (the output mode) at nnz-balanced points, each cut {} boxes at points balanced by the box's nonzeros; partial output rows reduced to their owners ({} words), each factor at its mode's points",
            p.grid[p.mode],
            p.mode,
            levels.join(", then each "),
            (0..p.procs).map(|r| p.reduction_words(r)).sum::<u64>()
        )
    };
    let (one_d, one_d_max) = p
        .considered
        .first()
        .map_or((0, 0), |g| (g.words, g.max_words));
    format!(
        "grid {} over the modes, of {} grids the one whose busiest rank moves the fewest words (within {}%, then the fewest in all) among those with nonzero imbalance within {}x the least ({} words on the busiest rank, received and sent, {} in all; the 1D cut {one_d_max} and {one_d}): {cut}",
        dims.join(" x "),
        p.considered.len(),
        100.0 * dist::MAX_WORDS_TIE,
        dist::IMBALANCE_SLACK,
        p.max_words(),
        p.total_received()
    )
}
