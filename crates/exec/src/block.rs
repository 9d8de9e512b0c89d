//! One rank's dense tensor block ([`LocalBlock`]) and its elements ([`Data`]): the value every
//! kernel, move and load works on, with the reshapes that need no contraction (permute, sum,
//! slice).

use crate::buffers::OutOfMemory;
use crate::layout::{gather_strided, permuted, strides_of};
use crate::Scalar;
use deinsum_expr::Index;
use std::borrow::Cow;

/// A dense row-major block of a tensor: its indices, the global range along each, the data
/// (its own buffer, or read in place from an operand the caller lent for the run).
#[derive(Clone, Debug, PartialEq)]
pub struct LocalBlock<'a, T> {
    /// Indices in storage order.
    pub indices: Vec<Index>,
    /// Global `[start, end)` per index.
    pub ranges: Vec<(usize, usize)>,
    /// Row-major data, length the product of the range extents.
    pub data: Data<'a, T>,
}

/// A block with its own buffer (what kernels return and the executor allocates).
pub type LocalTensor<T> = LocalBlock<'static, T>;

/// A block's elements: its own buffer, or a contiguous part of an operand the caller lent for
/// the run, read in place (no rank memory, never written: see [`Data`]'s `DerefMut`).
#[derive(Clone, Debug)]
pub enum Data<'a, T> {
    /// The block's own buffer.
    Own(Vec<T>),
    /// Elements read in place from a lent operand.
    Lent(&'a [T]),
}

impl<T> Default for Data<'_, T> {
    fn default() -> Self {
        Data::Own(Vec::new())
    }
}

impl<T> From<Vec<T>> for Data<'_, T> {
    fn from(v: Vec<T>) -> Self {
        Data::Own(v)
    }
}

impl<T> FromIterator<T> for Data<'_, T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        Data::Own(it.into_iter().collect())
    }
}

impl<'b, T> IntoIterator for &'b Data<'_, T> {
    type Item = &'b T;
    type IntoIter = std::slice::Iter<'b, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> std::ops::Deref for Data<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Data::Own(v) => v,
            Data::Lent(s) => s,
        }
    }
}

impl<T: Clone> std::ops::DerefMut for Data<'_, T> {
    /// The elements to write: lent ones are copied first (copy on write). The executor never
    /// writes a lent block (it copies one fallibly before, [`LocalBlock::into_static`]), so
    /// this copy is a fallback, not a path.
    fn deref_mut(&mut self) -> &mut [T] {
        if let Data::Lent(s) = self {
            *self = Data::Own(s.to_vec());
        }
        match self {
            Data::Own(v) => v,
            Data::Lent(_) => unreachable!("made own above"),
        }
    }
}

impl<T: PartialEq> PartialEq for Data<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Clone + Send + 'static> Data<'_, T> {
    /// The elements as an owned buffer (lent ones copied).
    pub fn into_vec(self) -> Vec<T> {
        match self {
            Data::Own(v) => v,
            Data::Lent(s) => s.to_vec(),
        }
    }

    /// Whether the elements are read in place from a lent operand.
    pub fn is_lent(&self) -> bool {
        matches!(self, Data::Lent(_))
    }

    /// Words of rank memory the elements take: a lent block takes none (the caller's array).
    pub fn own_words(&self) -> u64 {
        match self {
            Data::Own(v) => v.len() as u64,
            Data::Lent(_) => 0,
        }
    }

    /// Gives an own buffer to the rank's free list (a lent one stays the caller's).
    pub(crate) fn release(self) {
        if let Data::Own(v) = self {
            crate::buffers::give(v);
        }
    }
}

/// Elements of a block over `ranges`; a count beyond `usize` is a buffer that cannot be had.
fn elements<T>(ranges: &[(usize, usize)]) -> Result<usize, OutOfMemory> {
    ranges
        .iter()
        .try_fold(1usize, |n, &(s, e)| n.checked_mul(e - s))
        .ok_or_else(|| OutOfMemory {
            bytes: ranges
                .iter()
                .map(|&(s, e)| (e - s) as u128)
                .product::<u128>()
                * std::mem::size_of::<T>() as u128,
            tensor: None,
        })
}

impl<T: Scalar> LocalTensor<T> {
    /// A zero block over `ranges`.
    pub fn zeros(indices: Vec<Index>, ranges: Vec<(usize, usize)>) -> Result<Self, OutOfMemory> {
        let n = elements::<T>(&ranges)?;
        Ok(LocalTensor {
            indices,
            ranges,
            data: crate::buffers::take(n)?.into(),
        })
    }

    /// A block over `ranges` whose values the caller overwrites entirely (from the rank's
    /// free list when it has one: no zeros written first).
    pub fn overwritten(
        indices: Vec<Index>,
        ranges: Vec<(usize, usize)>,
    ) -> Result<Self, OutOfMemory> {
        let n = elements::<T>(&ranges)?;
        Ok(LocalTensor {
            indices,
            ranges,
            data: crate::buffers::take_overwritten(n)?.into(),
        })
    }

    /// Consumes the block and returns it in `order`.
    pub fn into_order(self, order: &[Index]) -> Result<Self, OutOfMemory> {
        if order == self.indices.as_slice() {
            return Ok(self);
        }
        self.permute_owned(order)
    }
}

