//! `GroupPlan::iteration_box` against the blocks the plan's distributions give.

use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::{build, Interval, PhaseCut, PlanOptions};

#[test]
fn iteration_box_agrees_with_the_group_distributions() {
    for (expr, procs) in [("ik,kj->ij", 6), ("ijk,ja,ka,al->il", 12), ("ij,jk->ik", 5)] {
        let spec = ExtentSpec {
            default: Some(11),
            ..Default::default()
        };
        let e = parse(expr, &spec).unwrap();
        let opts = PlanOptions {
            procs,
            ..Default::default()
        };
        let p = build(&e, &opts).unwrap();
        for g in &p.groups {
            let ids = &g.group.indices;
            let tensors = g.inputs.iter().chain(std::iter::once(&g.output));
            for (tid, dist) in tensors {
                let t = p.tensor(*tid).unwrap();
                for rank in 0..procs + 1 {
                    let bx = g.iteration_box(&p.einsum, rank, None);
                    let blk = dist.block(rank, &t.shape);
                    assert_eq!(bx.is_none(), blk.is_none());
                    let (Some(bx), Some(blk)) = (bx, blk) else {
                        continue;
                    };
                    let proj: Vec<(usize, usize)> = t
                        .indices
                        .iter()
                        .map(|c| bx[ids.iter().position(|d| d == c).unwrap()].into())
                        .collect();
                    assert_eq!(proj.as_slice(), blk.ranges.as_slice(), "{expr} rank {rank}");
                }
            }
            // A phase cut narrows only its index, to the ceil-sized piece of the rank's range.
            let Some(&c) = ids.first() else { continue };
            let cut = PhaseCut {
                index: c,
                count: 3,
                part: 1,
            };
            let whole = g.iteration_box(&p.einsum, 0, None).unwrap();
            let part = g.iteration_box(&p.einsum, 0, Some(cut)).unwrap();
            assert_eq!(part[0], whole[0].subinterval(3, 1));
            assert_eq!(part[1..], whole[1..]);
            assert!(part[0].len() <= Interval::from((0, 11)).subinterval(3, 0).len());
        }
    }
}
