//! Local kernels: contractions against a naive loop, and tiled fused groups.

use deinsum_exec::kernels::{contract, eval_group, GroupStats, GroupSteps, LocalTensor};
use deinsum_path::{NodeId, Step};
use deinsum_plan::Interval;

fn tensor(indices: &str, shape: &[usize], seed: u64) -> LocalTensor<f64> {
    let n: usize = shape.iter().product();
    LocalTensor {
        indices: indices.chars().collect(),
        ranges: shape.iter().map(|&s| (0, s)).collect(),
        data: (0..n as u64)
            .map(|x| deinsum_exec::data::seeded_value(seed, 0, x))
            .collect(),
    }
}

#[test]
fn batched_gemm_matches_loops() {
    // b,i,j x b,j,k -> k,b,i (output transposed on purpose).
    let (nb, ni, nj, nk) = (3, 4, 5, 6);
    let a = tensor("bij", &[nb, ni, nj], 1);
    let b = tensor("bjk", &[nb, nj, nk], 2);
    let c = contract(&a, &b, &['k', 'b', 'i']).unwrap();
    assert_eq!(c.indices, vec!['k', 'b', 'i']);
    for k in 0..nk {
        for bb in 0..nb {
            for i in 0..ni {
                let want: f64 = (0..nj)
                    .map(|j| a.data[(bb * ni + i) * nj + j] * b.data[(bb * nj + j) * nk + k])
                    .sum();
                let got = c.data[(k * nb + bb) * ni + i];
                assert!((got - want).abs() < 1e-12);
            }
        }
    }
}

#[test]
fn one_sided_sums_and_outer_products() {
    let a = tensor("ij", &[3, 4], 1);
    let b = tensor("k", &[5], 2);
    // Sum over j (only in a), outer product with k.
    let c = contract(&a, &b, &['i', 'k']).unwrap();
    for i in 0..3 {
        for k in 0..5 {
            let want: f64 = (0..4).map(|j| a.data[i * 4 + j]).sum::<f64>() * b.data[k];
            assert!((c.data[i * 5 + k] - want).abs() < 1e-12);
        }
    }
}

#[test]
fn tiled_mttkrp_bounds_the_khatri_rao_intermediate() {
    let (ni, nj, nk, na) = (6, 7, 9, 4);
    let x = tensor("ijk", &[ni, nj, nk], 1);
    let b = tensor("ja", &[nj, na], 2);
    let c = tensor("ka", &[nk, na], 3);
    let s0 = Step {
        operands: vec![NodeId(1), NodeId(2)],
        operand_indices: vec![vec!['j', 'a'], vec!['k', 'a']],
        output: vec!['j', 'k', 'a'],
    };
    let s1 = Step {
        operands: vec![NodeId(0), NodeId(3)],
        operand_indices: vec![vec!['i', 'j', 'k'], vec!['j', 'k', 'a']],
        output: vec!['i', 'a'],
    };
    let g = GroupSteps {
        steps: vec![&s0, &s1],
        nodes: vec![NodeId(3), NodeId(4)],
    };
    let idx = ['j', 'a', 'k', 'i'];
    let ranges = [nj, na, nk, ni].map(|n| Interval::new(0, n));
    let ins = [(0usize, &x), (1, &b), (2, &c)];
    let mut whole = GroupStats::default();
    let full = eval_group(&g, &idx, &ranges, &ins, u64::MAX, &mut whole).unwrap();
    assert_eq!(whole.max_intermediate, (nj * nk * na) as u64);
    let tile = 20u64;
    let mut tiled = GroupStats::default();
    let t = eval_group(&g, &idx, &ranges, &ins, tile, &mut tiled).unwrap();
    // A tile of the KRP plus the partial sums of the output (held while tiles accumulate).
    assert!(
        tiled.max_intermediate <= tile + 2 * (ni * na) as u64,
        "{tiled:?}"
    );
    assert!(tiled.max_intermediate < whole.max_intermediate);
    assert_eq!(whole.madds, tiled.madds);
    for (p, q) in full.data.iter().zip(&t.data) {
        assert!((p - q).abs() < 1e-12);
    }
}

