//! `deinsum run` with sparse operands (`--sparse K[,K..]`, `--density`, `--rmat`, or `.mtx`,
//! `.tns` or `.npz` inputs), planned from the pattern and run on in-process ranks or, under an
//! MPI launcher in a build with `mpi`, on the MPI world:
//!
//! - SpMM `ij,jk->ik` / SpMV `ij,j->i` (operand 0 sparse) and SDDMM `ij,ik,jk->ij` (operand 0
//!   sparse; the output sparse in its pattern): [`deinsum_sparse::halo`]; a square SpMV/SpMM
//!   may instead run the fine-grain scheme ([`deinsum_sparse::fine`], `--spmv-scheme`);
//! - SpGEMM `ij,jk->ik` (operands 0 and 1 sparse; sparse output) and MTTKRP `ijk,ja,ka->ia` in
//!   any mode and order (operand 0 sparse, on the grid of ranks whose busiest rank moves the
//!   fewest words with the nonzeros balanced, the report stating it beside the 1D cut's
//!   words): [`deinsum_sparse::dist`].
//!
//! Dense operands are generated from the seed, or read from the `.npy` files `--inputs` lists
//! beside the sparse ones (shape checked against the extents first; their headers give the
//! extents no flag or sparse file gives); `--output` writes the result as `.npy`, `.mtx`,
//! `.tns` or `.npz` (its extension says which; [`deinsum_sparse::io::write`]).
//! Other einsums with a sparse operand are refused as not built yet. The report states the
//! partition's imbalance, the predicted words of every rank against the measured ones and
//! against replication, and the costs counted from the nonzeros.

use super::run::{Args, Backend, Dtype};
use super::{Format, InputError};
use anyhow::Context;
use deinsum_exec::data::seeded_value;
use deinsum_exec::{Communicator, InProcess};
use deinsum_expr::{Dim, Index, ParsedEinsum};
use deinsum_sparse::dist::{self, MttkrpPlan, SpgemmPlan};
use deinsum_sparse::fine::{self, FineLocal, FinePlan, VERTEX_WORK};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, io, kernels, Csr, SparseError, SparseTensor};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// The dense reference of `--check` evaluates the einsum naively when its iteration space has
/// at most this many points; above, the serial sparse kernel is the reference.
const DENSE_CHECK_POINTS: f64 = 2e7;

/// Whether `args` ask for a sparse run: `--sparse`, `--density`, `--rmat`, or a sparse input file.
pub fn wanted(args: &Args) -> bool {
    !args.sparse.is_empty()
        || args.density.is_some()
        || args.rmat.is_some()
        || input_files(args).iter().any(|p| io::is_sparse_file(p))
}

