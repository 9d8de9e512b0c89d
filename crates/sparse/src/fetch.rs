//! Row fetches planned from a pattern (the inspector half of seed 003's ghost exchange): a
//! matrix, dense or CSR, is distributed over the ranks by contiguous row blocks, and every rank
//! receives exactly the rows its own nonzeros touch that it does not hold. The plan lists those
//! rows, so the words each rank receives and sends are known before anything moves; the
//! exchange moves exactly them, in one point-to-point exchange (dense rows) or one all-to-all
//! of bytes (CSR rows, whose lengths and columns travel with the values).
//!
//! The SpMM, SDDMM, SpGEMM and MTTKRP plans ([`crate::halo`], [`crate::dist`]) are built on it.

use crate::{Csr, SparseError};
use deinsum_exec::{Communicator, Scalar};

/// Bytes of one row length or column index on the wire (a `u64`).
const INDEX_BYTES: usize = 8;

/// A rank, its messages (destination, rows) and its sources (rank, rows from it).
type Packed<T> = (usize, Vec<(usize, Vec<T>)>, Vec<(usize, usize)>);

/// The fetch of one row-distributed matrix: which rows each rank owns and which it receives.
/// Size O(P + halo rows).
#[derive(Clone, Debug, PartialEq)]
pub struct RowFetch {
    /// Number of ranks.
    pub procs: usize,
    /// Rows of the distributed matrix.
    pub rows: usize,
    /// Elements per row of a dense matrix (0 for a CSR matrix, whose rows vary).
    pub width: usize,
    /// Rank r owns rows `cuts[r]..cuts[r + 1]`.
    pub cuts: Vec<usize>,
    /// Per rank, the rows it receives (sorted, none of its own).
    pub need: Vec<Vec<usize>>,
}

impl RowFetch {
    /// Plans the fetch of a `rows x width` matrix cut at `cuts` (P + 1 nondecreasing points
    /// from 0 to `rows`) for ranks that touch the rows `touched(r)` (any order, repeats and
    /// own rows allowed: they are dropped here).
    pub fn build<I: IntoIterator<Item = usize>>(
        rows: usize,
        width: usize,
        cuts: Vec<usize>,
        touched: impl Fn(usize) -> I,
    ) -> Result<RowFetch, SparseError> {
        let procs = cuts.len().saturating_sub(1);
        if procs == 0 || cuts[0] != 0 || cuts[procs] != rows || cuts.windows(2).any(|w| w[0] > w[1])
        {
            return Err(SparseError::Shape(format!(
                "row cuts {cuts:?} do not cover {rows} rows"
            )));
        }
        let mut seen = vec![usize::MAX; rows];
        let mut need = Vec::with_capacity(procs);
        for r in 0..procs {
            let own = cuts[r]..cuts[r + 1];
            let mut mine = Vec::new();
            for j in touched(r) {
                if j >= rows {
                    return Err(SparseError::Shape(format!(
                        "rank {r} touches row {j} of a {rows}-row matrix"
                    )));
                }
                if !own.contains(&j) && seen[j] != r {
                    seen[j] = r;
                    mine.push(j);
                }
            }
            mine.sort_unstable();
            need.push(mine);
        }
        Ok(RowFetch {
            procs,
            rows,
            width,
            cuts,
            need,
        })
    }

    /// Rows rank `r` owns.
    pub fn own_rows(&self, r: usize) -> usize {
        self.cuts[r + 1] - self.cuts[r]
    }

    /// The rank that owns row `j`.
    pub fn owner(&self, j: usize) -> usize {
        self.cuts.partition_point(|&c| c <= j) - 1
    }

    /// Words rank `r` receives: its halo rows times the width.
    pub fn received_words(&self, r: usize) -> u64 {
        (self.need[r].len() * self.width) as u64
    }

    /// Words rank `r` sends: the rows of its block other ranks receive, times the width.
    pub fn sent_words(&self, r: usize) -> u64 {
        let rows: usize = self.sends_of(r).iter().map(|(_, v)| v.len()).sum();
        (rows * self.width) as u64
    }

    /// Words rank `r` would receive if the matrix were replicated (an all-gather of the
    /// other blocks).
    pub fn replication_words(&self, r: usize) -> u64 {
        ((self.rows - self.own_rows(r)) * self.width) as u64
    }

    /// Per destination, the rows of rank `r`'s block it sends there (ascending destinations,
    /// rows sorted).
    pub fn sends_of(&self, r: usize) -> Vec<(usize, Vec<usize>)> {
        self.sends_slices(r)
            .into_iter()
            .map(|(q, rows)| (q, rows.to_vec()))
            .collect()
    }