/// All orders of `xs`.
fn perms(xs: &[char]) -> Vec<Vec<char>> {
    if xs.len() <= 1 {
        return vec![xs.to_vec()];
    }
    let mut out = Vec::new();
    for (i, &x) in xs.iter().enumerate() {
        let mut rest = xs.to_vec();
        rest.remove(i);
        for mut p in perms(&rest) {
            p.insert(0, x);
            out.push(p);
        }
    }
    out
}

/// Element at global multi-index `at` (by index name) of a block starting at 0.
fn at(t: &LocalTensor<f64>, at: &dyn Fn(char) -> usize) -> f64 {
    let mut off = 0;
    for (d, &c) in t.indices.iter().enumerate() {
        off = off * (t.ranges[d].1 - t.ranges[d].0) + at(c);
    }
    t.data[off]
}

/// `sa, sb -> so` by [`contract`] equals index math for every storage order of both operands
/// and of the output (extents by `ext`; `what` names the case in a failure).
fn check_every_storage_order(
    sa: &str,
    sb: &str,
    so: &str,
    ext: &dyn Fn(char) -> usize,
    what: &str,
) {
    let a0 = tensor(sa, &sa.chars().map(ext).collect::<Vec<_>>(), 1);
    let b0 = tensor(sb, &sb.chars().map(ext).collect::<Vec<_>>(), 2);
    for pa in perms(&a0.indices) {
        let a = a0.permute(&pa).unwrap();
        for pb in perms(&b0.indices) {
            let b = b0.permute(&pb).unwrap();
            for po in perms(&so.chars().collect::<Vec<_>>()) {
                let c = contract(&a, &b, &po).unwrap();
                assert_eq!(c.indices, po);
                for (got, want) in c.data.iter().zip(naive(&a0, &b0, &po, ext)) {
                    assert!(
                        (got - want).abs() < 1e-12,
                        "{what}: {sa}->{pa:?}, {sb}->{pb:?}, out {po:?}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_storage_order_of_the_operands_gives_the_same_product() {
    // Operands read in place as (transposed) matrices and operands copied into order must
    // agree with a naive sum, for every storage order of both and of the output.
    let ext = |c: char| match c {
        'b' => 2,
        'i' => 3,
        'j' => 4,
        'k' => 5,
        _ => 3,
    };
    let cases: [(&str, &str, &str); 3] = [
        ("ij", "jk", "ik"),
        ("bij", "bjk", "bik"),
        ("ijl", "jk", "ilk"),
    ];
    // Both ways of taking a row operand stored transposed: read in place and copied first
    // (the other tests of this binary are right under either choice).
    for (choice, (sa, sb, so)) in ["in-place", "copy"]
        .into_iter()
        .flat_map(|ch| cases.map(|c| (ch, c)))
    {
        std::env::set_var("DEINSUM_TRANSPOSED_ROWS", choice);
        check_every_storage_order(sa, sb, so, &ext, choice);
    }
}

#[test]
fn products_split_over_a_rank_pool_equal_one_thread() {
    // Large enough to be split (by rows when m >= n, by columns otherwise), with transposed
    // operands and a batch; the pool's result must equal the single-thread one.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    // Operand a, its shape, operand b, its shape, the output.
    type Case<'a> = (&'a str, &'a [usize], &'a str, &'a [usize], &'a [char]);
    // The last two: a transposed left operand, few columns and a long summed index (the
    // kernel of its own, split by rows at whole cache lines).
    let cases: [Case; 5] = [
        ("ij", &[120, 90], "jk", &[90, 100], &['i', 'k']),
        ("ji", &[100, 60], "kj", &[150, 100], &['i', 'k']),
        ("ji", &[300, 203], "jk", &[300, 40], &['i', 'k']),
        ("ji", &[260, 190], "kj", &[24, 260], &['i', 'k']),
        ("bij", &[3, 70, 40], "bjk", &[3, 40, 50], &['b', 'i', 'k']),
    ];
    for (ia, sa, ib, sb, out) in cases {
        let a = tensor(ia, sa, 1);
        let b = tensor(ib, sb, 2);
        let one = contract(&a, &b, out).unwrap();
        assert_eq!(deinsum_exec::kernels::threads(), 1);
        let par = pool.install(|| {
            assert_eq!(deinsum_exec::kernels::threads(), 3);
            contract(&a, &b, out).unwrap()
        });
        assert_eq!(one.indices, par.indices);
        for (x, y) in one.data.iter().zip(&par.data) {
            assert!((x - y).abs() < 1e-12, "{ia},{ib}: {x} vs {y}");
        }
    }
}

/// Row-major offset of `idx` (by position) in `shape`.
fn offset(shape: &[usize], idx: &[usize]) -> usize {
    shape.iter().zip(idx).fold(0, |o, (&n, &i)| o * n + i)
}

/// Every multi-index of `shape` in row-major order.
fn multi_indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut r| {
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = r % shape[d];
                r /= shape[d];
            }
            idx
        })
        .collect()
}

#[test]
fn permutes_of_blocks_larger_than_a_tile_match_index_math() {
    // Extents that are no multiple of the transpose's tiles, in every order of three and four
    // indices (tiled transposes, and plain strided gathers when the last axis stays), on one
    // thread and split over a rank pool of 3 (both blocks are large enough to split).
    let ctx = deinsum_exec::buffers::RankContext::new(0, 3, 0).unwrap();
    let pool = ctx.thread_pool().unwrap();
    for (idx, shape) in [("abc", vec![37, 70, 61]), ("abcd", vec![9, 33, 12, 40])] {
        let t = tensor(idx, &shape, 3);
        for (p, on_pool) in perms(&t.indices)
            .into_iter()
            .flat_map(|p| [(p.clone(), false), (p, true)])
        {
            let q = if on_pool {
                pool.install(|| t.permute(&p).unwrap())
            } else {
                t.permute(&p).unwrap()
            };
            let pshape: Vec<usize> = p
                .iter()
                .map(|c| shape[t.indices.iter().position(|d| d == c).unwrap()])
                .collect();
            for (lin, pi) in multi_indices(&pshape).iter().enumerate() {
                let src: Vec<usize> = t
                    .indices
                    .iter()
                    .map(|c| pi[p.iter().position(|d| d == c).unwrap()])
                    .collect();
                assert_eq!(q.data[lin], t.data[offset(&shape, &src)], "{p:?} at {pi:?}");
            }
        }
    }
}

#[test]
fn outer_and_hadamard_products_in_every_output_order_and_on_a_pool() {
    // Khatri-Rao (a shared, nothing summed), a plain outer product and a Hadamard product, large
    // enough to be split over three threads.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let ext = |c: char| match c {
        'j' => 70,
        'k' => 64,
        'a' => 33,
        _ => 5,
    };
    for (sa, sb, so) in [("ja", "ka", "jka"), ("j", "ka", "jka"), ("jk", "kj", "jk")] {
        let a = tensor(sa, &sa.chars().map(ext).collect::<Vec<_>>(), 1);
        let b = tensor(sb, &sb.chars().map(ext).collect::<Vec<_>>(), 2);
        for po in perms(&so.chars().collect::<Vec<_>>()) {
            let c = contract(&a, &b, &po).unwrap();
            let par = pool.install(|| contract(&a, &b, &po).unwrap());
            assert_eq!(c, par);
            let shape: Vec<usize> = po.iter().map(|&x| ext(x)).collect();
            for (lin, idx) in multi_indices(&shape).iter().enumerate() {
                let g = |x: char| idx[po.iter().position(|&y| y == x).unwrap()];
                let want = at(&a, &g) * at(&b, &g);
                assert_eq!(c.data[lin], want, "{sa},{sb}->{po:?}");
            }
        }
    }
}

