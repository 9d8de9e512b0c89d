//! Tests of the `.npy` reader and writer against ndarray-npy's files and an in-memory oracle.

use super::literal::Literal;
use super::*;
use crate::comm::Communicator;
use crate::scalar::Scalar;
use deinsum_expr::{Dim, Index, Operand};
use deinsum_plan::{Block, DType, Distribution};
use deinsum_plan::{Grid, GridDim};
use ndarray::{ArrayD, Dimension, IxDyn};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh temp file path, removed on drop.
struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("deinsum-npy-{}-{n}-{tag}.npy", std::process::id()));
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ramp(shape: &[usize]) -> ArrayD<f64> {
    let n: usize = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|x| x as f64 * 0.5 - 3.0).collect()).unwrap()
}

fn ext(pairs: &[(char, usize)]) -> BTreeMap<Index, usize> {
    pairs.iter().copied().collect()
}

fn plain(idx: &str) -> Operand {
    Operand::new(idx.chars().map(Dim::Index).collect())
}

fn dist(split: Vec<Vec<usize>>, grid: &[(char, usize)]) -> Distribution {
    Distribution {
        grid: Grid {
            dims: grid
                .iter()
                .map(|&(index, size)| GridDim { index, size })
                .collect(),
        },
        split,
        partial: Vec::new(),
        window: Vec::new(),
        balanced: false,
    }
}

/// The elements of `a` inside `block`, row-major (the oracle for block reads).
fn slice_of(a: &ArrayD<f64>, block: &Block) -> Vec<f64> {
    let mut out = Vec::new();
    for (ix, &v) in a.indexed_iter() {
        let inside = ix
            .slice()
            .iter()
            .zip(&block.ranges)
            .all(|(&x, &(s, e))| s <= x && x < e);
        if inside {
            out.push(v);
        }
    }
    out
}

#[test]
fn header_of_ndarray_npy_files() {
    for shape in [vec![], vec![7], vec![3, 4], vec![2, 3, 5]] {
        let t = Tmp::new("hdr");
        ndarray_npy::write_npy(&t.0, &ramp(&shape)).unwrap();
        let h = read_header(&t.0).unwrap();
        assert_eq!(h.descr, "<f8");
        assert!(!h.fortran_order);
        assert_eq!(h.shape, shape);
        assert_eq!(h.data_offset % 16, 0);
    }
    let t = Tmp::new("hdr32");
    let a32 = ramp(&[4, 2]).mapv(|x| x as f32);
    ndarray_npy::write_npy(&t.0, &a32).unwrap();
    let h = read_header(&t.0).unwrap();
    assert_eq!(
        (h.descr.as_str(), h.shape.as_slice()),
        ("<f4", &[4usize, 2][..])
    );
}

#[test]
fn our_header_is_read_by_ndarray_npy() {
    for shape in [vec![], vec![1], vec![5], vec![2, 3], vec![3, 1, 4]] {
        let t = Tmp::new("ours");
        let a = ramp(&shape);
        let mut bytes = header_bytes::<f64>(&shape);
        assert_eq!(bytes.len() % 64, 0);
        f64::extend_bytes(a.as_slice().unwrap(), &mut bytes);
        std::fs::write(&t.0, &bytes).unwrap();
        let back: ArrayD<f64> = ndarray_npy::read_npy(&t.0).unwrap();
        assert_eq!(back, a);
    }
}

#[test]
fn versions_two_and_three_headers() {
    for major in [2u8, 3u8] {
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[major, 0]);
        let hlen = 128 - 12;
        bytes.extend_from_slice(&(hlen as u32).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.resize(127, b' ');
        bytes.push(b'\n');
        let a = ramp(&[2, 3]);
        f64::extend_bytes(a.as_slice().unwrap(), &mut bytes);
        let t = Tmp::new("v23");
        std::fs::write(&t.0, &bytes).unwrap();
        let h = read_header(&t.0).unwrap();
        assert_eq!(h.version, (major, 0));
        assert_eq!(h.data_offset, 128);
        let blk = Block {
            ranges: vec![(1, 2), (0, 3)].into(),
        };
        let got: Vec<f64> =
            read_operand_block(&t.0, &plain("ij"), &ext(&[('i', 2), ('j', 3)]), &blk).unwrap();
        assert_eq!(got, slice_of(&a, &blk));
    }
}