    /// [`RowFetch::sends_of`] as slices of the plan's lists (no copy: the exchange reads
    /// them on every call).
    fn sends_slices(&self, r: usize) -> Vec<(usize, &[usize])> {
        let own = self.cuts[r]..self.cuts[r + 1];
        (0..self.procs)
            .filter(|&q| q != r)
            .filter_map(|q| {
                let lo = self.need[q].partition_point(|&j| j < own.start);
                let hi = self.need[q].partition_point(|&j| j < own.end);
                (hi > lo).then(|| (q, &self.need[q][lo..hi]))
            })
            .collect()
    }

    /// The ranks rank `r` receives from (ascending), with the number of rows from each.
    pub fn sources_of(&self, r: usize) -> Vec<(usize, usize)> {
        // `need` is sorted and owners hold ascending blocks: two searches per owner.
        let need = &self.need[r];
        (0..self.procs)
            .filter_map(|s| {
                let lo = need.partition_point(|&j| j < self.cuts[s]);
                let hi = need.partition_point(|&j| j < self.cuts[s + 1]);
                (hi > lo).then_some((s, hi - lo))
            })
            .collect()
    }

    /// The position of global row `j` in rank `me`'s B' (own rows first, then the halo rows
    /// in `need` order), or `None` when it has neither.
    pub fn local_row(&self, me: usize, j: usize) -> Option<usize> {
        let (lo, hi) = (self.cuts[me], self.cuts[me + 1]);
        if (lo..hi).contains(&j) {
            Some(j - lo)
        } else {
            self.need[me].binary_search(&j).ok().map(|p| hi - lo + p)
        }
    }

    /// A map from every global row to its position in rank `me`'s B' (`usize::MAX` where it
    /// has none): O(rows) once, then O(1) per lookup for kernels that renumber many entries.
    pub fn local_map(&self, me: usize) -> Vec<usize> {
        let mut map = vec![usize::MAX; self.rows];
        let (lo, hi) = (self.cuts[me], self.cuts[me + 1]);
        for (x, m) in map[lo..hi].iter_mut().enumerate() {
            *m = x;
        }
        for (p, &j) in self.need[me].iter().enumerate() {
            map[j] = hi - lo + p;
        }
        map
    }

    fn check_comm<C: Communicator>(&self, comm: &C) -> Result<usize, SparseError> {
        if comm.size() != self.procs {
            return Err(SparseError::Shape(format!(
                "plan for {} ranks run on {}",
                self.procs,
                comm.size()
            )));
        }
        Ok(comm.rank())
    }

    /// Sends the rows of this rank's dense block (`local`: its own rows, row-major, `width`
    /// wide) that others need and receives its halo: returns B' = its own rows, then the halo
    /// rows in `need` order.
    pub fn exchange<T: Scalar, C: Communicator>(
        &self,
        comm: &C,
        local: &[T],
    ) -> Result<Vec<T>, SparseError> {
        let (me, sends, from) = self.pack(comm, local)?;
        let ranks: Vec<usize> = from.iter().map(|&(s, _)| s).collect();
        let recv = comm.exchange(sends, &ranks)?;
        let mut bx = Vec::with_capacity(local.len() + self.need[me].len() * self.width);
        bx.extend_from_slice(local);
        self.unpack(me, recv, &from, &mut bx)?;
        Ok(bx)
    }

    /// [`RowFetch::exchange`] overlapped with `work` (run while the rows are in flight, on
    /// backends that overlap): returns the halo rows alone, in `need` order, and what `work`
    /// returned. The same messages and words as `exchange`.
    pub fn exchange_while<T: Scalar, C: Communicator, R: Send>(
        &self,
        comm: &C,
        local: &[T],
        work: impl FnOnce() -> R + Send,
    ) -> Result<(Vec<T>, R), SparseError> {
        let (me, sends, from) = self.pack(comm, local)?;
        let lens: Vec<(usize, usize)> = from.iter().map(|&(s, n)| (s, n * self.width)).collect();
        let (recv, r) = comm.exchange_while(sends, &lens, work)?;
        let mut halo = Vec::with_capacity(self.need[me].len() * self.width);
        self.unpack(me, recv, &from, &mut halo)?;
        Ok((halo, r))
    }