#[test]
fn box_copies_split_over_the_rank_pool_equal_one_thread() {
    use deinsum_exec::data::{copy_box, pack_box, unpack_box};
    use deinsum_plan::Block;
    let src = LocalTensor {
        ranges: vec![(100, 500), (0, 600)],
        ..tensor("ij", &[400, 600], 1)
    };
    let boxes = [
        vec![(110, 490), (5, 580)], // strided runs
        vec![(100, 450), (0, 600)], // one contiguous run
    ];
    let ctx = deinsum_exec::buffers::RankContext::new(0, 3, 0).unwrap();
    for r in boxes {
        let bx = Block {
            ranges: r.iter().copied().collect(),
        };
        for sum in [false, true] {
            let dst0 = LocalTensor {
                ranges: vec![(100, 520), (0, 600)],
                ..tensor("ij", &[420, 600], 2)
            };
            let (mut seq_c, mut seq_u, mut packed) = (dst0.clone(), dst0.clone(), Vec::new());
            copy_box(&src, &mut seq_c, &bx, sum).unwrap();
            pack_box(&src, &bx, &mut packed).unwrap();
            unpack_box(&mut seq_u, &bx, &packed, sum).unwrap();
            assert_eq!(seq_c, seq_u);
            let _in = ctx.enter();
            assert_eq!(deinsum_exec::buffers::rank_threads(), 3);
            let (mut par_c, mut par_u, mut par_p) = (dst0.clone(), dst0.clone(), vec![7.0]);
            copy_box(&src, &mut par_c, &bx, sum).unwrap();
            pack_box(&src, &bx, &mut par_p).unwrap();
            assert_eq!(par_p[0], 7.0);
            assert_eq!(par_p[1..], packed[..]);
            unpack_box(&mut par_u, &bx, &par_p[1..], sum).unwrap();
            assert_eq!(par_c, seq_c);
            assert_eq!(par_u, seq_u);
        }
    }
}