#[test]
fn every_block_of_uneven_distributions_matches_the_oracle() {
    // 5x7x3 on a 2x3x2 grid: ceil blocks are short or empty at the edges.
    let shape = [5usize, 7, 3];
    let a = ramp(&shape);
    let t = Tmp::new("blocks");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let op = plain("ijk");
    let e = ext(&[('i', 5), ('j', 7), ('k', 3)]);
    let splits = [
        dist(
            vec![vec![0], vec![1], vec![2]],
            &[('i', 2), ('j', 3), ('k', 2)],
        ),
        dist(vec![vec![0], vec![], vec![1]], &[('i', 3), ('k', 4)]),
        dist(vec![vec![], vec![0, 1], vec![]], &[('j', 2), ('x', 3)]),
        dist(vec![vec![], vec![], vec![0]], &[('k', 3)]),
    ];
    for d in &splits {
        for r in 0..d.grid.size() {
            let blk = d.block(r, &shape).unwrap();
            let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
            assert_eq!(got, slice_of(&a, &blk), "block {blk:?}");
        }
    }
    // f32 files read as f32.
    let t32 = Tmp::new("blocks32");
    let a32 = a.mapv(|x| x as f32);
    ndarray_npy::write_npy(&t32.0, &a32).unwrap();
    let blk = splits[0].block(5, &shape).unwrap();
    let got: Vec<f32> = read_operand_block(&t32.0, &op, &e, &blk).unwrap();
    let want: Vec<f32> = slice_of(&a, &blk).into_iter().map(|x| x as f32).collect();
    assert_eq!(got, want);
}

#[test]
fn diagonal_and_broadcast_operands() {
    // "iij": storage (4,4,3), distinct indices (i,j), element a[i,i,j].
    let a = ramp(&[4, 4, 3]);
    let t = Tmp::new("diag");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let op = Operand::new(vec![Dim::Index('i'), Dim::Index('i'), Dim::Index('j')]);
    assert_eq!(op.indices, vec!['i', 'j']);
    let e = ext(&[('i', 4), ('j', 3)]);
    let blk = Block {
        ranges: vec![(1, 4), (1, 3)].into(),
    };
    let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
    let mut want = Vec::new();
    for i in 1..4 {
        for j in 1..3 {
            want.push(a[[i, i, j].as_slice()]);
        }
    }
    assert_eq!(got, want);

    // "jij" puts the repeated index last: no contiguous run, still correct.
    let a = ramp(&[3, 4, 3]);
    let t = Tmp::new("diag2");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let op = Operand::new(vec![Dim::Index('j'), Dim::Index('i'), Dim::Index('j')]);
    let blk = Block {
        ranges: vec![(0, 3), (2, 4)].into(),
    };
    let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
    let mut want = Vec::new();
    for j in 0..3 {
        for i in 2..4 {
            want.push(a[[j, i, j].as_slice()]);
        }
    }
    assert_eq!(got, want);

    // Broadcast dims: storage (1,5,1), distinct index i only.
    let a = ramp(&[1, 5, 1]);
    let t = Tmp::new("bcast");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let op = Operand::new(vec![Dim::Broadcast, Dim::Index('i'), Dim::Broadcast]);
    let e = ext(&[('i', 5)]);
    let blk = Block {
        ranges: vec![(2, 5)].into(),
    };
    let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
    assert_eq!(
        got,
        vec![
            a[[0, 2, 0].as_slice()],
            a[[0, 3, 0].as_slice()],
            a[[0, 4, 0].as_slice()]
        ]
    );

    // A scalar operand.
    let a = ramp(&[]);
    let t = Tmp::new("scalar");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let got: Vec<f64> = read_operand_block(
        &t.0,
        &plain(""),
        &ext(&[]),
        &Block {
            ranges: vec![].into(),
        },
    )
    .unwrap();
    assert_eq!(got, vec![-3.0]);
}