fn input_files(args: &Args) -> Vec<PathBuf> {
    args.inputs
        .as_deref()
        .map(|raw| {
            raw.split(',')
                .map(|s| PathBuf::from(s.trim()))
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn not_built(what: &str) -> anyhow::Error {
    InputError(format!("sparse operands: {what} is not built yet")).into()
}

fn input_err(e: SparseError) -> anyhow::Error {
    InputError(e.to_string()).into()
}

/// What the built sparse einsums are, for the refusal of any other.
const BUILT: &str = "the built forms are SpMM ij,jk->ik / SpMV ij,j->i and SDDMM ij,ik,jk->ij \
                     with operand 0 sparse, SpGEMM ij,jk->ik with operands 0 and 1 sparse, and \
                     MTTKRP ijk,ja,ka->ia (any mode and order) with operand 0 sparse";

/// The sparse kernel an einsum is, with its index roles.
#[derive(Clone, Debug)]
enum Form {
    /// `ij,j<rest>->i<rest>`: A sparse.
    Spmm { j: Index, rest: Vec<Index> },
    /// `ij,i<rest>,j<rest>->ij`: S sparse, the output in its pattern.
    Sddmm {
        i: Index,
        j: Index,
        rest: Vec<Index>,
    },
    /// `ij,jk->ik`: both sparse.
    Spgemm,
    /// `<modes>,<m a>..->o a`: X sparse; `factor[m]` is the operand of mode m (None for the
    /// output mode).
    Mttkrp {
        modes: Vec<Index>,
        a: Index,
        mode: usize,
        factor: Vec<Option<usize>>,
    },
}

impl Form {
    fn name(&self) -> &'static str {
        match self {
            Form::Spmm { rest, .. } if rest.is_empty() => "SpMV",
            Form::Spmm { .. } => "SpMM",
            Form::Sddmm { .. } => "SDDMM",
            Form::Spgemm => "SpGEMM",
            Form::Mttkrp { .. } => "MTTKRP",
        }
    }
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

/// The sparse kernel `e` is with the operands `sparse` sparse, or the refusal naming the forms
/// that are built.
fn form_of(e: &ParsedEinsum, sparse: &[usize]) -> anyhow::Result<Form> {
    let refuse = || {
        not_built(&format!(
            "this einsum with sparse operand(s) {sparse:?} ({BUILT})"
        ))
    };
    let ops: Vec<Vec<Index>> = (0..e.num_inputs())
        .map(|k| plain(e, k))
        .collect::<Option<_>>()
        .ok_or_else(refuse)?;
    let out = e.output();
    match (sparse, ops.as_slice()) {
        ([0], [a, b]) if a.len() == 2 && a[0] != a[1] => {
            let (i, j) = (a[0], a[1]);
            let ok = b.first() == Some(&j)
                && !b.contains(&i)
                && out.first() == Some(&i)
                && out[1..] == b[1..];
            ok.then(|| Form::Spmm {
                j,
                rest: b[1..].to_vec(),
            })
            .ok_or_else(refuse)
        }
        ([0, 1], [a, b]) if a.len() == 2 && b.len() == 2 => {
            let (i, j, k) = (a[0], a[1], b[1]);
            let ok = i != j && b[0] == j && k != i && k != j && out == [i, k];
            ok.then_some(Form::Spgemm).ok_or_else(refuse)
        }
        ([0], [s, u, v]) if s.len() == 2 && s[0] != s[1] => {
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
            .ok_or_else(refuse)
        }
        ([0], [x, fs @ ..]) if x.len() >= 2 && fs.len() == x.len() - 1 => {
            let a = fs[0].get(1).copied().ok_or_else(refuse)?;
            let mut factor = vec![None; x.len()];
            for (f, op) in fs.iter().enumerate() {
                let m = match op.as_slice() {
                    [c, b] if *b == a => x.iter().position(|d| d == c).ok_or_else(refuse)?,
                    _ => return Err(refuse()),
                };
                if factor[m].replace(f + 1).is_some() {
                    return Err(refuse());
                }
            }
            let mode = factor.iter().position(Option::is_none).ok_or_else(refuse)?;
            let ok = !x.contains(&a) && out == [x[mode], a];
            ok.then(|| Form::Mttkrp {
                modes: x.clone(),
                a,
                mode,
                factor,
            })
            .ok_or_else(refuse)
        }
        _ => Err(refuse()),
    }
}

/// A sparse input file and the tensor read from it (with the file's own shape).
type ReadFile = (PathBuf, SparseTensor<f64>);

/// Sparse operand `k` of `shape`: its file already read (a FROSTT file whose shape the einsum
/// gives is read again within that shape, since the file carries none), or generated from
/// `--density` / `--rmat` with the seed plus `k` (so two generated operands differ).
fn sparse_operand(
    args: &Args,
    k: usize,
    shape: &[usize],
    read: Option<ReadFile>,
) -> anyhow::Result<SparseTensor<f64>> {
    if let Some((p, t)) = read {
        if t.shape() != shape && p.extension().is_some_and(|e| e == "tns") {
            return io::read::<f64>(&p, Some(shape)).map_err(input_err);
        }
        return io::check_shape(&p, t, shape).map_err(input_err);
    }
    let seed = args.seed.wrapping_add(k as u64);
    let t = match (args.density, args.rmat) {
        (Some(_), Some(_)) => {
            return Err(InputError("give --density or --rmat, not both".into()).into())
        }
        (Some(d), None) => gen::uniform::<f64>(shape, d, seed),
        (None, Some(s)) => {
            let n = 1usize.checked_shl(s).unwrap_or(0);
            if shape != [n, n] {
                return Err(InputError(format!(
                    "--rmat {s} makes a {n} x {n} matrix; the einsum gives operand {k} the shape {shape:?} (try --size {n})"
                ))
                .into());
            }
            gen::rmat::<f64>(s, 16, seed)
        }
        (None, None) => gen::uniform::<f64>(shape, 0.01, seed),
    };
    t.map_err(input_err)
}

/// The sparse operands: `--sparse`, the operands whose input file is sparse, else operand 0.
fn sparse_set(args: &Args, n_inputs: usize) -> anyhow::Result<Vec<usize>> {
    let files = input_files(args);
    let mut set: Vec<usize> = args.sparse.clone();
    set.extend(
        files
            .iter()
            .enumerate()
            .filter(|(_, p)| io::is_sparse_file(p))
            .map(|(k, _)| k),
    );
    if set.is_empty() {
        set.push(0);
    }
    set.sort_unstable();
    set.dedup();
    if let Some(&k) = set.iter().find(|&&k| k >= n_inputs) {
        return Err(InputError(format!("--sparse {k}: the einsum has {n_inputs} operands")).into());
    }
    if let Some((k, p)) = files
        .iter()
        .enumerate()
        .find(|(k, p)| !io::is_sparse_file(p) && set.contains(k))
    {
        return Err(InputError(format!(
            "operand {k} is sparse but its input {} is not a .mtx, .tns or .npz file",
            p.display()
        ))
        .into());
    }
    // Operands past the list are generated (so a single sparse file may stand alone).
    if files.len() > n_inputs {
        return Err(InputError(format!(
            "--inputs names {} files for {n_inputs} operands",
            files.len()
        ))
        .into());
    }
    Ok(set)
}

/// The data of a run: the form, the sparse operands, the dense operands' seed.
struct Job {
    form: Form,
    einsum: ParsedEinsum,
    sparse: Vec<SparseTensor<f64>>,
    /// The CSR form of each sparse operand that is a matrix.
    csr: Vec<Option<Csr<f64>>>,
    seed: u64,
    /// `--spmv-scheme`.
    scheme: Scheme,
    /// Per operand, its dense values (row-major over its indices) when an `.npy` file gave
    /// them; a dense operand without one is generated from the seed.
    dense: Vec<Option<Vec<f64>>>,
}

/// How SpMV/SpMM with a square sparse matrix is distributed (`--spmv-scheme`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    /// The one whose plan moves fewer words in all (the row cut on a tie).
    #[default]
    Auto,
    /// Rows cut by nonzeros; each rank fetches the x rows its nonzeros touch.
    Rows,
    /// Each cross nonzero at its row's owner, which fetches x, or its column's, which pushes
    /// a partial y, as a minimum vertex cover chooses ([`deinsum_sparse::fine`]).
    Fine,
}

/// Both SpMV/SpMM schemes' words (in all, max per rank) and nonzero imbalance, and how the
/// one in use was chosen.
#[derive(Clone, Debug)]
struct Choice {
    rows: (u64, u64, f64),
    fine: (u64, u64, f64),
    by: &'static str,
}

/// The plan of a run.
enum Plan {
    /// The row cut's halo (SpMM, SpMV, SDDMM), with the scheme choice for a square SpMM/SpMV.
    Halo(HaloPlan, Option<Choice>),
    /// The fine-grain SpMV/SpMM, with the scheme choice.
    Fine(FinePlan, Choice),
    Spgemm(SpgemmPlan),
    Mttkrp(MttkrpPlan),
}

impl Plan {
    fn procs(&self) -> usize {
        match self {
            Plan::Halo(p, _) => p.procs,
            Plan::Fine(p, _) => p.procs,
            Plan::Spgemm(p) => p.procs,
            Plan::Mttkrp(p) => p.procs,
        }
    }

    /// Predicted (received, sent) bytes of rank `r`.
    fn bytes(&self, r: usize) -> (u64, u64) {
        match self {
            Plan::Halo(p, _) => (8 * p.received_words(r), 8 * p.sent_words(r)),
            Plan::Fine(p, _) => (8 * p.received_words(r), 8 * p.sent_words(r)),
            Plan::Spgemm(p) => (p.received_bytes(r, 8), p.sent_bytes(r, 8)),
            Plan::Mttkrp(p) => (8 * p.received_words(r), 8 * p.sent_words(r)),
        }
    }

    /// Words rank `r` would receive with the fetched operand replicated.
    fn replication_words(&self, r: usize) -> u64 {
        match self {
            Plan::Halo(p, _) => p.replication_words(r),
            Plan::Fine(p, _) => p.replication_words(r),
            Plan::Spgemm(p) => p.replication_words(r),
            Plan::Mttkrp(p) => p.replication_words(r),
        }
    }

    /// Nonzeros of the sparse operand per rank.
    fn nnz(&self) -> &[usize] {
        match self {
            Plan::Halo(p, _) => &p.nnz,
            Plan::Fine(p, _) => &p.nnz,
            Plan::Spgemm(p) => &p.nnz,
            Plan::Mttkrp(p) => &p.nnz,
        }
    }

    fn imbalance(&self) -> f64 {
        deinsum_sparse::fetch::imbalance(self.nnz())
    }

    /// The SpMV/SpMM scheme choice, when there was one.
    fn choice(&self) -> Option<&Choice> {
        match self {
            Plan::Halo(_, c) => c.as_ref(),
            Plan::Fine(_, c) => Some(c),
            _ => None,
        }
    }
}

impl Job {
    /// Extent of index `c`.
    fn ext(&self, c: Index) -> usize {
        self.einsum.extent(c)
    }

    /// Width of the dense operands' rows (the product of the extents of `rest`).
    fn width(&self, rest: &[Index]) -> usize {
        rest.iter().map(|&c| self.ext(c)).product()
    }

    /// Sparse operand `k` in CSR (converted once, shared by the in-process ranks).
    fn csr(&self, k: usize) -> anyhow::Result<&Csr<f64>> {
        self.csr[k]
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("operand {k} is not a sparse matrix"))
    }

    fn plan(&self, procs: usize) -> anyhow::Result<Plan> {
        let square = self.csr[0].as_ref().is_some_and(|a| a.nrows == a.ncols);
        if self.scheme != Scheme::Auto && !(matches!(self.form, Form::Spmm { .. }) && square) {
            return Err(InputError(
                "--spmv-scheme applies to SpMV ij,j->i and SpMM ij,jk->ik with a square sparse matrix"
                    .into(),
            )
            .into());
        }
        Ok(match &self.form {
            Form::Spmm { rest, .. } if square => {
                let (a, k) = (self.csr(0)?, self.width(rest));
                let rows = HaloPlan::build(a, k, procs).map_err(input_err)?;
                let fine = FinePlan::build(a, k, procs).map_err(input_err)?;
                let (by, use_fine) = match self.scheme {
                    Scheme::Auto => (
                        "--spmv-scheme auto: the fewer words in all (rows on a tie)",
                        fine.total_received() < rows.total_received(),
                    ),
                    Scheme::Rows => ("--spmv-scheme rows", false),
                    Scheme::Fine => ("--spmv-scheme fine", true),
                };
                let choice = Choice {
                    rows: (rows.total_received(), rows.max_received(), rows.imbalance()),
                    fine: (fine.total_received(), fine.max_received(), fine.imbalance()),
                    by,
                };
                if use_fine {
                    Plan::Fine(fine, choice)
                } else {
                    Plan::Halo(rows, Some(choice))
                }
            }
            Form::Spmm { rest, .. } | Form::Sddmm { rest, .. } => Plan::Halo(
                HaloPlan::build(self.csr(0)?, self.width(rest), procs).map_err(input_err)?,
                None,
            ),
            Form::Spgemm => Plan::Spgemm(
                SpgemmPlan::build(self.csr(0)?, self.csr(1)?, procs).map_err(input_err)?,
            ),
            Form::Mttkrp { mode, a, .. } => Plan::Mttkrp(
                MttkrpPlan::build(&self.sparse[0], *mode, self.ext(*a), procs)
                    .map_err(input_err)?,
            ),
        })
    }

    /// Rows `lo..hi` of dense operand `k` (its first index cut into rows of `width`): the dense
    /// generator's values at those storage indices, so a dense run of the same einsum and seed
    /// sees the same operand.
    fn dense_rows(&self, k: usize, lo: usize, hi: usize, width: usize) -> Vec<f64> {
        if let Some(Some(d)) = self.dense.get(k) {
            return d[lo * width..hi * width].to_vec();
        }
        (lo * width..hi * width)
            .map(|x| seeded_value(self.seed, k, x as u64))
            .collect()
    }

    /// Element `x` (row-major storage index) of dense operand `k`: from its file, or generated.
    fn dense_value(&self, k: usize, x: u64) -> f64 {
        match self.dense.get(k) {
            Some(Some(d)) => d[x as usize],
            _ => seeded_value(self.seed, k, x),
        }
    }

    /// Multiply-adds (terms) counted from the nonzeros: nonzeros times the extents of the
    /// indices outside the sparse operand (SpGEMM: per nonzero of A, the nonzeros of its row
    /// of B); per rank, and the dense evaluation's for comparison.
    fn terms(&self, plan: &Plan) -> (Vec<u64>, f64) {
        let dense = deinsum_exec::reference::iteration_space(&self.einsum);
        let per_rank = match (plan, &self.form) {
            (Plan::Spgemm(p), _) => p.madds.iter().map(|&m| m as u64).collect(),
            (_, Form::Mttkrp { a, .. }) => plan
                .nnz()
                .iter()
                .map(|&n| (n * self.ext(*a)) as u64)
                .collect(),
            (_, Form::Spmm { rest, .. } | Form::Sddmm { rest, .. }) => {
                let w = self.width(rest);
                plan.nnz().iter().map(|&n| (n * w) as u64).collect()
            }
            _ => Vec::new(),
        };
        (per_rank, dense)
    }
}

/// What one rank returns: its output payload (dense rows, pattern values, or (row, column,
/// value) triples for SpGEMM), its measured (received, sent) bytes in the first run, and its
/// seconds per run.
struct RankOut {
    payload: Vec<f64>,
    received: u64,
    sent: u64,
    secs: Vec<f64>,
}

/// One rank's part of the run, on any backend: cuts its blocks, then runs the distributed
/// kernel `repeat` times (communication on the rank's thread, the kernel on its pool).
fn rank_body<C: Communicator>(
    comm: &C,
    job: &Job,
    plan: &Plan,
    threads: usize,
    repeat: usize,
) -> Result<RankOut, SparseError> {
    let me = comm.rank();
    let pool = deinsum_runtime::PoolBuilder::new(move |i| format!("deinsum-rank-{me}-worker-{i}"))
        .threads(threads)
        .build()
        .map_err(|e| SparseError::Shape(format!("thread pool: {e}")))?;
    // The inspector's local part, built before the clock starts.
    enum Local {
        Spmm(halo::LocalRows<f64>, Vec<f64>),
        Fine(FineLocal<f64>, Vec<f64>),
        Sddmm(Csr<f64>, Vec<f64>, Vec<f64>),
        Spgemm(Csr<f64>, Csr<f64>),
        Mttkrp(deinsum_sparse::kernels::ModeGroups<f64>, Vec<Vec<f64>>),
    }
    let local = match (&job.form, plan) {
        (Form::Spmm { rest, .. }, Plan::Halo(p, _)) => {
            let a = job.csr(0).map_err(|e| SparseError::Shape(e.to_string()))?;
            let (lo, hi) = (p.b_cuts()[me], p.b_cuts()[me + 1]);
            let w = job.width(rest);
            Local::Spmm(
                halo::LocalRows::build(p, me, &a.rows(p.a_cuts[me], p.a_cuts[me + 1]))?,
                job.dense_rows(1, lo, hi, w),
            )
        }
        (Form::Spmm { rest, .. }, Plan::Fine(p, _)) => {
            let a = job.csr(0).map_err(|e| SparseError::Shape(e.to_string()))?;
            let (lo, hi) = (p.cuts[me], p.cuts[me + 1]);
            Local::Fine(
                FineLocal::build(p, me, a)?,
                job.dense_rows(1, lo, hi, job.width(rest)),
            )
        }
        (Form::Sddmm { rest, .. }, Plan::Halo(p, _)) => {
            let s = job.csr(0).map_err(|e| SparseError::Shape(e.to_string()))?;
            let w = job.width(rest);
            let (lo, hi) = (p.a_cuts[me], p.a_cuts[me + 1]);
            let (vlo, vhi) = (p.b_cuts()[me], p.b_cuts()[me + 1]);
            Local::Sddmm(
                s.rows(lo, hi),
                job.dense_rows(1, lo, hi, w),
                job.dense_rows(2, vlo, vhi, w),
            )
        }
        (Form::Spgemm, Plan::Spgemm(p)) => {
            let csr = |k| job.csr(k).map_err(|e| SparseError::Shape(e.to_string()));
            let (a, b) = (csr(0)?, csr(1)?);
            let f = &p.fetch;
            Local::Spgemm(
                a.rows(p.a_cuts[me], p.a_cuts[me + 1]),
                b.rows(f.cuts[me], f.cuts[me + 1]),
            )
        }
        (Form::Mttkrp { factor, .. }, Plan::Mttkrp(p)) => {
            let groups = p.local_part(&job.sparse[0], me)?;
            let fs = factor
                .iter()
                .enumerate()
                .map(|(m, op)| match op {
                    Some(k) => job.dense_rows(*k, p.cuts[m][me], p.cuts[m][me + 1], p.r),
                    None => Vec::new(),
                })
                .collect();
            Local::Mttkrp(groups, fs)
        }
        _ => return Err(SparseError::Shape("plan and einsum disagree".into())),
    };
    let mut secs = Vec::with_capacity(repeat);
    let (mut received, mut sent, mut payload) = (0, 0, Vec::new());
    for rep in 0..repeat {
        comm.barrier()?;
        let before = comm.traffic();
        let t0 = std::time::Instant::now();
        let out = match (&local, plan) {
            (Local::Spmm(a, b), Plan::Halo(p, _)) => halo::spmm_local(comm, p, a, b, Some(&pool))?,
            (Local::Fine(a, x), Plan::Fine(p, _)) => fine::spmv_local(comm, p, a, x, Some(&pool))?,
            (Local::Sddmm(s, u, v), Plan::Halo(p, _)) => {
                let vx = halo::exchange_halo(comm, p, s, v)?;
                let l = halo::localize(p, me, s)?;
                pool.install(|| kernels::sddmm(&l, u, &vx, p.k))?
            }
            (Local::Spgemm(a, b), Plan::Spgemm(p)) => {
                let bx = p.fetch.exchange_csr(comm, b)?;
                let l = p.fetch.localize(me, a)?;
                let c = pool.install(|| kernels::spgemm(&l, &bx))?;
                let row0 = p.a_cuts[me];
                let mut t = Vec::with_capacity(3 * c.nnz());
                for i in 0..c.nrows {
                    for q in c.indptr[i]..c.indptr[i + 1] {
                        t.extend([(row0 + i) as f64, c.indices[q] as f64, c.vals[q]]);
                    }
                }
                t
            }
            (Local::Mttkrp(g, fs), Plan::Mttkrp(p)) => {
                let views: Vec<&[f64]> = fs.iter().map(Vec::as_slice).collect();
                let fetched = dist::fetch_factors(comm, p, &views)?;
                let fv: Vec<&[f64]> = fetched.iter().map(Vec::as_slice).collect();
                let partial = pool.install(|| kernels::mttkrp_grouped(g, &fv, p.r))?;
                dist::reduce_partial(comm, p, partial)?
            }
            _ => return Err(SparseError::Shape("plan and einsum disagree".into())),
        };
        secs.push(t0.elapsed().as_secs_f64());
        if rep == 0 {
            let after = comm.traffic();
            received = after.received - before.received;
            sent = after.sent - before.sent;
            payload = out;
        }
    }
    Ok(RankOut {
        payload,
        received,
        sent,
        secs,
    })
}

/// Runs a sparse einsum; see the module doc.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.plan.is_some() || args.mem.is_some() {
        return Err(not_built("--plan or --mem with a sparse operand"));
    }
    if args.dtype == Dtype::F32 {
        return Err(not_built("--dtype f32"));
    }
    if args.repeat == 0 {
        return Err(InputError("--repeat must be at least 1".into()).into());
    }
    if args.threads == Some(0) {
        return Err(InputError("--threads must be at least 1".into()).into());
    }
    let expr = args.expr.as_deref().context("an einsum is required")?;
    let job = job_of(expr, args)?;
    if let Some(out) = &args.output {
        super::inputs::check_output_path(out)?;
        super::inputs::check_output(out, &input_files(args))?;
        check_output_format(&job, out)?;
    }
    let mpi = match args.backend {
        Some(Backend::Mpi) => true,
        Some(_) => false,
        None => super::launch_size().is_some(),
    };
    if mpi {
        return run_mpi(&job, args, expr);
    }
    let procs = args.procs.unwrap_or(1);
    if procs == 0 {
        return Err(InputError("--procs must be at least 1".into()).into());
    }
    deinsum_exec::preflight::check_in_process_ranks(procs)
        .map_err(|e| InputError(e.to_string()))?;
    let plan = job.plan(procs)?;
    let cores = deinsum_runtime::cores();
    let threads = args.threads.unwrap_or((cores / procs).max(1));
    let world = InProcess::new(procs).map_err(|e| anyhow::anyhow!("{e}"))?;
    let outs = world
        .run(|comm| rank_body(comm, &job, &plan, threads, args.repeat))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    finish(args, expr, &job, &plan, outs, "in-process")
}

