//! Sessions on in-process ranks: chains of einsums through distributed arrays equal the serial
//! result at P = 1, 2, 3, 5, 8 (non-divisible extents); arrays stay where they were placed;
//! the plan cache; bad input is refused with clear errors.

use deinsum::exec::reference::naive;
use deinsum::expr::{parse, ExtentSpec};
use deinsum::{OutLayout, Session, SessionError};

/// Serial `expr` over whole row-major operands of `shapes`.
fn serial(expr: &str, ops: &[(&[usize], &[f64])]) -> Vec<f64> {
    let spec = ExtentSpec {
        shapes: Some(ops.iter().map(|o| o.0.to_vec()).collect()),
        ..ExtentSpec::default()
    };
    let e = parse(expr, &spec).unwrap();
    naive(&e, &|k, x| ops[k].1[x as usize])
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|x| (((x as u64 * 2654435761 + seed * 97) % 1000) as f64) / 500.0 - 1.0)
        .collect()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-9 * (1.0 + w.abs()), "{g} vs {w}");
    }
}

#[test]
fn chains_equal_serial_at_many_rank_counts() {
    let (i, j, k, a) = (7, 5, 6, 3);
    let x = data(i * j * k, 1);
    let b = data(j * a, 2);
    let c = data(k * a, 3);
    let m = data(i * a, 4);
    for p in [1, 2, 3, 5, 8] {
        let s = Session::local(p).unwrap();
        let xa = s.array(&[i, j, k], x.clone()).unwrap();
        let ba = s.array(&[j, a], b.clone()).unwrap();
        let ca = s.array(&[k, a], c.clone()).unwrap();
        // MTTKRP mode 0, then a product with its result, then mode 1 on the placed X.
        let m0 = s.einsum("ijk,ja,ka->ia", &[&xa, &ba, &ca]).unwrap();
        let want0 = serial(
            "ijk,ja,ka->ia",
            &[(&[i, j, k], &x), (&[j, a], &b), (&[k, a], &c)],
        );
        close(&m0.gather::<f64>().unwrap(), &want0);
        assert!(xa.layout().is_some(), "X is placed at its first use");
        let gram = s.einsum("ia,ib->ab", &[&m0, &m0]).unwrap();
        close(
            &gram.gather::<f64>().unwrap(),
            &serial("ia,ib->ab", &[(&[i, a], &want0), (&[i, a], &want0)]),
        );
        let ma = s.array(&[i, a], m.clone()).unwrap();
        let m1 = s.einsum("ijk,ia,ka->ja", &[&xa, &ma, &ca]).unwrap();
        close(
            &m1.gather::<f64>().unwrap(),
            &serial(
                "ijk,ia,ka->ja",
                &[(&[i, j, k], &x), (&[i, a], &m), (&[k, a], &c)],
            ),
        );
        let stats = s.stats();
        assert_eq!(stats.len(), 3);
        assert_eq!(stats[0].operand_words[0], 0, "X is read where it computes");
        // A result used again: chain on the distributed result, out in canonical layout.
        let t = s
            .einsum_with("ja,ab->jb", &[&m1, &gram], &OutLayout::Canonical)
            .unwrap();
        let want_m1 = m1.gather::<f64>().unwrap();
        let want_g = gram.gather::<f64>().unwrap();
        close(
            &t.gather::<f64>().unwrap(),
            &serial("ja,ab->jb", &[(&[j, a], &want_m1), (&[a, a], &want_g)]),
        );
    }
}