#[test]
fn wrong_shape_dtype_order_and_truncation_are_named() {
    let a = ramp(&[3, 4]);
    let t = Tmp::new("wrong");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let name = t.0.display().to_string();
    let blk = Block {
        ranges: vec![(0, 1), (0, 1)].into(),
    };
    let err = read_operand_block::<f64>(&t.0, &plain("ij"), &ext(&[('i', 3), ('j', 5)]), &blk)
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, NpyError::Shape { .. }));
    assert!(
        msg.contains(&name)
            && msg.contains("expected shape (3, 5)")
            && msg.contains("found (3, 4)"),
        "{msg}"
    );

    // A complex array is not converted, and the message says what is.
    let tc = Tmp::new("complex");
    std::fs::write(&tc.0, raw_npy("<c8", false, &[3, 4], &[0u8; 3 * 4 * 8])).unwrap();
    let err = read_operand_block::<f64>(&tc.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &blk)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, NpyError::Dtype { .. }) && msg.contains(&tc.0.display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("found <c8"), "{msg}");
    assert!(msg.contains("complex --dtype"), "{msg}");

    // Truncated data and garbage files.
    let mut bytes = std::fs::read(&t.0).unwrap();
    bytes.truncate(bytes.len() - 8);
    let tt = Tmp::new("trunc");
    std::fs::write(&tt.0, &bytes).unwrap();
    let err = read_operand_block::<f64>(&tt.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &blk)
        .unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    let tg = Tmp::new("garbage");
    std::fs::write(&tg.0, b"hello world, not npy").unwrap();
    assert!(matches!(read_header(&tg.0), Err(NpyError::Format { .. })));
    let missing = std::env::temp_dir().join("deinsum-npy-does-not-exist.npy");
    let err = read_header(&missing).unwrap_err();
    assert!(err.to_string().contains("deinsum-npy-does-not-exist.npy"));

    // A block outside the array.
    let bad = Block {
        ranges: vec![(0, 4), (0, 1)].into(),
    };
    let err = read_operand_block::<f64>(&t.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &bad)
        .unwrap_err();
    assert!(matches!(err, NpyError::Invalid { .. }));
}

#[test]
fn header_literal_parser() {
    let v =
        Literal::parse("{'descr': \"<f8\", 'fortran_order': False, 'shape': (3L, 4,), }").unwrap();
    assert_eq!(
        v,
        Literal::Dict(vec![
            ("descr".into(), Literal::Str("<f8".into())),
            ("fortran_order".into(), Literal::Bool(false)),
            (
                "shape".into(),
                Literal::Tuple(vec![Literal::Int(3), Literal::Int(4)])
            ),
        ])
    );
    assert!(Literal::parse("{'descr': '<f8'").is_err());
    assert!(Literal::parse("{'shape': (99999999999999999999999,)}").is_err());
    assert!(Literal::parse("{'a': 1} trailing").is_err());
}

/// A test-only communicator over threads supporting what `write_distributed` uses.
struct ThreadComm {
    rank: usize,
    size: usize,
    barrier: Arc<Barrier>,
    slot: Arc<Mutex<Vec<u64>>>,
}

impl ThreadComm {
    fn world(size: usize) -> Vec<ThreadComm> {
        let barrier = Arc::new(Barrier::new(size));
        let slot = Arc::new(Mutex::new(vec![0u64; size]));
        (0..size)
            .map(|rank| ThreadComm {
                rank,
                size,
                barrier: barrier.clone(),
                slot: slot.clone(),
            })
            .collect()
    }
}

fn unsupported<T>() -> Result<T, CommError> {
    Err(CommError::Invalid(
        "not supported by the npy test communicator".into(),
    ))
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn split(&self, _: usize, _: usize) -> Result<Self, CommError> {
        unsupported()
    }
    fn all_to_all_v(&self, _: &[u8], _: &[usize]) -> Result<(Vec<u8>, Vec<usize>), CommError> {
        unsupported()
    }
    fn all_reduce_sum<T: crate::Scalar>(&self, _: &mut [T]) -> Result<(), CommError> {
        unsupported()
    }
    fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError> {
        assert_eq!(buf.len(), 1, "test communicator reduces one word");
        self.slot.lock().unwrap()[self.rank] = buf[0];
        self.barrier.wait();
        buf[0] = *self.slot.lock().unwrap().iter().max().unwrap();
        self.barrier.wait();
        Ok(())
    }
    fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> Result<(), CommError> {
        unsupported()
    }
    fn barrier(&self) -> Result<(), CommError> {
        self.barrier.wait();
        Ok(())
    }
    fn traffic(&self) -> crate::comm::Traffic {
        crate::comm::Traffic::default()
    }
}