#[cfg(feature = "mpi")]
fn run_mpi(job: &Job, args: &Args, expr: &str) -> anyhow::Result<ExitCode> {
    let universe = mpi::initialize().context("MPI initialization failed")?;
    let comm = deinsum_exec::mpi::MpiComm::world(&universe);
    let procs = args.procs.unwrap_or(comm.size());
    if procs != comm.size() {
        return Err(InputError(format!(
            "--procs {procs} but the MPI world has {} ranks",
            comm.size()
        ))
        .into());
    }
    // Every rank read or generated the same pattern, so every rank builds the same plan.
    let plan = job.plan(procs)?;
    let threads = args.threads.or_else(super::run::omp_threads).unwrap_or(1);
    let mine = comm.or_abort(rank_body(&comm, job, &plan, threads, args.repeat));
    // Gather every rank's figures and payload on rank 0 (after the measured runs).
    let p = comm.size();
    let me = comm.rank();
    let mut sizes = vec![0u64; 3 * p];
    sizes[3 * me] = mine.payload.len() as u64;
    sizes[3 * me + 1] = mine.received;
    sizes[3 * me + 2] = mine.sent;
    comm.or_abort(comm.all_reduce_max_u64(&mut sizes));
    let counts: Vec<usize> = (0..p).map(|r| sizes[3 * r] as usize).collect();
    let payloads = comm.or_abort(comm.gather_v(&mine.payload, &counts, 0));
    let secs_counts = vec![args.repeat; p];
    let secs = comm.or_abort(comm.gather_v(&mine.secs, &secs_counts, 0));
    let (Some(payloads), Some(secs)) = (payloads, secs) else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut outs = Vec::with_capacity(p);
    let (mut off, mut soff) = (0, 0);
    for r in 0..p {
        outs.push(RankOut {
            payload: payloads[off..off + counts[r]].to_vec(),
            received: sizes[3 * r + 1],
            sent: sizes[3 * r + 2],
            secs: secs[soff..soff + args.repeat].to_vec(),
        });
        off += counts[r];
        soff += args.repeat;
    }
    finish(args, expr, job, &plan, outs, "MPI")
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_job: &Job, _args: &Args, _expr: &str) -> anyhow::Result<ExitCode> {
    Err(InputError(
        "a sparse run under MPI needs a build with the `mpi` feature (cargo build --features mpi)"
            .into(),
    )
    .into())
}