#[test]
fn a_placed_tensor_is_not_moved_again_and_plans_are_cached() {
    let (i, j, k, r) = (9, 8, 7, 3);
    let s = Session::local(4).unwrap();
    let x = s.array(&[i, j, k], data(i * j * k, 5)).unwrap();
    let fa = s.array(&[i, r], data(i * r, 6)).unwrap();
    let fb = s.array(&[j, r], data(j * r, 7)).unwrap();
    let fc = s.array(&[k, r], data(k * r, 8)).unwrap();
    for _ in 0..3 {
        s.einsum("ijk,ja,ka->ia", &[&x, &fb, &fc]).unwrap();
        s.einsum("ijk,ia,ka->ja", &[&x, &fa, &fc]).unwrap();
        s.einsum("ijk,ia,ja->ka", &[&x, &fa, &fb]).unwrap();
    }
    let st = s.stats();
    assert_eq!(st[0].operand_words[0], 0);
    for e in &st[3..] {
        assert_eq!(e.operand_words[0], 0, "{}: X moved", e.expr);
    }
    // The factors were whole in the first sweep and placed since: from the third sweep on
    // every plan is the cached one.
    for e in &st[6..] {
        assert!(e.cached, "{}: planned again", e.expr);
    }
}

#[test]
fn npy_round_trip_and_refusals() {
    let dir = std::env::temp_dir().join(format!("deinsum-session-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = Session::local(3).unwrap();
    let a = s.array(&[5, 4], data(20, 9)).unwrap();
    let path = dir.join("a.npy");
    a.save_npy(&path).unwrap();
    let b = s.load_npy(&path).unwrap();
    assert_eq!(b.shape(), &[5, 4]);
    let c = s.einsum("ij->ji", &[&b]).unwrap();
    let want = serial("ij->ji", &[(&[5, 4], &data(20, 9))]);
    close(&c.gather::<f64>().unwrap(), &want);
    // Saving over the file a live array reads from is refused; once it is gone, allowed.
    let err = c.save_npy(&path).unwrap_err();
    assert!(matches!(err, SessionError::SaveOverSource { .. }), "{err}");
    drop(b);
    c.save_npy(&path).unwrap();

    // Operands from two sessions.
    let other = Session::local(2).unwrap();
    let o = other.array(&[4, 5], data(20, 1)).unwrap();
    let err = s.einsum("ij,jk->ik", &[&a, &o]).unwrap_err();
    assert!(err.to_string().contains("another session"), "{err}");
    // A shape mismatch names the array.
    let bad = s.array(&[3, 5], data(15, 1)).unwrap();
    let err = s.einsum("ij,jk->ik", &[&a, &bad]).unwrap_err();
    assert!(err.to_string().contains(bad.name()), "{err}");
    // Wrong element type asked of gather.
    assert!(a.gather::<f32>().is_err());
    // Used after its session closed: an error, never a crash.
    s.close();
    let err = a.gather::<f64>().unwrap_err();
    assert!(matches!(err, SessionError::Closed { .. }), "{err}");
    assert!(s.einsum("ij->ji", &[&a]).is_err());
    drop(s);
    assert!(a.gather::<f64>().is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn f32_arrays_compute_in_f32() {
    let s = Session::local(3).unwrap();
    let a: Vec<f32> = (0..12).map(|x| x as f32).collect();
    let x = s.array(&[3, 4], a.clone()).unwrap();
    let y = s.einsum("ij,ij->i", &[&x, &x]).unwrap();
    assert_eq!(y.dtype(), deinsum::DType::F32);
    let got = y.gather::<f32>().unwrap();
    let want: Vec<f32> = (0..3)
        .map(|r| (0..4).map(|c| a[r * 4 + c] * a[r * 4 + c]).sum())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn gathering_more_than_available_memory_is_refused_with_its_size() {
    // A .npy header alone: the array is read lazily, so loading it allocates nothing.
    let dir = std::env::temp_dir().join(format!("deinsum-session-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.npy");
    let shape = [1usize << 20, 1 << 20, 1 << 8];
    std::fs::write(&path, deinsum::exec::npy::header_bytes::<f64>(&shape)).unwrap();
    let s = Session::local(2).unwrap();
    let h = s.load_npy(&path).unwrap();
    let err = h.gather::<f64>().unwrap_err();
    let bytes = 8u128 << 48;
    assert!(
        matches!(err, SessionError::TooLarge { bytes: b, .. } if b == bytes),
        "{err}"
    );
    assert!(err.to_string().contains(&bytes.to_string()), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