/// Every rank writes its block of `a` in `d`; returns each rank's result.
fn write_all(
    path: &Path,
    procs: usize,
    a: &ArrayD<f64>,
    d: &Distribution,
) -> Vec<Result<(), String>> {
    let shape = a.shape().to_vec();
    std::thread::scope(|s| {
        let hs: Vec<_> = ThreadComm::world(procs)
            .into_iter()
            .map(|c| {
                let shape = shape.clone();
                s.spawn(move || {
                    let local = match d.block(c.rank, &shape) {
                        Some(b) => slice_of(a, &b),
                        None => Vec::new(),
                    };
                    write_distributed(path, &c, &shape, d, &local).map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn distributed_write_matches_ndarray_npy_reader() {
    let cases: Vec<(Vec<usize>, Distribution, usize)> = vec![
        // Uneven blocks with a replicated grid dim (only coordinate 0 writes).
        (
            vec![5, 7],
            dist(vec![vec![0], vec![2]], &[('i', 2), ('k', 2), ('j', 3)]),
            13,
        ),
        (
            vec![7, 3, 4],
            dist(vec![vec![1], vec![], vec![0]], &[('k', 3), ('i', 2)]),
            6,
        ),
        (vec![9], dist(vec![vec![0, 1]], &[('i', 2), ('x', 2)]), 5),
        (vec![4, 4], Distribution::on_root(2), 3),
        (vec![], Distribution::on_root(0), 2),
        (
            vec![2, 3],
            dist(vec![vec![0], vec![1]], &[('i', 3), ('j', 4)]),
            12,
        ),
    ];
    for (shape, d, procs) in cases {
        let a = ramp(&shape);
        let t = Tmp::new("wr");
        let res = write_all(&t.0, procs, &a, &d);
        assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
        let back: ArrayD<f64> = ndarray_npy::read_npy(&t.0).unwrap();
        assert_eq!(back, a, "shape {shape:?} dist {d:?}");
    }
}

#[test]
fn distributed_write_errors_reach_every_rank() {
    let a = ramp(&[4, 4]);
    let mut d = dist(vec![vec![0], vec![]], &[('i', 2), ('k', 2)]);
    d.partial = vec![1];
    let t = Tmp::new("partial");
    let res = write_all(&t.0, 4, &a, &d);
    assert!(res
        .iter()
        .all(|r| r.as_ref().unwrap_err().contains("partial sums")));

    // An unwritable path: rank 0 fails creating it, the others hear of it.
    let bad = std::env::temp_dir()
        .join("deinsum-no-such-dir")
        .join("x.npy");
    let d = dist(vec![vec![0], vec![]], &[('i', 2)]);
    let res = write_all(&bad, 3, &a, &d);
    assert!(res[0].as_ref().unwrap_err().contains("x.npy"));
    for r in &res[1..] {
        assert!(r.as_ref().unwrap_err().contains("rank 0 failed"), "{r:?}");
    }
}

/// A `.npy` file of `descr` (three characters) and order with raw data bytes `data`.
fn raw_npy(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    assert!(descr.len() == 3 || descr.len() == 4);
    let head = header_bytes::<f64>(shape);
    // The dictionary is ASCII after the 10-byte preamble (magic, version, length).
    let (pre, dict) = head.split_at(10);
    let dict = String::from_utf8(dict.to_vec()).unwrap();
    let mut dict = dict.replace("'<f8'", &format!("'{descr}'"));
    if descr.len() == 4 {
        // One padding space fewer keeps the header's length as its preamble states.
        dict = dict.replacen(" \n", "\n", 1);
    }
    let dict = if fortran {
        dict.replace("'fortran_order': False", "'fortran_order': True ")
    } else {
        dict
    };
    let mut out = pre.to_vec();
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Every block of the distributions below, of `a` saved by `save`, read as `T`, equals the
/// oracle's slice converted by `conv`.
fn every_block_matches<T: Scalar>(
    a: &ArrayD<f64>,
    file: &std::path::Path,
    conv: impl Fn(f64) -> f64,
) {
    let shape = a.shape().to_vec();
    let idx: String = "ijk".chars().take(shape.len()).collect();
    let extents: BTreeMap<Index, usize> = idx.chars().zip(shape.iter().copied()).collect();
    for parts in [1usize, 2, 3] {
        let ranges_of = |n: usize| -> Vec<(usize, usize)> {
            (0..parts)
                .map(|p| (n * p / parts, n * (p + 1) / parts))
                .collect()
        };
        let per_dim: Vec<Vec<(usize, usize)>> = shape.iter().map(|&n| ranges_of(n)).collect();
        // Every combination of one range per dimension.
        let mut pick = vec![0usize; shape.len()];
        loop {
            let block = Block {
                ranges: pick
                    .iter()
                    .enumerate()
                    .map(|(d, &p)| per_dim[d][p])
                    .collect(),
            };
            let got: Vec<f64> = read_operand_block::<T>(file, &plain(&idx), &extents, &block)
                .unwrap()
                .into_iter()
                .map(Scalar::to_f64)
                .collect();
            let want: Vec<f64> = slice_of(a, &block).into_iter().map(&conv).collect();
            assert_eq!(got, want, "block {:?} of {}", block.ranges, file.display());
            let mut d = 0;
            loop {
                if d == pick.len() {
                    break;
                }
                pick[d] += 1;
                if pick[d] < per_dim[d].len() {
                    break;
                }
                pick[d] = 0;
                d += 1;
            }
            if d == pick.len() {
                break;
            }
        }
    }
}

#[test]
fn fortran_order_files_are_read_block_by_block() {
    for shape in [
        vec![7usize],
        vec![5, 3],
        vec![4, 3, 5],
        vec![1, 6],
        vec![6, 1],
    ] {
        let a = ramp(&shape);
        let t = Tmp::new("fortran");
        // ndarray-npy writes a transposed (column-major) view as fortran_order True.
        let f = a.t().as_standard_layout().into_owned().reversed_axes();
        ndarray_npy::write_npy(&t.0, &f).unwrap();
        let h = read_header(&t.0).unwrap();
        assert_eq!(h.shape, shape);
        if shape.iter().filter(|&&n| n > 1).count() > 1 {
            assert!(h.fortran_order, "{shape:?}");
        }
        every_block_matches::<f64>(&a, &t.0, |x| x);
        every_block_matches::<f32>(&a, &t.0, |x| f64::from(x as f32));
    }
}

#[test]
fn integer_bool_and_big_endian_files_are_converted_as_numpy_does() {
    let shape = [4usize, 5];
    let vals: Vec<i64> = (0..20).map(|x: i64| (x - 7) * 1_000_003).collect();
    let a =
        ArrayD::from_shape_vec(IxDyn(&shape), vals.iter().map(|&v| v as f64).collect()).unwrap();
    type Case = (&'static str, Vec<u8>, Box<dyn Fn(f64) -> f64>);
    let cases: Vec<Case> = vec![
        (
            "<i8",
            vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Box::new(|x| x),
        ),
        (
            ">i8",
            vals.iter().flat_map(|v| v.to_be_bytes()).collect(),
            Box::new(|x| x),
        ),
        (
            "<i4",
            vals.iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
            Box::new(|x| x),
        ),
        (
            ">f8",
            vals.iter()
                .flat_map(|&v| (v as f64).to_be_bytes())
                .collect(),
            Box::new(|x| x),
        ),
        (
            "<f4",
            vals.iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
            Box::new(|x| f64::from(x as f32)),
        ),
        (
            "<u2",
            vals.iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect(),
            Box::new(|x| f64::from(x as i64 as u16)),
        ),
        (
            "|i1",
            vals.iter().map(|&v| v as i8 as u8).collect(),
            Box::new(|x| f64::from(x as i64 as i8)),
        ),
        (
            "|b1",
            vals.iter().map(|&v| u8::from(v != 0)).collect(),
            Box::new(|x| f64::from(u8::from(x != 0.0))),
        ),
    ];
    for (descr, data, conv) in cases {
        let t = Tmp::new("conv");
        std::fs::write(&t.0, raw_npy(descr, false, &shape, &data)).unwrap();
        let h = read_header(&t.0).unwrap();
        assert!(h.elem_type().is_some(), "{descr}");
        every_block_matches::<f64>(&a, &t.0, &conv);
        // An f32 run rounds each value once, from the stored one.
        every_block_matches::<f32>(&a, &t.0, |x| f64::from(conv(x) as f32));
    }
    // Big-endian and Fortran together.
    let t = Tmp::new("be-fortran");
    let col: Vec<u8> = (0..5)
        .flat_map(|j| (0..4).map(move |i| i * 5 + j))
        .flat_map(|k| (vals[k] as f64).to_be_bytes())
        .collect();
    std::fs::write(&t.0, raw_npy(">f8", true, &shape, &col)).unwrap();
    every_block_matches::<f64>(&a, &t.0, |x| x);
}

#[test]
fn element_type_names() {
    let name = |d: &str| ElemType::parse(d).map(|e| e.name());
    assert_eq!(name("<i8").as_deref(), Some("int64"));
    assert_eq!(name(">f4").as_deref(), Some("big-endian float32"));
    assert_eq!(name("|b1").as_deref(), Some("bool"));
    assert_eq!(name("|u1").as_deref(), Some("uint8"));
    assert_eq!(name("<c16").as_deref(), Some("complex128"));
    assert_eq!(name(">c8").as_deref(), Some("big-endian complex64"));
    assert_eq!(name("<c4"), None);
    assert_eq!(name("<f16"), None);
    assert_eq!(name("<f2"), None);
    assert!(ElemType::parse("<c16").unwrap().is_dtype(DType::C128));
    assert!(ElemType::parse("<c8").unwrap().is_dtype(DType::C64));
    assert!(!ElemType::parse("<c8").unwrap().converts_to(DType::F64));
    assert!(ElemType::parse("<f4").unwrap().converts_to(DType::C128));
    assert!(ElemType::parse("<f8").unwrap().is::<f64>());
    assert!(!ElemType::parse(">f8").unwrap().is::<f64>());
    assert!(!ElemType::parse("<f4").unwrap().is::<f64>());
}

#[test]
fn transpose_of_column_major_blocks() {
    // 2 x 3 column-major: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2).
    assert_eq!(
        super::read::transpose_col_to_row(&[0, 3, 1, 4, 2, 5], &[2, 3]),
        vec![0, 1, 2, 3, 4, 5]
    );
}

/// Complex files in either precision and byte order, C and Fortran order, read as c128 and
/// c64 (and real files widened to complex), every block equal to the oracle's values.
#[test]
fn complex_files_in_every_order() {
    use crate::scalar::{Complex32, Complex64};
    let shape = [4usize, 5];
    let a = ramp(&shape);
    let (m, n) = (shape[0], shape[1]);
    // Element (i, j) is ramp + i (ramp / 2) i: both parts exact in f32.
    let z = |k: usize| Complex64::new(a.as_slice().unwrap()[k], a.as_slice().unwrap()[k] / 2.0);
    let order = |fortran: bool| -> Vec<usize> {
        if fortran {
            (0..n)
                .flat_map(|j| (0..m).map(move |i| i * n + j))
                .collect()
        } else {
            (0..m * n).collect()
        }
    };
    let ext = ext(&[('i', m), ('j', n)]);
    for (descr, fortran) in [
        ("<c16", false),
        (">c16", true),
        ("<c8", true),
        (">c8", false),
    ] {
        let big = descr.starts_with('>');
        let data: Vec<u8> = order(fortran)
            .into_iter()
            .flat_map(|k| {
                let v = z(k);
                let part = |x: f64| -> Vec<u8> {
                    match (descr.ends_with("16"), big) {
                        (true, true) => x.to_be_bytes().to_vec(),
                        (true, false) => x.to_le_bytes().to_vec(),
                        (false, true) => (x as f32).to_be_bytes().to_vec(),
                        (false, false) => (x as f32).to_le_bytes().to_vec(),
                    }
                };
                let mut b = part(v.re);
                b.extend(part(v.im));
                b
            })
            .collect();
        let t = Tmp::new("complex-order");
        std::fs::write(&t.0, raw_npy(descr, fortran, &shape, &data)).unwrap();
        for (r0, r1) in [((0, 4), (0, 5)), ((1, 3), (2, 5)), ((3, 4), (0, 1))] {
            let block = Block {
                ranges: vec![r0, r1].into(),
            };
            let want: Vec<Complex64> = (r0.0..r0.1)
                .flat_map(|i| (r1.0..r1.1).map(move |j| i * n + j))
                .map(z)
                .collect();
            let got = read_operand_block::<Complex64>(&t.0, &plain("ij"), &ext, &block).unwrap();
            assert_eq!(got, want, "{descr} fortran={fortran}");
            let got32 = read_operand_block::<Complex32>(&t.0, &plain("ij"), &ext, &block).unwrap();
            let want32: Vec<Complex32> = want
                .iter()
                .map(|w| Complex32::new(w.re as f32, w.im as f32))
                .collect();
            assert_eq!(got32, want32, "{descr} fortran={fortran} as c64");
        }
    }
    // A real file read as complex: imaginary parts zero.
    let t = Tmp::new("real-as-complex");
    ndarray_npy::write_npy(&t.0, &a).unwrap();
    let all = Block::full(&shape);
    let got = read_operand_block::<Complex64>(&t.0, &plain("ij"), &ext, &all).unwrap();
    assert!(got
        .iter()
        .zip(a.iter())
        .all(|(g, &x)| g.re == x && g.im == 0.0));
}