/// The einsum and the sparse operands. A sparse file's shape gives the extents of its
/// operand's indices that no `--sizes` entry names; the other extents come from the flags
/// (default 10, as for `run`). `--rmat S` without extent flags makes every extent 2^S.
fn job_of(expr: &str, args: &Args) -> anyhow::Result<Job> {
    let x = &args.extents;
    let no_flags = x.sizes.is_none() && x.size.is_none() && x.shapes.is_none();
    let probe = super::einsum_from_args(expr, &super::ExtentArgs::default())?;
    let set = sparse_set(args, probe.num_inputs())?;
    let files = input_files(args);
    let mut ext = x.clone();
    let mut read: Vec<Option<ReadFile>> = vec![None; probe.num_inputs()];
    let named = |c: Index| {
        x.sizes.as_deref().is_some_and(|s| {
            s.split(',')
                .any(|kv| kv.trim().starts_with(&format!("{c}=")))
        })
    };
    let mut sizes: Vec<String> = x.sizes.iter().cloned().collect();
    let mut npy: Vec<Option<PathBuf>> = vec![None; probe.num_inputs()];
    // Sparse files first: their shapes give the extents before the dense files' headers do,
    // so a dense file that disagrees is the one named.
    let by_kind = files
        .iter()
        .enumerate()
        .filter(|(_, p)| io::is_sparse_file(p))
        .chain(
            files
                .iter()
                .enumerate()
                .filter(|(_, p)| !io::is_sparse_file(p)),
        );
    for (k, p) in by_kind {
        let idx: Vec<Index> = probe.inputs()[k].indices.clone();
        let shape = if io::is_sparse_file(p) {
            let t = io::read::<f64>(p, None).map_err(input_err)?;
            let shape = t.shape().to_vec();
            read[k] = Some((p.clone(), t));
            shape
        } else {
            // A dense operand's .npy: its header's shape (checked against the einsum's
            // extents below, before anything is read).
            let shape = super::inputs::header_of(p)?.shape;
            npy[k] = Some(p.clone());
            shape
        };
        if idx.len() != shape.len() || probe.inputs()[k].dims.len() != idx.len() {
            return Err(InputError(format!(
                "{} has {} modes but operand {k} has {} indices",
                p.display(),
                shape.len(),
                probe.inputs()[k].dims.len()
            ))
            .into());
        }
        for (c, n) in idx.iter().zip(&shape) {
            let given = format!("{c}=");
            if !named(*c)
                && !sizes
                    .iter()
                    .any(|s| s.split(',').any(|kv| kv.starts_with(&given)))
            {
                sizes.push(format!("{c}={n}"));
            }
        }
    }
    if !files.is_empty() {
        ext.sizes = Some(sizes.join(","));
        if ext.size.is_none() && ext.shapes.is_none() {
            ext.size = Some(match args.rmat {
                Some(s) => 1usize.checked_shl(s).unwrap_or(0).to_string(),
                None => super::DEFAULT_SIZE.to_string(),
            });
        }
    } else if let (Some(s), true) = (args.rmat, no_flags) {
        ext.size = Some(1usize.checked_shl(s).unwrap_or(0).to_string());
    }
    let einsum = super::einsum_from_args(expr, &ext)?;
    let form = form_of(&einsum, &set)?;
    let mut sparse = Vec::with_capacity(set.len());
    for &k in &set {
        let shape: Vec<usize> = einsum.inputs()[k]
            .indices
            .iter()
            .map(|&c| einsum.extent(c))
            .collect();
        sparse.push(sparse_operand(args, k, &shape, read[k].take())?);
    }
    // The dense files: shape and dtype checked against the operand (an error names the file,
    // the shape expected and the one found), then read whole (f64, as numpy's astype).
    let mut dense = vec![None; einsum.num_inputs()];
    for (k, p) in npy.iter().enumerate() {
        let Some(p) = p else { continue };
        let op = &einsum.inputs()[k];
        deinsum_exec::npy::check_operand_file::<f64>(p, op, einsum.extents())
            .map_err(|e| InputError(e.to_string()))?;
        let shape: Vec<usize> = op.indices.iter().map(|&c| einsum.extent(c)).collect();
        let full = deinsum_plan::Block::full(&shape);
        let d = deinsum_exec::npy::read_operand_block::<f64>(p, op, einsum.extents(), &full)
            .map_err(|e| InputError(e.to_string()))?;
        dense[k] = Some(d);
    }
    let csr = sparse
        .iter()
        .map(|t| (t.order() == 2).then(|| t.to_csr()).transpose())
        .collect::<Result<_, _>>()
        .map_err(input_err)?;
    Ok(Job {
        form,
        einsum,
        sparse,
        csr,
        seed: args.seed,
        scheme: args.spmv_scheme,
        dense,
    })
}

