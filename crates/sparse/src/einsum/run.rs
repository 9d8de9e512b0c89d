//! The per-rank run of a sparse einsum (generic over the communicator and the element type),
//! the gathering of the ranks' outcomes, and the report of a run.

use super::{Form, Planned, SparseJob};
use crate::dist::{self, MttkrpPlan, SpgemmPlan};
use crate::fine::{self, FineLocal};
use crate::halo::{self, HaloPlan};
use crate::kernels::{self, ModeGroups};
use crate::{Csr, SparseError, SparseTensor};
use deinsum_exec::{Communicator, Scalar};

/// How a rank runs: threads of its pool, timed runs, untimed runs before them.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Threads of the rank's pool (at least 1).
    pub threads: usize,
    /// Timed runs (at least 1).
    pub repeat: usize,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: 1,
            repeat: 1,
            warmup: 0,
        }
    }
}

/// What one rank returns: its part of the output (dense rows, pattern values, or SpGEMM's
/// entries with their (row, column) pairs in `coords`), its measured bytes in the first timed
/// run, and its seconds per timed run.
#[derive(Clone, Debug, Default)]
pub struct RankOutcome<T> {
    /// Output values, in the output's order.
    pub values: Vec<T>,
    /// SpGEMM: (row, column) of each value, row-major; empty for the other kernels.
    pub coords: Vec<usize>,
    /// Bytes received in the first timed run.
    pub received: u64,
    /// Bytes sent in the first timed run.
    pub sent: u64,
    /// Seconds of each timed run.
    pub secs: Vec<f64>,
}

/// The inspector's local part of a rank, built before the clock starts.
enum Local<T> {
    Spmm(halo::LocalRows<T>, Vec<T>),
    Fine(FineLocal<T>, Vec<T>),
    Sddmm(Csr<T>, Vec<T>, Vec<T>),
    Spgemm(Csr<T>, Csr<T>),
    Mttkrp(ModeGroups<T>, Vec<Vec<T>>),
}

fn disagree() -> SparseError {
    SparseError::Shape("plan and einsum disagree".into())
}