    /// This rank, its messages (the rows of `local` each other rank needs) and the ranks it
    /// receives from with their row counts.
    fn pack<T: Scalar, C: Communicator>(
        &self,
        comm: &C,
        local: &[T],
    ) -> Result<Packed<T>, SparseError> {
        let me = self.check_comm(comm)?;
        let (w, lo) = (self.width, self.cuts[me]);
        if local.len() != self.own_rows(me) * w {
            return Err(SparseError::Shape(format!(
                "rank {me} holds {} elements; the plan gives it {} rows of {w}",
                local.len(),
                self.own_rows(me)
            )));
        }
        let sends: Vec<(usize, Vec<T>)> = self
            .sends_slices(me)
            .into_iter()
            .map(|(q, rows)| {
                let buf = if w == 1 {
                    rows.iter().map(|&j| local[j - lo]).collect()
                } else {
                    let mut buf = Vec::with_capacity(rows.len() * w);
                    for &j in rows {
                        buf.extend_from_slice(&local[(j - lo) * w..(j - lo + 1) * w]);
                    }
                    buf
                };
                (q, buf)
            })
            .collect();
        Ok((me, sends, self.sources_of(me)))
    }

    /// Appends the received messages to `out` after checking their lengths against the plan.
    fn unpack<T: Scalar>(
        &self,
        me: usize,
        recv: Vec<Vec<T>>,
        from: &[(usize, usize)],
        out: &mut Vec<T>,
    ) -> Result<(), SparseError> {
        let w = self.width;
        // Owners ascending hold ascending rows, so the messages concatenate in `need` order.
        for (v, &(s, n)) in recv.into_iter().zip(from) {
            if v.len() == n * w && out.is_empty() && from.len() == 1 {
                // One message is the halo as it is: taken, not copied.
                *out = v;
                continue;
            }
            if v.len() != n * w {
                return Err(SparseError::Shape(format!(
                    "rank {me} received {} elements from rank {s}, the plan says {}",
                    v.len(),
                    n * w
                )));
            }
            out.extend(v);
        }
        Ok(())
    }

    /// Bytes rank `r` receives when the rows are CSR rows of lengths `row_len` (global, from
    /// the pattern) with `value_bytes`-byte values: per row its length, its columns and its
    /// values.
    pub fn csr_received_bytes(&self, r: usize, row_len: &[usize], value_bytes: usize) -> u64 {
        self.need[r]
            .iter()
            .map(|&j| (INDEX_BYTES + row_len[j] * (INDEX_BYTES + value_bytes)) as u64)
            .sum()
    }

    /// Bytes rank `r` sends of CSR rows (see [`RowFetch::csr_received_bytes`]).
    pub fn csr_sent_bytes(&self, r: usize, row_len: &[usize], value_bytes: usize) -> u64 {
        self.sends_of(r)
            .iter()
            .flat_map(|(_, rows)| rows.iter())
            .map(|&j| (INDEX_BYTES + row_len[j] * (INDEX_BYTES + value_bytes)) as u64)
            .sum()
    }

    /// Bytes rank `r` would receive if the CSR matrix were replicated.
    pub fn csr_replication_bytes(&self, r: usize, row_len: &[usize], value_bytes: usize) -> u64 {
        (0..self.rows)
            .filter(|j| !(self.cuts[r]..self.cuts[r + 1]).contains(j))
            .map(|j| (INDEX_BYTES + row_len[j] * (INDEX_BYTES + value_bytes)) as u64)
            .sum()
    }