/// The output of the run, in the form the check compares: dense for SpMM and MTTKRP, the
/// values at the pattern for SDDMM, (row, column, value) triples in row-major order for SpGEMM.
fn assemble(outs: &[RankOut]) -> Vec<f64> {
    outs.iter()
        .flat_map(|o| o.payload.iter().copied())
        .collect()
}

/// The reference of `--check` in the same form as [`assemble`], and what it is.
fn reference(job: &Job) -> anyhow::Result<(Vec<f64>, &'static str)> {
    let small = deinsum_exec::reference::iteration_space(&job.einsum) <= DENSE_CHECK_POINTS;
    if small {
        // The sparse operands densified, the dense ones generated: the naive einsum.
        let dense: Vec<Vec<f64>> = job.sparse.iter().map(SparseTensor::to_dense).collect();
        let sparse_k: Vec<usize> = match job.form {
            Form::Spgemm => vec![0, 1],
            _ => vec![0],
        };
        let full = deinsum_exec::reference::naive(&job.einsum, &|k, x| match sparse_k
            .iter()
            .position(|&s| s == k)
        {
            Some(p) => dense[p][x as usize],
            None => job.dense_value(k, x),
        });
        let out = match &job.form {
            Form::Sddmm { j, .. } => {
                let s = &job.sparse[0];
                let n = job.ext(*j);
                (0..s.nnz())
                    .map(|e| full[s.coord(e)[0] * n + s.coord(e)[1]])
                    .collect()
            }
            Form::Spgemm => {
                // The serial product's pattern, its values read from the dense result.
                let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
                let mut t = Vec::with_capacity(3 * c.nnz());
                for i in 0..c.nrows {
                    for q in c.indptr[i]..c.indptr[i + 1] {
                        let col = c.indices[q];
                        t.extend([i as f64, col as f64, full[i * c.ncols + col]]);
                    }
                }
                t
            }
            _ => full,
        };
        return Ok((out, "the dense serial einsum (sparse operands densified)"));
    }
    let what = "the serial sparse kernel (the dense reference is too large)";
    let gen = |k: usize, n: usize| -> Vec<f64> { job.dense_rows(k, 0, n, 1) };
    let out = match &job.form {
        Form::Spmm { j, rest, .. } => {
            let w = job.width(rest);
            kernels::spmm(job.csr(0)?, &gen(1, job.ext(*j) * w), w)?
        }
        Form::Sddmm { i, j, rest } => {
            let w = job.width(rest);
            kernels::sddmm(
                job.csr(0)?,
                &gen(1, job.ext(*i) * w),
                &gen(2, job.ext(*j) * w),
                w,
            )?
        }
        Form::Spgemm => {
            let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
            let mut t = Vec::with_capacity(3 * c.nnz());
            for i in 0..c.nrows {
                for q in c.indptr[i]..c.indptr[i + 1] {
                    t.extend([i as f64, c.indices[q] as f64, c.vals[q]]);
                }
            }
            t
        }
        Form::Mttkrp {
            modes,
            a,
            mode,
            factor,
        } => {
            let r = job.ext(*a);
            let fs: Vec<Vec<f64>> = factor
                .iter()
                .enumerate()
                .map(|(m, op)| op.map_or(Vec::new(), |k| gen(k, job.ext(modes[m]) * r)))
                .collect();
            let views: Vec<&[f64]> = fs.iter().map(Vec::as_slice).collect();
            kernels::mttkrp(&job.sparse[0], &views, *mode, r)?
        }
    };
    Ok((out, what))
}

