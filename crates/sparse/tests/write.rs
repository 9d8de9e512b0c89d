//! The writers of sparse results: every format read back by the crate's own readers gives the
//! tensor written, bit for bit (explicit zeros kept); bad outputs are errors naming the file.

mod common;

use deinsum_sparse::io::{self, OutputFormat};
use deinsum_sparse::{kernels, SparseError, SparseTensor};
use std::path::PathBuf;

/// A folder of the system's temporary directory for test `tag` of this process (the tests
/// run in parallel, each removes its own).
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deinsum-sparse-write-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Values whose shortest decimal forms need every digit, an exponent, or a sign: a writer that
/// rounds would change their bits.
fn awkward(n: usize) -> Vec<f64> {
    let pool = [
        0.1,
        1.0 / 3.0,
        -2.5e17,
        1e-300,
        f64::MIN_POSITIVE,
        5e-324,
        123_456_789.012_345_68,
        -0.0,
        f64::MAX,
        std::f64::consts::PI,
        0.0,
        -7.0,
    ];
    (0..n).map(|x| pool[x % pool.len()]).collect()
}

/// The same tensor, bit for bit.
fn same(got: &SparseTensor<f64>, want: &SparseTensor<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.nnz(), want.nnz(), "{what}: stored entries");
    for e in 0..want.nnz() {
        assert_eq!(got.coord(e), want.coord(e), "{what}: entry {e}");
        assert_eq!(
            got.values()[e].to_bits(),
            want.values()[e].to_bits(),
            "{what}: entry {e}: {} vs {}",
            got.values()[e],
            want.values()[e]
        );
    }
}

