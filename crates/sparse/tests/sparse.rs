//! Sparse storage, readers, kernels and the halo-exchange SpMM, each against a dense serial
//! reference.

use deinsum_exec::{Communicator, InProcess};
use deinsum_sparse::halo::{self, balance_rows, spmm as dist_spmm, HaloPlan};
use deinsum_sparse::io::{read_mtx, read_npz, read_tns};
use deinsum_sparse::{gen, kernels, Csr, SparseError, SparseTensor};
use std::path::PathBuf;

mod common;
use common::{close, dense, dense_mm};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deinsum-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn duplicates_are_summed_and_explicit_zeros_kept() {
    let t = SparseTensor::<f64>::from_entries(
        vec![3, 4],
        vec![2, 1, 0, 3, 2, 1, 1, 1],
        vec![1.0, 2.0, 0.5, 0.0],
    )
    .unwrap();
    assert_eq!(t.nnz(), 3);
    assert_eq!(t.coord(0), &[0, 3]);
    assert_eq!(t.coord(1), &[1, 1]);
    assert_eq!(t.values(), &[2.0, 0.0, 1.5]);
    let err = SparseTensor::<f64>::from_entries(vec![3, 4], vec![3, 0], vec![1.0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nonzero 0: index 3 of mode 0 is out of range for extent 3"
    );
}

#[test]
fn matrix_market_general_symmetric_pattern_and_skew() {
    let g = tmp(
        "g.mtx",
        "%%MatrixMarket matrix coordinate real general\n% c\n3 4 3\n1 1 2.5\n3 4 -1\n1 1 0.5\n",
    );
    let t = read_mtx::<f64>(&g).unwrap();
    assert_eq!(t.shape(), &[3, 4]);
    assert_eq!(t.to_dense()[0], 3.0);
    assert_eq!(t.to_dense()[11], -1.0);
    let s = tmp(
        "s.mtx",
        "%%MatrixMarket matrix coordinate integer symmetric\n3 3 2\n2 1 4\n3 3 1\n",
    );
    let d = read_mtx::<f64>(&s).unwrap().to_dense();
    assert_eq!(d, vec![0.0, 4.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    let p = tmp(
        "p.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n2 2\n",
    );
    assert_eq!(
        read_mtx::<f64>(&p).unwrap().to_dense(),
        vec![0.0, 0.0, 0.0, 1.0]
    );
    let k = tmp(
        "k.mtx",
        "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 3\n",
    );
    assert_eq!(
        read_mtx::<f64>(&k).unwrap().to_dense(),
        vec![0.0, -3.0, 3.0, 0.0]
    );
}

#[test]
fn matrix_market_errors_name_file_line_and_field() {
    let cases = [
        (
            "h.mtx",
            "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
            ":1: header: format 'array'",
        ),
        (
            "r.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
            ":3: row index: 3 is out of range 1..=2",
        ),
        (
            "v.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x\n",
            ":3: value: 'x' is not a number",
        ),
        (
            "t.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 1\n",
            ":5: entries: the size line declares 3 entries, the file has 2",
        ),
        (
            "m.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 1\n",
            ":4: entries: more entries than the 1",
        ),
        (
            "z.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1\n",
            ":3: row index: 0 is out of range",
        ),
        (
            "u.mtx",
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 1\n1 2 1\n",
            ":3: entry: a symmetric file stores the lower triangle only",
        ),
        (
            "s.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 x 1\n",
            ":2: size line: columns 'x' is not a count",
        ),
    ];
    for (name, text, want) in cases {
        let p = tmp(name, text);
        let e = read_mtx::<f64>(&p).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains(want), "{name}: {e}");
    }
    let dir = std::env::temp_dir();
    let e = read_mtx::<f64>(&dir).unwrap_err().to_string();
    assert!(e.contains("is a directory"), "{e}");
}

#[test]
fn frostt_reads_with_and_without_a_shape() {
    let p = tmp("x.tns", "# a comment\n1 1 1 1.5\n2 3 4 -2\n1 1 1 0.5\n");
    let t = read_tns::<f64>(&p, None).unwrap();
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.nnz(), 2);
    assert_eq!(t.values(), &[2.0, -2.0]);
    let t = read_tns::<f64>(&p, Some(&[5, 5, 5])).unwrap();
    assert_eq!(t.shape(), &[5, 5, 5]);
    let e = read_tns::<f64>(&p, Some(&[1, 5, 5]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":3: index of mode 0: 2 is out of range 1..=1"),
        "{e}"
    );
    let bad = tmp("b.tns", "1 1 1 1\n1 1 2\n");
    let e = read_tns::<f64>(&bad, None).unwrap_err().to_string();
    assert!(
        e.contains("b.tns:2: entry: 3 fields, the first entry had 4"),
        "{e}"
    );
}

/// Archives written by `scipy.sparse.save_npz` (tests/data/make_npz.py): the same 4 x 5
/// matrix as CSR, CSC and COO, compressed and not, with int32 and int64 indices.
#[test]
fn scipy_npz_archives_read_as_scipy_wrote_them() {
    let want = std::fs::read_to_string(data("npz_dense.txt")).unwrap();
    let want: Vec<f64> = want
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    for name in [
        "csr.npz",
        "csc.npz",
        "coo.npz",
        "csr_uncompressed.npz",
        "csr_i64.npz",
        "coo_dups.npz",
    ] {
        let t = read_npz::<f64>(&data(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.shape(), &[4, 5], "{name}");
        close(&t.to_dense(), &want, name);
    }
    let e = read_npz::<f64>(&data("npz_dense.txt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("npz_dense.txt"), "{e}");
}

#[test]
fn kernels_equal_dense_products() {
    let a = gen::uniform::<f64>(&[37, 29], 0.2, 3).unwrap();
    let csr = a.to_csr().unwrap();
    let ad = a.to_dense();
    let narrow = csr.narrow().unwrap();
    for k in [1, 5, 8, 13, 16, 29, 40] {
        let b = dense(29 * k, 0);
        let want = dense_mm(&ad, &b, 37, 29, k);
        close(
            &kernels::spmm(&csr, &b, k).unwrap(),
            &want,
            &format!("spmm k={k}"),
        );
        // 4-byte columns, and the accumulating form: C = 1 + A B from a C of ones.
        close(
            &kernels::spmm(&narrow, &b, k).unwrap(),
            &want,
            &format!("u32 k={k}"),
        );
        let mut c = vec![1.0; 37 * k];
        kernels::spmm_into(&narrow, &b, k, &mut c, true).unwrap();
        let plus: Vec<f64> = want.iter().map(|x| x + 1.0).collect();
        close(&c, &plus, &format!("spmm_into add k={k}"));
        // Overwriting ignores what C held.
        kernels::spmm_into(&csr, &b, k, &mut c, false).unwrap();
        close(&c, &want, &format!("spmm_into k={k}"));
    }
    // SDDMM on A's pattern: (U V^T) .* A at the stored entries.
    let (u, v) = (dense(37 * 4, 0), dense(29 * 4, 0));
    let got = kernels::sddmm(&csr, &u, &v, 4).unwrap();
    let t = csr.to_tensor();
    for (e, g) in got.iter().enumerate() {
        let (i, j) = (t.coord(e)[0], t.coord(e)[1]);
        let dot: f64 = (0..4).map(|r| u[i * 4 + r] * v[j * 4 + r]).sum();
        assert!((g - t.values()[e] * dot).abs() < 1e-12, "entry {e}");
    }
    // SpGEMM A * B with B sparse 29 x 31.
    let b = gen::uniform::<f64>(&[29, 31], 0.15, 4).unwrap();
    let c = kernels::spgemm(&csr, &b.to_csr().unwrap()).unwrap();
    close(
        &c.to_tensor().to_dense(),
        &dense_mm(&ad, &b.to_dense(), 37, 29, 31),
        "spgemm",
    );
    // Wide and sparse: short output rows are sorted, a full row of A (row 3) gives a long
    // one read back from the column bits; both must come out in column order.
    let a = gen::uniform::<f64>(&[20, 50], 0.1, 7).unwrap();
    let mut coords: Vec<usize> = (0..a.nnz()).flat_map(|e| a.coord(e).to_vec()).collect();
    let mut vals = a.values().to_vec();
    for j in 0..50 {
        coords.extend([3, j]);
        vals.push(0.5);
    }
    let a = SparseTensor::from_entries(vec![20, 50], coords, vals).unwrap();
    let b = gen::uniform::<f64>(&[50, 40_000], 1e-4, 8).unwrap();
    let c = kernels::spgemm(&a.to_csr().unwrap(), &b.to_csr().unwrap()).unwrap();
    for i in 0..c.nrows {
        let cols = &c.indices[c.indptr[i]..c.indptr[i + 1]];
        assert!(cols.windows(2).all(|w| w[0] < w[1]), "row {i} out of order");
    }
    let long = c.indptr[4] - c.indptr[3];
    let short = c.indptr[1] - c.indptr[0];
    assert!(
        long * 1024 >= 40_000 && short * 1024 < 40_000,
        "{long} {short}"
    );
    close(
        &c.to_tensor().to_dense(),
        &dense_mm(&a.to_dense(), &b.to_dense(), 20, 50, 40_000),
        "spgemm wide",
    );
}

#[test]
fn sparse_mttkrp_equals_the_dense_one() {
    let (i, j, k, r) = (9, 7, 6, 3);
    let x = gen::uniform::<f64>(&[i, j, k], 0.1, 5).unwrap();
    let xd = x.to_dense();
    let fj = dense(j * r, 0);
    let fk = dense(k * r, 0);
    let got = kernels::mttkrp(&x, &[&[], &fj, &fk], 0, r).unwrap();
    let mut want = vec![0.0; i * r];
    for a in 0..i {
        for b in 0..j {
            for c in 0..k {
                for q in 0..r {
                    want[a * r + q] += xd[(a * j + b) * k + c] * fj[b * r + q] * fk[c * r + q];
                }
            }
        }
    }
    close(&got, &want, "mttkrp");
}

#[test]
fn row_cuts_balance_nonzeros() {
    // Rows with 10, 0, 0, 1, 1, 1, 1 nonzeros over 2 ranks: the heavy row alone is one part.
    let indptr = [0, 10, 10, 10, 11, 12, 13, 14];
    assert_eq!(balance_rows(&indptr, 2), vec![0, 1, 7]);
    assert_eq!(balance_rows(&indptr, 1), vec![0, 7]);
    let cuts = balance_rows(&indptr, 9);
    assert_eq!(cuts.len(), 10);
    assert!(cuts.windows(2).all(|w| w[0] <= w[1]) && cuts[9] == 7);
}

/// Runs the halo SpMM of `a` times a dense B on P in-process ranks and checks the result and
/// that every rank received exactly the plan's words.
fn check_halo(a: &Csr<f64>, k: usize, procs: usize) -> HaloPlan {
    let plan = HaloPlan::build(a, k, procs).unwrap();
    let b = dense(a.ncols * k, 0);
    let want = dense_mm(&a.to_tensor().to_dense(), &b, a.nrows, a.ncols, k);
    let parts = InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            let r = comm.rank();
            let a_local = a.rows(plan.a_cuts[r], plan.a_cuts[r + 1]);
            let b_local = &b[plan.b_cuts()[r] * k..plan.b_cuts()[r + 1] * k];
            let before = comm.traffic();
            let c = dist_spmm(comm, &plan, &a_local, b_local)?;
            let after = comm.traffic();
            Ok::<_, SparseError>((
                c,
                (after.received - before.received) / 8,
                (after.sent - before.sent) / 8,
            ))
        })
        .unwrap();
    let mut got = Vec::new();
    for (r, (c, recv, sent)) in parts.into_iter().enumerate() {
        assert_eq!(recv, plan.received_words(r), "P={procs} rank {r} received");
        assert_eq!(sent, plan.sent_words(r), "P={procs} rank {r} sent");
        assert!(plan.received_words(r) <= plan.replication_words(r));
        got.extend(c);
    }
    close(&got, &want, "halo spmm");
    plan
}

#[test]
fn halo_spmm_equals_serial_for_many_rank_counts() {
    // Square (the vector follows the rows), rectangular, with empty rows.
    let sq = gen::uniform::<f64>(&[53, 53], 0.06, 11)
        .unwrap()
        .to_csr()
        .unwrap();
    let rect = gen::uniform::<f64>(&[23, 41], 0.1, 12)
        .unwrap()
        .to_csr()
        .unwrap();
    let mut coords = Vec::new();
    let mut vals = Vec::new();
    for i in (0..30).step_by(3) {
        coords.extend([i, (i * 7) % 30]);
        vals.push(1.0 + i as f64);
    }
    let sparse_rows = SparseTensor::from_entries(vec![30, 30], coords, vals)
        .unwrap()
        .to_csr()
        .unwrap();
    for procs in 1..=16 {
        check_halo(&sq, 1, procs);
        check_halo(&rect, 3, procs);
        check_halo(&sparse_rows, 2, procs);
    }
    // More ranks than rows: some ranks hold nothing.
    let tiny = gen::uniform::<f64>(&[5, 5], 0.5, 13)
        .unwrap()
        .to_csr()
        .unwrap();
    check_halo(&tiny, 2, 11);
}

#[test]
fn prepared_rows_on_a_threaded_pool_equal_serial() {
    // R-MAT rows split over 3 ranks, each kernel on a 3-thread pool (rows in parallel
    // chunks), k = 1 (SpMV) and k = 21 (blocks of 16, then the remainder).
    let a = gen::rmat::<f64>(11, 16, 22).unwrap().to_csr().unwrap();
    let ad = a.to_tensor().to_dense();
    for k in [1, 21] {
        let plan = HaloPlan::build(&a, k, 3).unwrap();
        let b = dense(a.ncols * k, 0);
        let parts = InProcess::new(3)
            .unwrap()
            .run(|comm| {
                let r = comm.rank();
                let a_local = a.rows(plan.a_cuts[r], plan.a_cuts[r + 1]);
                let local = halo::LocalRows::build(&plan, r, &a_local)?;
                let (own, in_halo) = local.nnz_split();
                assert_eq!(own + in_halo, a_local.nnz());
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(3)
                    .build()
                    .unwrap();
                let b_local = &b[plan.b_cuts()[r] * k..plan.b_cuts()[r + 1] * k];
                halo::spmm_local(comm, &plan, &local, b_local, Some(&pool))
            })
            .unwrap();
        close(
            &parts.concat(),
            &dense_mm(&ad, &b, a.nrows, a.ncols, k),
            &format!("threaded k={k}"),
        );
    }
    // Rows prepared for one rank are refused on another.
    let plan = HaloPlan::build(&a, 1, 2).unwrap();
    let local = halo::LocalRows::build(&plan, 0, &a.rows(0, plan.a_cuts[1])).unwrap();
    let b = dense(a.ncols, 0);
    let errs = InProcess::new(2)
        .unwrap()
        .run(|comm| {
            let r = comm.rank();
            let b_local = &b[plan.b_cuts()[r]..plan.b_cuts()[r + 1]];
            Ok::<_, SparseError>(halo::spmm_local(comm, &plan, &local, b_local, None).is_err())
        })
        .unwrap();
    // Rank 1 refuses rank 0's rows (and rank 0, left without its peer, fails too).
    assert!(errs[1]);
}

#[test]
fn halo_on_rmat_moves_less_than_replication() {
    let a = gen::rmat::<f64>(10, 8, 21).unwrap().to_csr().unwrap();
    let plan = check_halo(&a, 1, 4);
    let repl: u64 = (0..4).map(|r| plan.replication_words(r)).sum();
    assert!(
        plan.total_received() < repl,
        "{} vs {repl}",
        plan.total_received()
    );
    assert!(plan.imbalance() < 1.5, "imbalance {}", plan.imbalance());
}

#[test]
fn generators_are_seeded_and_refuse_bad_arguments() {
    let a = gen::uniform::<f64>(&[100, 100], 0.05, 1).unwrap();
    assert_eq!(a, gen::uniform::<f64>(&[100, 100], 0.05, 1).unwrap());
    assert!((300..700).contains(&a.nnz()), "{}", a.nnz());
    assert!(gen::uniform::<f64>(&[4], 0.0, 1).is_err());
    assert!(gen::uniform::<f64>(&[4], 1.5, 1).is_err());
    assert_eq!(gen::uniform::<f64>(&[3, 3], 1.0, 1).unwrap().nnz(), 9);
    let g = gen::rmat::<f64>(6, 16, 2).unwrap();
    assert_eq!(g.shape(), &[64, 64]);
    assert!(gen::rmat::<f64>(0, 16, 2).is_err());
}

/// Matrix Market `complex` files: general (duplicates summed) and hermitian (the mirror
/// conjugated), read as c128 and c64; refused for a real type, naming the complex one; a
/// hermitian real file is refused.
#[test]
fn matrix_market_complex_general_and_hermitian() {
    use deinsum_exec::scalar::{Complex32, Complex64};
    let z = Complex64::new;
    let g = tmp(
        "zg.mtx",
        "%%MatrixMarket matrix coordinate complex general\n2 3 3\n1 2 1.5 -2\n2 3 0 4\n1 2 0.5 1\n",
    );
    let d = read_mtx::<Complex64>(&g).unwrap().to_dense();
    let o = z(0.0, 0.0);
    assert_eq!(d, vec![o, z(2.0, -1.0), o, o, o, z(0.0, 4.0)]);
    let d32 = read_mtx::<Complex32>(&g).unwrap().to_dense();
    assert_eq!(d32[1], Complex32::new(2.0, -1.0));
    let h = tmp(
        "zh.mtx",
        "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 3 0\n2 1 1 2\n",
    );
    let d = read_mtx::<Complex64>(&h).unwrap().to_dense();
    assert_eq!(d, vec![z(3.0, 0.0), z(1.0, -2.0), z(1.0, 2.0), o]);
    let err = read_mtx::<f64>(&g).unwrap_err().to_string();
    assert!(err.contains("use --dtype c128"), "{err}");
    let err = read_mtx::<f32>(&g).unwrap_err().to_string();
    assert!(err.contains("use --dtype c64"), "{err}");
    let rh = tmp(
        "rh.mtx",
        "%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n1 1 3\n",
    );
    let err = read_mtx::<Complex64>(&rh).unwrap_err().to_string();
    assert!(err.contains("hermitian for a complex field"), "{err}");
    // A real file reads into a complex type with zero imaginary parts.
    let r = tmp(
        "zr.mtx",
        "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2.5\n",
    );
    assert_eq!(
        read_mtx::<Complex64>(&r).unwrap().to_dense(),
        vec![z(2.5, 0.0)]
    );
}

/// SciPy's complex matrices (`save_npz` of complex128 CSR and complex64 COO, written by
/// tests/data/make_npz.py) read as complex; refused for a real type.
#[test]
fn npz_complex_data() {
    use deinsum_exec::scalar::Complex64;
    let want: Vec<Complex64> = [
        (1.5, -7.5),
        (0.0, 0.0),
        (0.0, 0.0),
        (-2.0, -4.5),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (3.25, 3.5),
        (0.0, 0.0),
        (0.0, 0.0),
        (4.0, 6.5),
        (0.5, 7.5),
        (0.0, 0.0),
        (-1.0, 9.5),
        (0.0, 0.0),
        (0.0, 0.0),
    ]
    .into_iter()
    .map(|(re, im)| Complex64::new(re, im))
    .collect();
    for f in ["csr_c128.npz", "coo_c64.npz"] {
        let t = read_npz::<Complex64>(&data(f)).unwrap();
        assert_eq!(t.shape(), &[4, 5]);
        assert_eq!(t.to_dense(), want, "{f}");
        let err = read_npz::<f64>(&data(f)).unwrap_err().to_string();
        assert!(err.contains("use --dtype c128"), "{f}: {err}");
    }
}