impl Form {
    /// Whether the result is sparse: SDDMM's in its operand's pattern, SpGEMM's.
    fn sparse_result(&self) -> bool {
        matches!(self, Form::Sddmm { .. } | Form::Spgemm)
    }
}

impl Job {
    /// The result's extents.
    fn output_shape(&self) -> Vec<usize> {
        self.einsum.output().iter().map(|&c| self.ext(c)).collect()
    }
}

/// Refuses, before the run, an `--output` the result cannot be written to (exit 2): an
/// extension naming no format, a matrix format (`.mtx`, `.npz`) for a result of another order,
/// or a sparse result to `.npy` whose dense array exceeds this node's available memory (the
/// array a reader such as `numpy.load` would have to hold).
fn check_output_format(job: &Job, out: &std::path::Path) -> anyhow::Result<()> {
    let named = |e: SparseError| -> anyhow::Error { InputError(format!("--output {e}")).into() };
    let format = io::OutputFormat::of(out).map_err(named)?;
    let shape = job.output_shape();
    format.check_order(out, shape.len()).map_err(named)?;
    if format != io::OutputFormat::Npy || !job.form.sparse_result() {
        return Ok(());
    }
    let avail = deinsum_exec::preflight::available_memory();
    let bytes = io::dense_bytes(&shape);
    if let (Some(b), Some(a)) = (bytes, avail) {
        if b <= a {
            return Ok(());
        }
    } else if bytes.is_some() {
        // The node's memory is unknown: write it.
        return Ok(());
    }
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let size = bytes.map_or("more than 2^64".into(), |b| b.to_string());
    let avail = avail.map_or(String::new(), |a| {
        format!(", more than this node's available memory ({a} bytes)")
    });
    Err(InputError(format!(
        "--output {}: the {} result is sparse; densified as .npy it is {} x float64 = {size} bytes{avail}; name a .mtx, .npz or .tns file to write its stored entries",
        out.display(),
        job.form.name(),
        dims.join(" x "),
    ))
    .into())
}

