//! The recogniser of sparse einsum forms: which einsum, with which operands sparse, is which
//! distributed sparse kernel.

use crate::SparseError;
use deinsum_expr::{Dim, Index, ParsedEinsum};

/// What the built sparse einsums are, for the refusal of any other.
pub const BUILT: &str = "the built forms are SpMM ij,jk->ik / SpMV ij,j->i and SDDMM ij,ik,jk->ij \
                         with operand 0 sparse, SpGEMM ij,jk->ik with operands 0 and 1 sparse, and \
                         MTTKRP ijk,ja,ka->ia (any mode and order) with operand 0 sparse";

/// The sparse kernel an einsum is, with its index roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// `ij,j<rest>->i<rest>`: A sparse (SpMV when `rest` is empty).
    Spmm {
        /// The contracted index.
        j: Index,
        /// The dense operand's other indices (the output's columns).
        rest: Vec<Index>,
    },
    /// `ij,i<rest>,j<rest>->ij`: S sparse, the output in its pattern.
    Sddmm {
        /// S's row index.
        i: Index,
        /// S's column index.
        j: Index,
        /// The dense operands' contracted indices.
        rest: Vec<Index>,
    },
    /// `ij,jk->ik`: both sparse, the output sparse.
    Spgemm,
    /// `<modes>,<m a>..->o a`: X sparse.
    Mttkrp {
        /// X's indices, one per mode.
        modes: Vec<Index>,
        /// The rank index of the factors.
        a: Index,
        /// The output mode.
        mode: usize,
        /// `factor[m]` is the operand of mode m's factor (None for the output mode).
        factor: Vec<Option<usize>>,
    },
}

impl Form {
    /// The kernel's name: `SpMV`, `SpMM`, `SDDMM`, `SpGEMM` or `MTTKRP`.
    pub fn name(&self) -> &'static str {
        match self {
            Form::Spmm { rest, .. } if rest.is_empty() => "SpMV",
            Form::Spmm { .. } => "SpMM",
            Form::Sddmm { .. } => "SDDMM",
            Form::Spgemm => "SpGEMM",
            Form::Mttkrp { .. } => "MTTKRP",
        }
    }

    /// Whether the result is sparse: SDDMM's in its operand's pattern, SpGEMM's.
    pub fn sparse_result(&self) -> bool {
        matches!(self, Form::Sddmm { .. } | Form::Spgemm)
    }

    /// The operands that are sparse in this form.
    pub fn sparse_operands(&self) -> Vec<usize> {
        match self {
            Form::Spgemm => vec![0, 1],
            _ => vec![0],
        }
    }

    /// The sparse kernel `e` is with the operands `sparse` (sorted) sparse, or
    /// [`SparseError::NotBuilt`] naming the forms that are built.
    pub fn of(e: &ParsedEinsum, sparse: &[usize]) -> Result<Form, SparseError> {
        let refuse = || {
            SparseError::NotBuilt(format!(
                "this einsum with sparse operand(s) {sparse:?} ({BUILT})"
            ))
        };
        let ops: Vec<Vec<Index>> = (0..e.num_inputs())
            .map(|k| plain(e, k))
            .collect::<Option<_>>()
            .ok_or_else(refuse)?;
        let out = e.output();
        match (sparse, ops.as_slice()) {
            ([0], [a, b]) if a.len() == 2 && a[0] != a[1] => spmm(a, b, out).ok_or_else(refuse),
            ([0, 1], [a, b]) if a.len() == 2 && b.len() == 2 => {
                let (i, j, k) = (a[0], a[1], b[1]);
                let ok = i != j && b[0] == j && k != i && k != j && out == [i, k];
                ok.then_some(Form::Spgemm).ok_or_else(refuse)
            }
            ([0], [s, u, v]) if s.len() == 2 && s[0] != s[1] => {
                sddmm(s, u, v, out).ok_or_else(refuse)
            }
            ([0], [x, fs @ ..]) if x.len() >= 2 && fs.len() == x.len() - 1 => {
                mttkrp(x, fs, out).ok_or_else(refuse)
            }
            _ => Err(refuse()),
        }
    }
}

fn spmm(a: &[Index], b: &[Index], out: &[Index]) -> Option<Form> {
    let (i, j) = (a[0], a[1]);
    let ok =
        b.first() == Some(&j) && !b.contains(&i) && out.first() == Some(&i) && out[1..] == b[1..];
    ok.then(|| Form::Spmm {
        j,
        rest: b[1..].to_vec(),
    })
}

fn sddmm(s: &[Index], u: &[Index], v: &[Index], out: &[Index]) -> Option<Form> {
    let (i, j) = (s[0], s[1]);
    let ok = u.first() == Some(&i)
        && v.first() == Some(&j)
        && u[1..] == v[1..]
        && !u[1..].contains(&i)
        && !u[1..].contains(&j)
        && out == [i, j];
    ok.then(|| Form::Sddmm {
        i,
        j,
        rest: u[1..].to_vec(),
    })
}

fn mttkrp(x: &[Index], fs: &[Vec<Index>], out: &[Index]) -> Option<Form> {
    let a = *fs[0].get(1)?;
    let mut factor = vec![None; x.len()];
    for (f, op) in fs.iter().enumerate() {
        let m = match op.as_slice() {
            [c, b] if *b == a => x.iter().position(|d| d == c)?,
            _ => return None,
        };
        if factor[m].replace(f + 1).is_some() {
            return None;
        }
    }
    let mode = factor.iter().position(Option::is_none)?;
    let ok = !x.contains(&a) && out == [x[mode], a];
    ok.then(|| Form::Mttkrp {
        modes: x.to_vec(),
        a,
        mode,
        factor,
    })
}

/// Operand `k`'s plain indices (no broadcast, no repeated index), else `None`.
fn plain(e: &ParsedEinsum, k: usize) -> Option<Vec<Index>> {
    let op = &e.inputs()[k];
    let idx: Vec<Index> = op
        .dims
        .iter()
        .map(|d| match d {
            Dim::Index(c) => Some(*c),
            Dim::Broadcast => None,
        })
        .collect::<Option<_>>()?;
    (idx.len() == op.indices.len()).then_some(idx)
}