#[test]
fn every_format_reads_back_bit_for_bit() {
    let d = dir("formats");
    // A matrix with explicit zeros (-0.0 too), an empty row and extreme values.
    let mut coords = Vec::new();
    for i in [0usize, 1, 3, 4, 6] {
        for j in [0usize, 2, 5, 8] {
            if (i + j) % 3 != 1 {
                coords.extend([i, j]);
            }
        }
    }
    let n = coords.len() / 2;
    let m = SparseTensor::from_entries(vec![7, 9], coords, awkward(n)).unwrap();
    for ext in ["mtx", "tns", "npz"] {
        let p = d.join(format!("m.{ext}"));
        io::write(&p, &m).unwrap();
        let back = io::read::<f64>(&p, Some(m.shape())).unwrap();
        same(&back, &m, ext);
    }
    // Densified: the dense array, with -0.0 as stored (the .npy reader is exec's).
    let p = d.join("m.npy");
    io::write(&p, &m).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let header = deinsum_exec::npy::header_bytes::<f64>(&[7, 9]);
    assert_eq!(&bytes[..header.len()], &header[..]);
    let got: Vec<u64> = bytes[header.len()..]
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<u64> = m.to_dense().iter().map(|v| v.to_bits()).collect();
    assert_eq!(got.len(), 63);
    // to_dense adds into +0.0, so -0.0 stays +0.0 there; the writer stores it as is.
    for (x, (g, w)) in got.iter().zip(&want).enumerate() {
        let gv = f64::from_bits(*g);
        assert!(gv == f64::from_bits(*w), "element {x}: {gv}");
    }
    // An order-4 tensor through FROSTT; Matrix Market and SciPy's CSR refuse it by name.
    let t = SparseTensor::from_entries(
        vec![3, 4, 2, 5],
        vec![0, 0, 0, 0, 2, 3, 1, 4, 1, 2, 0, 3, 2, 3, 1, 4],
        vec![1.5, -0.25, 0.0, 2.0],
    )
    .unwrap();
    let p = d.join("t.tns");
    io::write(&p, &t).unwrap();
    same(&io::read::<f64>(&p, Some(t.shape())).unwrap(), &t, "tns 4");
    for ext in ["mtx", "npz"] {
        let p = d.join(format!("t.{ext}"));
        let e = io::write(&p, &t).unwrap_err().to_string();
        assert!(
            e.contains(&format!("t.{ext}")) && e.contains("4 modes"),
            "{e}"
        );
        assert!(!p.exists(), "{ext}: nothing written");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn duplicates_summed_and_explicit_zeros_survive_the_round_trip() {
    let d = dir("dups");
    let dup = common::duplicates();
    for ext in ["mtx", "tns", "npz"] {
        let p = d.join(format!("dup.{ext}"));
        io::write(&p, &dup).unwrap();
        let back = io::read::<f64>(&p, Some(dup.shape())).unwrap();
        same(&back, &dup, ext);
        // (0,3) was stored as an explicit zero and is still stored.
        assert!((0..back.nnz()).any(|e| back.coord(e) == [0, 3]), "{ext}");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn serial_spgemm_and_sddmm_results_round_trip() {
    let d = dir("serial");
    let a = kernels::spgemm(
        &common::every_third_row(40).to_csr().unwrap(),
        &common::symmetric_mtx("write")
            .to_csr()
            .map(|s| {
                // Widen the 7 x 7 symmetric matrix to 40 x 40 so the product is defined.
                let t = s.to_tensor();
                let mut coords = Vec::new();
                for e in 0..t.nnz() {
                    coords.extend_from_slice(t.coord(e));
                }
                SparseTensor::from_entries(vec![40, 40], coords, t.values().to_vec())
                    .unwrap()
                    .to_csr()
                    .unwrap()
            })
            .unwrap(),
    )
    .unwrap()
    .to_tensor();
    let s = common::every_third_row(40);
    let k = 3;
    let u = common::dense(40 * k, 1);
    let v = common::dense(40 * k, 2);
    let vals = kernels::sddmm(&s.to_csr().unwrap(), &u, &v, k).unwrap();
    let sd = s.with_values(vals).unwrap();
    for (name, t) in [("spgemm", &a), ("sddmm", &sd)] {
        for ext in ["mtx", "tns", "npz", "npy"] {
            let p = d.join(format!("{name}.{ext}"));
            io::write(&p, t).unwrap();
            if ext == "npy" {
                continue;
            }
            same(
                &io::read::<f64>(&p, Some(t.shape())).unwrap(),
                t,
                &format!("{name}.{ext}"),
            );
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn dense_results_write_their_nonzeros() {
    let data = vec![0.0, 1.5, 0.0, -2.0, 0.0, 0.0, 3.0, 0.0];
    let t = SparseTensor::from_dense(vec![2, 2, 2], &data).unwrap();
    assert_eq!(t.nnz(), 3);
    assert_eq!(t.coord(2), [1, 1, 0]);
    assert_eq!(t.to_dense(), data);
    assert!(matches!(
        SparseTensor::<f64>::from_dense(vec![3, 3], &data),
        Err(SparseError::Shape(_))
    ));
}

#[test]
fn bad_outputs_are_errors_naming_the_file() {
    let d = dir("errors");
    let m = common::duplicates();
    // Unknown extension.
    let e = io::write(&d.join("c.csv"), &m).unwrap_err();
    assert!(matches!(e, SparseError::Format { .. }), "{e}");
    assert!(e.to_string().contains("c.csv") && e.to_string().contains(".mtx"));
    assert!(OutputFormat::of(&d.join("noext")).is_err());
    // A directory that does not exist, and a directory.
    for p in [d.join("missing/c.mtx"), d.clone().join("sub.mtx")] {
        if p.ends_with("sub.mtx") {
            std::fs::create_dir_all(&p).unwrap();
        }
        let e = io::write(&p, &m).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
    }
    // A value that is not finite is refused before the file exists.
    let inf = m.with_values(vec![f64::INFINITY; m.nnz()]).unwrap();
    let p = d.join("inf.mtx");
    let e = io::write(&p, &inf).unwrap_err().to_string();
    assert!(e.contains("inf.mtx") && e.contains("finite"), "{e}");
    assert!(!p.exists());
    // FROSTT cannot hold an empty tensor (no header gives its order and shape).
    let empty = SparseTensor::<f64>::from_entries(vec![3, 3], vec![], vec![]).unwrap();
    let e = io::write(&d.join("e.tns"), &empty).unwrap_err().to_string();
    assert!(
        e.contains("e.tns") && e.contains("no stored entries"),
        "{e}"
    );
    // An empty matrix is fine in Matrix Market and SciPy's CSR.
    for ext in ["mtx", "npz"] {
        let p = d.join(format!("e.{ext}"));
        io::write(&p, &empty).unwrap();
        same(&io::read::<f64>(&p, None).unwrap(), &empty, ext);
    }
    std::fs::remove_dir_all(&d).ok();
}