#[test]
fn the_rank_pool_hands_freed_buffers_back() {
    use deinsum_exec::buffers;
    let ctx = buffers::RankContext::new(1 << 21, 1, 0).unwrap();
    let _in = ctx.enter();
    let mut v = buffers::take::<f64>(1 << 20).unwrap();
    assert!(v.iter().all(|&x| x == 0.0));
    v.fill(3.0);
    let p = v.as_ptr();
    buffers::give(v);
    // Zeroed again on the way out, same memory.
    let w = buffers::take::<f64>(1 << 20).unwrap();
    assert_eq!(w.as_ptr(), p);
    assert!(w.iter().all(|&x| x == 0.0));
    buffers::give(w);
    // Too large a buffer for a small request: kept for a request of its size.
    let small = buffers::take_empty::<f64>(1 << 19).unwrap();
    assert_ne!(small.as_ptr(), p);
    let e = buffers::take_empty::<f64>((1 << 20) - 100).unwrap();
    assert_eq!((e.as_ptr(), e.len()), (p, 0));
    // Another element type does not get it.
    let f = buffers::take::<f32>(1 << 20).unwrap();
    assert_ne!(f.as_ptr() as usize, p as usize);
}

#[test]
fn a_buffer_the_allocator_refuses_is_an_error_with_its_size() {
    use deinsum_exec::buffers;
    // More than the address space: refused without touching memory, in and out of a context.
    let n = usize::MAX / 8;
    let e = buffers::take::<f64>(n).unwrap_err();
    assert_eq!(e.bytes, n as u128 * 8);
    assert_eq!(e.tensor, None);
    assert!(e.to_string().contains("out of memory"), "{e}");
    let ctx = buffers::RankContext::new(1 << 21, 1, 0).unwrap();
    let _in = ctx.enter();
    assert!(buffers::take_overwritten::<f32>(usize::MAX / 2).is_err());
    assert!(buffers::take_empty::<f64>(n).is_err());
    let e =
        LocalTensor::<f64>::zeros(vec!['i', 'j'], vec![(0, 1 << 40), (0, 1 << 30)]).unwrap_err();
    assert_eq!(e.bytes, 8u128 << 70);
    assert_eq!(
        e.for_tensor(3).for_tensor(5).tensor,
        Some(3),
        "the first name stays"
    );
}