impl<T: Scalar> LocalBlock<'_, T> {
    /// A copy of the block in fallibly allocated storage (the rank's own, also of a lent one).
    pub fn try_clone(&self) -> Result<LocalTensor<T>, OutOfMemory> {
        Ok(LocalTensor {
            indices: self.indices.clone(),
            ranges: self.ranges.clone(),
            data: crate::buffers::try_copy(&self.data)?.into(),
        })
    }

    /// The block with its own buffer: an own one as it is, a lent one copied.
    pub fn into_static(self) -> Result<LocalTensor<T>, OutOfMemory> {
        let data = match self.data {
            Data::Own(v) => v,
            Data::Lent(s) => crate::buffers::try_copy(s)?,
        };
        Ok(LocalTensor {
            indices: self.indices,
            ranges: self.ranges,
            data: Data::Own(data),
        })
    }

    /// Extent along each index.
    pub fn shape(&self) -> Vec<usize> {
        self.ranges.iter().map(|&(s, e)| e - s).collect()
    }

    /// The axis of index `c` (which the block must have).
    pub(crate) fn pos(&self, c: Index) -> usize {
        self.indices
            .iter()
            .position(|&d| d == c)
            .expect("index of the block")
    }

    /// The block with its indices in `order` (a permutation of its own).
    pub fn permute(&self, order: &[Index]) -> Result<LocalTensor<T>, OutOfMemory> {
        if order == self.indices.as_slice() {
            return self.try_clone();
        }
        self.permute_owned(order)
    }

    /// [`LocalTensor::permute`], borrowing when the order is already right.
    pub fn permute_cow(&self, order: &[Index]) -> Result<Cow<'_, Self>, OutOfMemory> {
        if order == self.indices.as_slice() {
            return Ok(Cow::Borrowed(self));
        }
        Ok(Cow::Owned(self.permute_owned(order)?))
    }

    /// The block copied into `order`, even when it is already in it.
    pub(crate) fn permute_owned(&self, order: &[Index]) -> Result<LocalTensor<T>, OutOfMemory> {
        let perm: Vec<usize> = order.iter().map(|&c| self.pos(c)).collect();
        let shape = self.shape();
        let st = strides_of(&shape);
        let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
        Ok(LocalTensor {
            indices: order.to_vec(),
            ranges: perm.iter().map(|&p| self.ranges[p]).collect(),
            data: permuted(&self.data, &pshape, &pst)?.into(),
        })
    }

    /// Sums out every index not in `keep`, keeping the others in their order.
    pub fn sum_to(&self, keep: &[Index]) -> Result<LocalTensor<T>, OutOfMemory> {
        if self.indices.iter().all(|c| keep.contains(c)) {
            return self.try_clone();
        }
        self.sum_owned(keep)
    }

    /// [`LocalTensor::sum_to`], borrowing when nothing is summed.
    pub fn sum_cow(&self, keep: &[Index]) -> Result<Cow<'_, Self>, OutOfMemory> {
        if self.indices.iter().all(|c| keep.contains(c)) {
            return Ok(Cow::Borrowed(self));
        }
        Ok(Cow::Owned(self.sum_owned(keep)?))
    }

    /// Sums out the indices not in `keep` in one pass: each element of the block is added
    /// into its place in the (zeroed) result, the innermost index in a tight loop.
    fn sum_owned(&self, keep: &[Index]) -> Result<LocalTensor<T>, OutOfMemory> {
        let kept: Vec<usize> = (0..self.indices.len())
            .filter(|&ax| keep.contains(&self.indices[ax]))
            .collect();
        let ranges: Vec<(usize, usize)> = kept.iter().map(|&ax| self.ranges[ax]).collect();
        let mut out =
            LocalTensor::zeros(kept.iter().map(|&ax| self.indices[ax]).collect(), ranges)?;
        let shape = self.shape();
        let ost = strides_of(&out.shape());
        // Per axis of the block, its stride in the result (0 for a summed axis).
        let mut os = vec![0usize; shape.len()];
        for (j, &ax) in kept.iter().enumerate() {
            os[ax] = ost[j];
        }
        let nd = shape.len();
        if nd == 0 || shape.contains(&0) {
            return Ok(out);
        }
        let (inner, si) = (shape[nd - 1], os[nd - 1]);
        let mut idx = vec![0usize; nd - 1];
        let (mut o, mut src) = (0usize, 0usize);
        loop {
            let row = &self.data[src..src + inner];
            if si == 0 {
                let mut acc = T::default();
                row.iter().for_each(|&x| acc += x);
                out.data[o] += acc;
            } else {
                for (t, &x) in row.iter().enumerate() {
                    out.data[o + t * si] += x;
                }
            }
            src += inner;
            let mut d = nd - 1;
            loop {
                if d == 0 {
                    return Ok(out);
                }
                d -= 1;
                idx[d] += 1;
                o += os[d];
                if idx[d] < shape[d] {
                    break;
                }
                o -= os[d] * shape[d];
                idx[d] = 0;
            }
        }
    }

    /// The sub-block over global `sub` ranges (per index of `sub_indices`; other indices whole).
    pub fn slice(
        &self,
        sub_indices: &[Index],
        sub: &[(usize, usize)],
    ) -> Result<LocalTensor<T>, OutOfMemory> {
        let st = strides_of(&self.shape());
        let mut ranges = self.ranges.clone();
        for (c, &r) in sub_indices.iter().zip(sub) {
            if let Some(ax) = self.indices.iter().position(|d| d == c) {
                ranges[ax] = r;
            }
        }
        let base: usize = ranges
            .iter()
            .zip(&self.ranges)
            .zip(&st)
            .map(|((&(s, _), &(lo, _)), &k)| (s - lo) * k)
            .sum();
        let shape: Vec<usize> = ranges.iter().map(|&(s, e)| e - s).collect();
        Ok(LocalTensor {
            indices: self.indices.clone(),
            data: gather_strided(&self.data, &shape, &st, base)?.into(),
            ranges,
        })
    }

    /// Adds `other` (same indices and ranges) into this block.
    pub fn add_assign(&mut self, other: &LocalBlock<'_, T>) {
        for (x, &y) in self.data.iter_mut().zip(other.data.iter()) {
            *x += y;
        }
    }
}