/// Writes the result to `path` in the format its extension names (checked before the run by
/// [`check_output_format`]); a failed write names the file (exit 2).
fn write_output(job: &Job, outs: &[RankOut], path: &std::path::Path) -> anyhow::Result<()> {
    let shape = job.output_shape();
    let payload = assemble(outs);
    let named = |e: SparseError| -> anyhow::Error { InputError(format!("--output {e}")).into() };
    let result = match &job.form {
        // The values in the pattern's order, each rank's rows in turn.
        Form::Sddmm { .. } => job.sparse[0].with_values(payload),
        Form::Spgemm => {
            let (mut coords, mut vals) = (Vec::new(), Vec::new());
            for t in payload.chunks(3) {
                coords.extend([t[0] as usize, t[1] as usize]);
                vals.push(t[2]);
            }
            SparseTensor::from_entries(shape, coords, vals)
        }
        // A dense result (SpMM, SpMV, MTTKRP): the ranks' rows concatenate in the output's
        // row-major order.
        _ if io::OutputFormat::of(path).map_err(named)? == io::OutputFormat::Npy => {
            let mut bytes = deinsum_exec::npy::header_bytes::<f64>(&shape);
            for v in &payload {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            return std::fs::write(path, bytes)
                .map_err(|e| InputError(format!("--output {}: {e}", path.display())).into());
        }
        _ => SparseTensor::from_dense(shape, &payload),
    }
    .map_err(named)?;
    io::write(path, &result).map_err(named)
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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

/// Checks, then prints the report; exit 1 when a rank moved other words than planned or the
/// check failed.
fn finish(
    args: &Args,
    expr: &str,
    job: &Job,
    plan: &Plan,
    outs: Vec<RankOut>,
    backend: &str,
) -> anyhow::Result<ExitCode> {
    let procs = plan.procs();
    let predicted: Vec<(u64, u64)> = (0..procs).map(|r| plan.bytes(r)).collect();
    let measured: Vec<(u64, u64)> = outs.iter().map(|o| (o.received, o.sent)).collect();
    let exact = predicted == measured;
    let words = |b: u64| b / 8;
    let pred_max = predicted.iter().map(|p| words(p.0)).max().unwrap_or(0);
    let pred_total: u64 = predicted.iter().map(|p| words(p.0)).sum();
    let meas_total: u64 = measured.iter().map(|m| words(m.0)).sum();
    let repl: Vec<u64> = (0..procs).map(|r| plan.replication_words(r)).collect();
    let (repl_max, repl_total) = (
        repl.iter().copied().max().unwrap_or(0),
        repl.iter().sum::<u64>(),
    );
    // Per repetition, the slowest rank; the median over repetitions.
    let secs = median(
        (0..args.repeat)
            .map(|x| outs.iter().map(|o| o.secs[x]).fold(0.0, f64::max))
            .collect(),
    );
    let check = if args.check {
        let got = assemble(&outs);
        let (want, what) = reference(job)?;
        let same_pattern = match job.form {
            // Triples: the row and column entries must agree exactly.
            Form::Spgemm => {
                got.len() == want.len()
                    && got
                        .chunks(3)
                        .zip(want.chunks(3))
                        .all(|(g, w)| g[0] == w[0] && g[1] == w[1])
            }
            _ => got.len() == want.len(),
        };
        let (abs, rel) = if same_pattern {
            deinsum_exec::reference::max_error(&got, &want)
        } else {
            (f64::INFINITY, f64::INFINITY)
        };
        Some((abs, rel, what))
    } else {
        None
    };
    let ok = exact && check.is_none_or(|(_, rel, _)| rel <= 1e-10);
    if let Some(path) = &args.output {
        write_output(job, &outs, path)?;
    }
    let (terms, dense_terms) = job.terms(plan);
    let n_ops = job.einsum.num_inputs() as u64;
    let flops_total: u64 = terms.iter().sum::<u64>() * n_ops;
    let flops_max = terms.iter().copied().max().unwrap_or(0) * n_ops;
    let dense_flops = dense_terms * n_ops as f64;
    let out_nnz = match job.form {
        Form::Sddmm { .. } => Some(job.sparse[0].nnz()),
        Form::Spgemm => Some(outs.iter().map(|o| o.payload.len() / 3).sum()),
        _ => None,
    };
    let operands: Vec<serde_json::Value> = job
        .sparse
        .iter()
        .map(|t| {
            let size: f64 = t.shape().iter().map(|&n| n as f64).product();
            json!({"shape": t.shape(), "nnz": t.nnz(), "density": t.nnz() as f64 / size})
        })
        .collect();
    let sparse_k: Vec<usize> = match job.form {
        Form::Spgemm => vec![0, 1],
        _ => vec![0],
    };
    let work_imbalance = match plan {
        Plan::Spgemm(p) => Some(p.work_imbalance()),
        Plan::Fine(p, _) => Some(p.work_imbalance()),
        _ => None,
    };
    let fine_grain = matches!(plan, Plan::Fine(..));
    let fetched = match job.form {
        Form::Spmm { .. } if fine_grain => {
            "the rows of B its row-side nonzeros touch, and the partial rows of C its column-side nonzeros give other ranks"
        }
        Form::Spmm { .. } => "the rows of B its nonzeros touch",
        Form::Sddmm { .. } => "the rows of V its nonzeros touch (U's rows are its own)",
        Form::Spgemm => "the rows of B its columns touch (length, columns and values)",
        Form::Mttkrp { .. } if matches!(plan, Plan::Mttkrp(p) if !p.splits.is_empty()) => {
            "the factor rows its nonzeros touch, per mode, and the partial output rows of its slab's other ranks"
        }
        Form::Mttkrp { .. } => "the factor rows its nonzeros touch, per mode",
    };
    let partition = match (&job.form, plan) {
        (_, Plan::Mttkrp(p)) => mttkrp_partition(p),
        (Form::Spgemm, _) => "rows of A cut by multiply-adds".into(),
        _ if fine_grain => "fine-grain: each cross nonzero at its row's owner (fetching x) or its column's (pushing a partial y), by a minimum vertex cover; vertices (rows of B and C) cut into blocks, the work balanced by shifting nonzeros both ends reach".into(),
        _ => "rows cut by nonzeros".into(),
    };
    let grid = match plan {
        Plan::Mttkrp(p) => Some(json!({
            "parts_per_mode": p.grid,
            "splits": p.splits,
            "reduction_words": (0..procs).map(|r| p.reduction_words(r)).sum::<u64>(),
            "chosen_by": format!("among the grids with nonzero imbalance within {}x the least, the fewest words (factor halos and reduction) received and sent by the busiest rank (within {}% a tie), then the fewest received in all, then the 1D cut", dist::IMBALANCE_SLACK, 100.0 * dist::MAX_WORDS_TIE),
            "max_words": p.max_words(),
            "considered": p.considered.iter().map(|g| json!({
                "slabs": g.slabs, "splits": g.splits, "words": g.words,
                "max_words": g.max_words, "imbalance": g.imbalance,
            })).collect::<Vec<_>>(),
        })),
        _ => None,
    };
    let scheme = plan.choice().map(|c| {
        let side = |(total, max, imb): (u64, u64, f64)| {
            json!({"total": total, "max_per_rank": max, "imbalance": imb})
        };
        json!({"in_use": if fine_grain { "fine" } else { "rows" }, "chosen_by": c.by,
               "rows": side(c.rows), "fine": side(c.fine),
               "replication_total": repl_total})
    });
    match args.format {
        Format::Json => {
            let v = json!({
                "expression": expr, "kernel": job.form.name(), "procs": procs,
                "backend": backend, "sparse_operands": sparse_k, "operands": operands,
                "shape": job.sparse[0].shape(), "nnz": job.sparse[0].nnz(),
                "output_nnz": out_nnz,
                "partition": partition,
                "imbalance": plan.imbalance(), "work_imbalance": work_imbalance,
                "grid": grid,
                "nnz_per_rank": plan.nnz(),
                "scheme": scheme,
                "predicted": {"max_per_rank": pred_max, "total": pred_total,
                              "received": predicted.iter().map(|p| words(p.0)).collect::<Vec<_>>()},
                "replication": {"max_per_rank": repl_max, "total": repl_total},
                "measured": {"total": meas_total, "exact": exact,
                             "received": measured.iter().map(|m| words(m.0)).collect::<Vec<_>>()},
                "cost": {"terms_per_rank": terms, "flops_total": flops_total,
                         "flops_max_per_rank": flops_max, "dense_flops": dense_flops},
                "seconds": secs,
                "check": check.map(|(abs, rel, what)| json!({"max_abs_error": abs, "max_rel_error": rel, "reference": what})),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Text => {
            let ops: Vec<String> = job
                .sparse
                .iter()
                .zip(&sparse_k)
                .map(|(t, k)| {
                    let size: f64 = t.shape().iter().map(|&n| n as f64).product();
                    let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
                    format!(
                        "operand {k} is {} sparse ({} nonzeros, density {:.2e})",
                        dims.join(" x "),
                        t.nnz(),
                        t.nnz() as f64 / size
                    )
                })
                .collect();
            let dense_desc = match &job.form {
                Form::Spmm { j, rest, .. } => {
                    format!(", B is {} x {}", job.ext(*j), job.width(rest))
                }
                _ => String::new(),
            };
            println!(
                "sparse {expr} ({}): {}{dense_desc}, P = {procs} ({backend})",
                job.form.name(),
                ops.join(", ")
            );
            let work = match plan {
                Plan::Fine(..) => format!("work (nonzeros + {VERTEX_WORK} per vertex)"),
                _ => "multiply-adds".to_string(),
            };
            let wi = work_imbalance.map_or(String::new(), |w| format!(", {work} {w:.3}"));
            println!(
                "{partition}: imbalance {:.3} (max nonzeros per rank over the mean){wi}",
                plan.imbalance()
            );
            if let Some(n) = out_nnz {
                println!("output: sparse, {n} stored entries");
            }
            if let Some(c) = plan.choice() {
                let pct = |w: u64| {
                    if repl_total > 0 {
                        100.0 * w as f64 / repl_total as f64
                    } else {
                        0.0
                    }
                };
                println!(
                    "scheme: {} ({}); the row cut moves {} words in all ({:.1}% of replicating B, max {} per rank, imbalance {:.3}), the fine-grain {} ({:.1}%, max {} per rank, imbalance {:.3})",
                    if fine_grain { "fine-grain" } else { "row cut" },
                    c.by,
                    c.rows.0,
                    pct(c.rows.0),
                    c.rows.1,
                    c.rows.2,
                    c.fine.0,
                    pct(c.fine.0),
                    c.fine.1,
                    c.fine.2
                );
            }
            println!(
                "cost from nonzeros: {flops_total} flops in all, {flops_max} on the busiest rank; the dense einsum would do {dense_flops:.3e}"
            );
            let pct = if repl_total > 0 {
                100.0 * pred_total as f64 / repl_total as f64
            } else {
                0.0
            };
            println!(
                "fetch ({fetched}): busiest rank receives {pred_max} words, {pred_total} in all; replicating would move {repl_max} per rank, {repl_total} in all ({pct:.1}% of it)"
            );
            if exact {
                println!("measured: every rank received and sent exactly the planned words ({meas_total} in all)");
            } else {
                println!("measured: MISMATCH against the plan: {measured:?} (bytes received, sent), planned {predicted:?}");
            }
            println!(
                "time: {secs:.6} s (slowest rank, median of {})",
                args.repeat
            );
            if let Some((abs, rel, what)) = check {
                let verdict = if rel <= 1e-10 { "ok" } else { "FAILED" };
                println!("check against {what}: {verdict} (max abs error {abs:.3e}, max rel error {rel:.3e})");
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