/// `ij,jk->ik` for every storage of both operands (`ij|ji` x `jk|kj`) against a triple loop,
/// as f64 and as f32.
fn check_all_storages(m: usize, n: usize, k: usize) {
    let a = tensor("ij", &[m, k], 1);
    let b = tensor("jk", &[k, n], 2);
    let want: Vec<f64> = (0..m * n)
        .map(|x| {
            let (i, kk) = (x / n, x % n);
            (0..k).map(|j| a.data[i * k + j] * b.data[j * n + kk]).sum()
        })
        .collect();
    let to_f32 = |t: &LocalTensor<f64>| LocalTensor {
        indices: t.indices.clone(),
        ranges: t.ranges.clone(),
        data: t.data.iter().map(|&x| x as f32).collect(),
    };
    for (sa, sb) in [("ij", "jk"), ("ji", "jk"), ("ij", "kj"), ("ji", "kj")] {
        let a = a.permute(&sa.chars().collect::<Vec<_>>()).unwrap();
        let b = b.permute(&sb.chars().collect::<Vec<_>>()).unwrap();
        let c = contract(&a, &b, &['i', 'k']).unwrap();
        let c32 = contract(&to_f32(&a), &to_f32(&b), &['i', 'k']).unwrap();
        assert_eq!(
            (c.indices.as_slice(), c.data.len()),
            (&['i', 'k'][..], m * n)
        );
        for (x, ((got, got32), want)) in c.data.iter().zip(&c32.data).zip(&want).enumerate() {
            let scale = want.abs().max(1.0) * k as f64;
            assert!(
                (got - want).abs() < 1e-14 * scale,
                "{m}x{n}x{k} {sa},{sb} at {x}: {got} vs {want}"
            );
            assert!(
                (*got32 as f64 - want).abs() < 1e-5 * scale,
                "f32 {m}x{n}x{k} {sa},{sb} at {x}: {got32} vs {want}"
            );
        }
    }
}

#[test]
fn a_transposed_left_operand_with_a_long_summed_index_and_few_columns() {
    // Long summed extent, few columns: the left operand in chunks of the summed index (ragged
    // last chunk) and row blocks (a ragged second one).
    // Rows of 75 and 1030 words are read in place, rows of 256 and 1152 (32 and 144 cache
    // lines) copied into padded scratch first.
    check_all_storages(75, 23, 301);
    check_all_storages(1030, 7, 260);
    check_all_storages(256, 20, 270);
    check_all_storages(1152, 5, 259);
}

#[test]
fn two_transposed_operands_with_many_columns() {
    // Both operands transposed, many columns: the output computed column-major in blocks
    // (ragged row and column blocks) and copied back; the other storages as before.
    check_all_storages(130, 533, 263);
    check_all_storages(97, 70, 300);
}

/// The naive `a0, b0 -> po` (every index of the operands kept or in both), by index math.
fn naive(
    a0: &LocalTensor<f64>,
    b0: &LocalTensor<f64>,
    po: &[char],
    ext: &dyn Fn(char) -> usize,
) -> Vec<f64> {
    let summed: Vec<char> = a0
        .indices
        .iter()
        .copied()
        .filter(|c| !po.contains(c))
        .collect();
    let shape: Vec<usize> = po.iter().map(|&x| ext(x)).collect();
    let ns: usize = summed.iter().map(|&x| ext(x)).product();
    multi_indices(&shape)
        .into_iter()
        .map(|idx| {
            (0..ns)
                .map(|s| {
                    let mut sv = vec![0; summed.len()];
                    let mut r = s;
                    for d in (0..summed.len()).rev() {
                        sv[d] = r % ext(summed[d]);
                        r /= ext(summed[d]);
                    }
                    let g = |x: char| match summed.iter().position(|&y| y == x) {
                        Some(p) => sv[p],
                        None => idx[po.iter().position(|&y| y == x).unwrap()],
                    };
                    at(a0, &g) * at(b0, &g)
                })
                .sum()
        })
        .collect()
}