    /// [`RowFetch::exchange`] for a CSR matrix: `local` holds this rank's rows (columns
    /// global); returns B' = its own rows, then the halo rows in `need` order, as one CSR
    /// matrix. Each message is the rows' lengths, then their columns (u64), then their values.
    pub fn exchange_csr<T: Scalar, C: Communicator>(
        &self,
        comm: &C,
        local: &Csr<T>,
    ) -> Result<Csr<T>, SparseError> {
        let me = self.check_comm(comm)?;
        let lo = self.cuts[me];
        if local.nrows != self.own_rows(me) {
            return Err(SparseError::Shape(format!(
                "rank {me} holds {} rows of B; the plan gives it {}",
                local.nrows,
                self.own_rows(me)
            )));
        }
        let p = self.procs;
        let mut send: Vec<u8> = Vec::new();
        let mut counts = vec![0usize; p];
        let mut by_dst = self.sends_slices(me).into_iter().peekable();
        for (q, count) in counts.iter_mut().enumerate() {
            let Some((_, rows)) = by_dst.next_if(|(d, _)| *d == q) else {
                continue;
            };
            let start = send.len();
            for &j in rows {
                let l = j - lo;
                send.extend_from_slice(
                    &((local.indptr[l + 1] - local.indptr[l]) as u64).to_le_bytes(),
                );
            }
            for &j in rows {
                let l = j - lo;
                for &c in &local.indices[local.indptr[l]..local.indptr[l + 1]] {
                    send.extend_from_slice(&(c as u64).to_le_bytes());
                }
            }
            for &j in rows {
                let l = j - lo;
                send.extend_from_slice(bytemuck::cast_slice(
                    &local.vals[local.indptr[l]..local.indptr[l + 1]],
                ));
            }
            *count = send.len() - start;
        }
        let (recv, rc) = comm.all_to_all_v(&send, &counts)?;
        drop(send);
        let mut out = local.clone();
        let mut off = 0usize;
        let from = self.sources_of(me);
        let bad = |s: usize| {
            SparseError::Shape(format!(
                "rank {me}: the message from rank {s} does not hold the planned rows"
            ))
        };
        for s in 0..p {
            let msg = &recv[off..off + rc[s]];
            off += rc[s];
            let n = from.iter().find(|&&(x, _)| x == s).map_or(0, |&(_, n)| n);
            if n == 0 {
                if !msg.is_empty() {
                    return Err(bad(s));
                }
                continue;
            }
            let word = |x: usize| -> Result<usize, SparseError> {
                let b = msg
                    .get(x * INDEX_BYTES..(x + 1) * INDEX_BYTES)
                    .ok_or_else(|| bad(s))?;
                let v = u64::from_le_bytes(b.try_into().map_err(|_| bad(s))?);
                usize::try_from(v).map_err(|_| bad(s))
            };
            let lens: Vec<usize> = (0..n).map(word).collect::<Result<_, _>>()?;
            let total: usize = lens.iter().sum();
            let vals_at = (n + total) * INDEX_BYTES;
            if msg.len() != vals_at + total * T::BYTES {
                return Err(bad(s));
            }
            for x in n..n + total {
                let c = word(x)?;
                if c >= out.ncols {
                    return Err(bad(s));
                }
                out.indices.push(c);
            }
            let mut v = vec![T::default(); total];
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&msg[vals_at..]);
            out.vals.extend(v);
            for l in lens {
                let last = out.indptr.last().copied().unwrap_or(0);
                out.indptr.push(last + l);
            }
        }
        out.nrows = out.indptr.len() - 1;
        Ok(out)
    }

    /// `a_local` (this rank's rows of a sparse operand whose columns index this matrix's rows)
    /// with its columns renumbered into B' (own rows first, then the halo).
    pub fn localize<T: Scalar>(&self, me: usize, a_local: &Csr<T>) -> Result<Csr<T>, SparseError> {
        let indices = a_local
            .indices
            .iter()
            .map(|&j| {
                self.local_row(me, j).ok_or_else(|| {
                    SparseError::Shape(format!("rank {me}: column {j} is in no halo"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Csr {
            nrows: a_local.nrows,
            ncols: self.own_rows(me) + self.need[me].len(),
            indptr: a_local.indptr.clone(),
            indices,
            vals: a_local.vals.clone(),
        })
    }
}

/// Cut points `0 = c_0 <= ... <= c_P = rows` of contiguous row parts with weights as even as
/// whole rows allow, for rows whose weights have the prefix sums `prefix` (`rows + 1`
/// entries, a CSR `indptr` for nonzeros): part r ends at the first row boundary where the
/// prefix reaches `(r + 1) * total / P`.
pub fn balance_rows(prefix: &[usize], parts: usize) -> Vec<usize> {
    let rows = prefix.len().saturating_sub(1);
    let total = prefix.last().copied().unwrap_or(0) as u128;
    let mut cuts = Vec::with_capacity(parts + 1);
    cuts.push(0);
    for r in 1..parts {
        let target = (total * r as u128 / parts as u128) as usize;
        let prev = *cuts.last().unwrap_or(&0);
        // The first row boundary at or past the target, never before the previous cut.
        let at = prefix[prev..].partition_point(|&p| p < target) + prev;
        cuts.push(at.min(rows));
    }
    cuts.push(rows);
    cuts
}

/// Equal cut points of `rows` rows into `parts` parts.
pub fn even_cuts(rows: usize, parts: usize) -> Vec<usize> {
    (0..=parts).map(|r| r * rows / parts).collect()
}

/// Max over the mean of per-rank `loads` (1 is perfect balance; 1 when all are zero).
pub fn imbalance(loads: &[usize]) -> f64 {
    let total: usize = loads.iter().sum();
    if total == 0 {
        return 1.0;
    }
    let max = loads.iter().copied().max().unwrap_or(0);
    max as f64 * loads.len() as f64 / total as f64
}