/// Rank `me`'s blocks of the operands for `plan`.
fn local_part<T: Scalar>(
    job: &SparseJob<T>,
    plan: &Planned,
    me: usize,
) -> Result<Local<T>, SparseError> {
    Ok(match (&job.form, plan) {
        (Form::Spmm { rest, .. }, Planned::Halo(p, _)) => {
            let a = job.csr(0)?;
            let (lo, hi) = (p.b_cuts()[me], p.b_cuts()[me + 1]);
            Local::Spmm(
                halo::LocalRows::build(p, me, &a.rows(p.a_cuts[me], p.a_cuts[me + 1]))?,
                job.dense_rows(1, lo, hi, job.width(rest)),
            )
        }
        (Form::Spmm { rest, .. }, Planned::Fine(p, _)) => {
            let (lo, hi) = (p.cuts[me], p.cuts[me + 1]);
            Local::Fine(
                FineLocal::build(p, me, job.csr(0)?)?,
                job.dense_rows(1, lo, hi, job.width(rest)),
            )
        }
        (Form::Sddmm { rest, .. }, Planned::Halo(p, _)) => {
            let w = job.width(rest);
            let (lo, hi) = (p.a_cuts[me], p.a_cuts[me + 1]);
            let (vlo, vhi) = (p.b_cuts()[me], p.b_cuts()[me + 1]);
            Local::Sddmm(
                job.csr(0)?.rows(lo, hi),
                job.dense_rows(1, lo, hi, w),
                job.dense_rows(2, vlo, vhi, w),
            )
        }
        (Form::Spgemm, Planned::Spgemm(p)) => {
            let f = &p.fetch;
            Local::Spgemm(
                job.csr(0)?.rows(p.a_cuts[me], p.a_cuts[me + 1]),
                job.csr(1)?.rows(f.cuts[me], f.cuts[me + 1]),
            )
        }
        (Form::Mttkrp { factor, .. }, Planned::Mttkrp(p)) => {
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
        _ => return Err(disagree()),
    })
}

/// One run of the distributed kernel: communication on the calling thread, the kernel on
/// `pool`. Returns the output values and, for SpGEMM, their (row, column) pairs.
fn step<T: Scalar, C: Communicator>(
    comm: &C,
    local: &Local<T>,
    plan: &Planned,
    pool: &rayon::ThreadPool,
) -> Result<(Vec<T>, Vec<usize>), SparseError> {
    Ok(match (local, plan) {
        (Local::Spmm(a, b), Planned::Halo(p, _)) => {
            (halo::spmm_local(comm, p, a, b, Some(pool))?, Vec::new())
        }
        (Local::Fine(a, x), Planned::Fine(p, _)) => {
            (fine::spmv_local(comm, p, a, x, Some(pool))?, Vec::new())
        }
        (Local::Sddmm(s, u, v), Planned::Halo(p, _)) => {
            (sddmm(comm, p, s, u, v, pool)?, Vec::new())
        }
        (Local::Spgemm(a, b), Planned::Spgemm(p)) => spgemm(comm, p, a, b, pool)?,
        (Local::Mttkrp(g, fs), Planned::Mttkrp(p)) => (mttkrp(comm, p, g, fs, pool)?, Vec::new()),
        _ => return Err(disagree()),
    })
}

fn sddmm<T: Scalar, C: Communicator>(
    comm: &C,
    p: &HaloPlan,
    s: &Csr<T>,
    u: &[T],
    v: &[T],
    pool: &rayon::ThreadPool,
) -> Result<Vec<T>, SparseError> {
    let vx = halo::exchange_halo(comm, p, s, v)?;
    let l = halo::localize(p, comm.rank(), s)?;
    pool.install(|| kernels::sddmm(&l, u, &vx, p.k))
}

fn spgemm<T: Scalar, C: Communicator>(
    comm: &C,
    p: &SpgemmPlan,
    a: &Csr<T>,
    b: &Csr<T>,
    pool: &rayon::ThreadPool,
) -> Result<(Vec<T>, Vec<usize>), SparseError> {
    let me = comm.rank();
    let bx = p.fetch.exchange_csr(comm, b)?;
    let l = p.fetch.localize(me, a)?;
    let c = pool.install(|| kernels::spgemm(&l, &bx))?;
    Ok(csr_entries(&c, p.a_cuts[me]))
}

/// The values of `c` and their (row + `row0`, column) pairs, row-major.
fn csr_entries<T: Scalar>(c: &Csr<T>, row0: usize) -> (Vec<T>, Vec<usize>) {
    let mut coords = Vec::with_capacity(2 * c.nnz());
    for i in 0..c.nrows {
        for q in c.indptr[i]..c.indptr[i + 1] {
            coords.extend([row0 + i, c.indices[q]]);
        }
    }
    (c.vals.clone(), coords)
}

fn mttkrp<T: Scalar, C: Communicator>(
    comm: &C,
    p: &MttkrpPlan,
    g: &ModeGroups<T>,
    fs: &[Vec<T>],
    pool: &rayon::ThreadPool,
) -> Result<Vec<T>, SparseError> {
    let views: Vec<&[T]> = fs.iter().map(Vec::as_slice).collect();
    let fetched = dist::fetch_factors(comm, p, &views)?;
    let fv: Vec<&[T]> = fetched.iter().map(Vec::as_slice).collect();
    let partial = pool.install(|| kernels::mttkrp_grouped(g, &fv, p.r))?;
    dist::reduce_partial(comm, p, partial)
}

/// One rank's part of the run of `job` under `plan`, on any communicator (every rank calls
/// it): cuts its blocks, runs the kernel `warmup` times untimed and `repeat` times timed
/// (communication on the rank's thread, the kernel on a pool of `threads`), and returns its
/// output and the bytes it moved in the first timed run.
pub fn run_rank<T: Scalar, C: Communicator>(
    comm: &C,
    job: &SparseJob<T>,
    plan: &Planned,
    opts: &RunOptions,
) -> Result<RankOutcome<T>, SparseError> {
    let me = comm.rank();
    let pool = deinsum_runtime::PoolBuilder::new(move |i| format!("deinsum-rank-{me}-worker-{i}"))
        .threads(opts.threads.max(1))
        .build()
        .map_err(|e| SparseError::Shape(format!("thread pool: {e}")))?;
    let local = local_part(job, plan, me)?;
    for _ in 0..opts.warmup {
        comm.barrier()?;
        step(comm, &local, plan, &pool)?;
    }
    let mut out = RankOutcome {
        secs: Vec::with_capacity(opts.repeat),
        ..RankOutcome::default()
    };
    for rep in 0..opts.repeat.max(1) {
        comm.barrier()?;
        let before = comm.traffic();
        let t0 = std::time::Instant::now();
        let (values, coords) = step(comm, &local, plan, &pool)?;
        out.secs.push(t0.elapsed().as_secs_f64());
        if rep == 0 {
            let after = comm.traffic();
            out.received = after.received - before.received;
            out.sent = after.sent - before.sent;
            out.values = values;
            out.coords = coords;
        }
    }
    Ok(out)
}

/// Every rank's outcome on rank 0 (`None` on the others), after the run: figures by an
/// all-reduce, values, coordinates and seconds by gathers. Every rank calls it.
pub fn gather_outcomes<T: Scalar, C: Communicator>(
    comm: &C,
    mine: RankOutcome<T>,
) -> Result<Option<Vec<RankOutcome<T>>>, SparseError> {
    let (p, me) = (comm.size(), comm.rank());
    let mut sizes = vec![0u64; 5 * p];
    sizes[5 * me..5 * me + 5].copy_from_slice(&[
        mine.values.len() as u64,
        mine.coords.len() as u64,
        mine.received,
        mine.sent,
        mine.secs.len() as u64,
    ]);
    comm.all_reduce_max_u64(&mut sizes)?;
    let count = |f: usize| -> Vec<usize> { (0..p).map(|r| sizes[5 * r + f] as usize).collect() };
    let values = comm.gather_v(&mine.values, &count(0), 0)?;
    // Coordinates travel as f64: exact below 2^53.
    let coords: Vec<f64> = mine.coords.iter().map(|&c| c as f64).collect();
    let coords = comm.gather_v(&coords, &count(1), 0)?;
    let secs = comm.gather_v(&mine.secs, &count(4), 0)?;
    let (Some(values), Some(coords), Some(secs)) = (values, coords, secs) else {
        return Ok(None);
    };
    let (mut v, mut c, mut s) = (values.as_slice(), coords.as_slice(), secs.as_slice());
    let mut outs = Vec::with_capacity(p);
    for r in 0..p {
        let take = |x: &mut &[f64], n: usize| {
            let (head, tail) = x.split_at(n);
            *x = tail;
            head.to_vec()
        };
        let (vh, vt) = v.split_at(count(0)[r]);
        v = vt;
        outs.push(RankOutcome {
            values: vh.to_vec(),
            coords: take(&mut c, count(1)[r])
                .iter()
                .map(|&x| x as usize)
                .collect(),
            received: sizes[5 * r + 2],
            sent: sizes[5 * r + 3],
            secs: take(&mut s, count(4)[r]),
        });
    }
    Ok(Some(outs))
}

/// The result of a sparse einsum.
#[derive(Clone, Debug, PartialEq)]
pub enum SparseOutput<T> {
    /// A dense result (SpMM, SpMV, MTTKRP), row-major over the output's indices.
    Dense {
        /// The output's extents.
        shape: Vec<usize>,
        /// The values.
        data: Vec<T>,
    },
    /// A sparse result: SDDMM's in its operand's pattern, SpGEMM's.
    Sparse(SparseTensor<T>),
}

impl<T: Scalar> SparseOutput<T> {
    /// The dense row-major array (a sparse result densified).
    pub fn to_dense(&self) -> Vec<T> {
        match self {
            SparseOutput::Dense { data, .. } => data.clone(),
            SparseOutput::Sparse(t) => t.to_dense(),
        }
    }
}

/// What rank 0 knows after a run: each rank's predicted and measured bytes, the plan's
/// imbalance, the costs counted from the nonzeros, the timings, and the result.
#[derive(Clone, Debug)]
pub struct SparseReport<T> {
    /// Predicted (received, sent) bytes per rank.
    pub predicted: Vec<(u64, u64)>,
    /// Measured (received, sent) bytes per rank, in the first timed run.
    pub measured: Vec<(u64, u64)>,
    /// Bytes rank `r` would receive with the fetched operand replicated.
    pub replication: Vec<u64>,
    /// Bytes of a reported word ([`SparsePlan::word_bytes`]).
    pub word_bytes: u64,
    /// Multiply-adds per rank counted from the nonzeros.
    pub terms: Vec<u64>,
    /// The dense evaluation's iteration space, for comparison.
    pub dense_terms: f64,
    /// Per timed run, the slowest rank's seconds.
    pub seconds: Vec<f64>,
    /// The result, whole.
    pub output: SparseOutput<T>,
}

impl<T: Scalar> SparseReport<T> {
    /// Assembles the report of `job` run under `plan` from every rank's outcome (rank order).
    pub fn new(
        job: &SparseJob<T>,
        plan: &Planned,
        outs: Vec<RankOutcome<T>>,
    ) -> Result<Self, SparseError> {
        let p = plan.plan();
        let vb = std::mem::size_of::<T>();
        let predicted = (0..p.procs())
            .map(|r| (p.received_bytes(r, vb), p.sent_bytes(r, vb)))
            .collect();
        let measured = outs.iter().map(|o| (o.received, o.sent)).collect();
        let replication = (0..p.procs()).map(|r| p.replication_bytes(r, vb)).collect();
        let reps = outs.iter().map(|o| o.secs.len()).min().unwrap_or(0);
        let seconds = (0..reps)
            .map(|x| outs.iter().map(|o| o.secs[x]).fold(0.0, f64::max))
            .collect();
        let (terms, dense_terms) = job.terms(plan);
        let shape = job.output_shape();
        let output = match &job.form {
            Form::Sddmm { .. } => {
                let vals = outs.into_iter().flat_map(|o| o.values).collect();
                SparseOutput::Sparse(job.sparse[0].with_values(vals)?)
            }
            Form::Spgemm => {
                let (mut coords, mut vals) = (Vec::new(), Vec::new());
                for o in outs {
                    coords.extend(o.coords);
                    vals.extend(o.values);
                }
                SparseOutput::Sparse(SparseTensor::from_entries(shape, coords, vals)?)
            }
            _ => SparseOutput::Dense {
                shape,
                data: outs.into_iter().flat_map(|o| o.values).collect(),
            },
        };
        Ok(SparseReport {
            predicted,
            measured,
            replication,
            word_bytes: p.word_bytes(vb) as u64,
            terms,
            dense_terms,
            seconds,
            output,
        })
    }

    /// Whether every rank moved exactly the predicted bytes.
    pub fn exact(&self) -> bool {
        self.predicted == self.measured
    }

    /// The median over timed runs of the slowest rank's seconds.
    pub fn median_seconds(&self) -> f64 {
        let mut xs = self.seconds.clone();
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied().unwrap_or(0.0)
    }

    /// Bytes as reported words.
    pub fn words(&self, bytes: u64) -> u64 {
        bytes / self.word_bytes.max(1)
    }

    /// The number of stored entries of a sparse result.
    pub fn output_nnz(&self) -> Option<usize> {
        match &self.output {
            SparseOutput::Sparse(t) => Some(t.nnz()),
            SparseOutput::Dense { .. } => None,
        }
    }
}