#[test]
fn products_sliced_along_leading_indices_match_index_math() {
    // Extents large enough for a slice's product to be worth a GEMM call: the sliced form
    // must be taken (TTMc's second step, the sliced operand either side) and, over every
    // storage order, on one thread and on a pool, agree with index math.
    let ext = |c: char| match c {
        'i' => 6,
        'j' => 40,
        'c' => 16,
        'b' => 12,
        'l' => 3,
        _ => 2,
    };
    let x = tensor("ijc", &[6, 40, 16], 1);
    let y = tensor("jb", &[40, 12], 2);
    assert_eq!(
        deinsum_exec::kernels::sliced_lead(&x, &y, &['i', 'b', 'c']),
        1
    );
    assert_eq!(
        deinsum_exec::kernels::sliced_lead(&y, &x, &['i', 'b', 'c']),
        1
    );
    // Already in GEMM layout (rows `ic`, summed `j`): one product, no slices.
    let xt = x.permute(&['i', 'c', 'j']).unwrap();
    assert_eq!(
        deinsum_exec::kernels::sliced_lead(&xt, &y, &['i', 'c', 'b']),
        0
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let mut sliced = 0;
    for (sa, sb, so) in [("ijc", "jb", "ibc"), ("lijc", "ljb", "libc")] {
        let a0 = tensor(sa, &sa.chars().map(ext).collect::<Vec<_>>(), 1);
        let b0 = tensor(sb, &sb.chars().map(ext).collect::<Vec<_>>(), 2);
        let outs: Vec<(Vec<char>, Vec<f64>)> = perms(&so.chars().collect::<Vec<_>>())
            .into_iter()
            .map(|po| {
                let want = naive(&a0, &b0, &po, &ext);
                (po, want)
            })
            .collect();
        for pa in perms(&a0.indices) {
            let a = a0.permute(&pa).unwrap();
            for pb in perms(&b0.indices) {
                let b = b0.permute(&pb).unwrap();
                for (po, want) in &outs {
                    let po = po.clone();
                    sliced += usize::from(deinsum_exec::kernels::sliced_lead(&a, &b, &po) > 0);
                    let one = contract(&a, &b, &po).unwrap();
                    let par = pool.install(|| contract(&a, &b, &po).unwrap());
                    for c in [one, par] {
                        assert_eq!(c.indices, po);
                        for (g, w) in c.data.iter().zip(want) {
                            assert!((g - w).abs() < 1e-10, "{pa:?},{pb:?}->{po:?}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
    assert!(sliced > 0, "no storage order was sliced");
}

#[test]
fn batches_trailing_both_operands_match_index_math() {
    // Batches long enough to stream (the `ija,ja->ia` of MTTKRP and the chain): every storage
    // order of both operands and of the output, the batch trailing all three or not, one or
    // two batch indices, either operand holding the output's rows, agree with index math.
    let ext = |c: char| match c {
        'a' => 9,
        'b' => 2,
        'i' => 3,
        'j' => 4,
        'k' => 2,
        _ => 3,
    };
    let cases: [(&str, &str, &str); 4] = [
        ("ija", "ja", "ia"),
        ("ijka", "jka", "ia"),
        ("ijab", "jab", "iab"),
        ("ja", "ija", "ia"),
    ];
    for (sa, sb, so) in cases {
        check_every_storage_order(sa, sb, so, &ext, "trailing batch");
    }
    // Rows enough to split over a rank pool: the pool's result equals one thread's.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let a = tensor("ija", &[2500, 3, 64], 3);
    let b = tensor("ja", &[3, 64], 4);
    let one = contract(&a, &b, &['i', 'a']).unwrap();
    let par = pool.install(|| contract(&a, &b, &['i', 'a']).unwrap());
    assert_eq!(one.data.len(), 2500 * 64);
    for (x, y) in one.data.iter().zip(&par.data) {
        assert!((x - y).abs() < 1e-12, "{x} vs {y}");
    }
    let want: f64 = (0..3)
        .map(|j| a.data[(7 * 3 + j) * 64 + 5] * b.data[j * 64 + 5])
        .sum();
    assert!((one.data[7 * 64 + 5] - want).abs() < 1e-12);
}
