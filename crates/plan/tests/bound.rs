//! Plans built end to end (parser, path, SOAP) against the SOAP parallel bound.
//!
//! The bound (deinsum_soap::parallel_bound, summed over groups, the binding one of
//! memory-independent and memory-dependent) counts every word a rank must touch; it is held
//! against the plan's per-rank I/O (`touched_per_rank`: a rank's blocks of every group's
//! inputs and output).

use deinsum_expr::{parse, ExtentSpec};
use deinsum_plan::{build, Plan, PlanOptions};

fn plan_sizes(expr: &str, sizes: &str, procs: usize, in_place: bool) -> Plan {
    let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
    let e = parse(expr, &spec).expect("parses");
    build(
        &e,
        &PlanOptions {
            procs,
            inputs_in_place: in_place,
            ..Default::default()
        },
    )
    .expect("plans")
}

const PS: [usize; 11] = [2, 3, 4, 6, 7, 8, 12, 16, 27, 64, 512];

fn check(expr: &str, sizes: &str) {
    let mut worst: f64 = 0.0;
    let mut worst_v: f64 = 0.0;
    for p in PS {
        let pl = plan_sizes(expr, sizes, p, false);
        let r = pl.prediction.ratio;
        println!(
            "{expr} {sizes} P={p}: received/rank {} touched/rank {} bound {:.1} ratio {r:.3} ranks {} grids {:?}",
            pl.prediction.max_per_rank,
            pl.prediction.touched_per_rank,
            pl.prediction.bound_per_rank,
            pl.ranks_used,
            pl.groups
                .iter()
                .map(|g| g
                    .grid
                    .dims
                    .iter()
                    .map(|d| (d.index, d.size))
                    .collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
        assert!(pl.prediction.bound_per_rank > 0.0);
        // A lower bound: no plan touches fewer words than it (up to float rounding).
        assert!(
            r >= 1.0 - 1e-9,
            "{expr} {sizes} P={p}: ratio {r} below the bound"
        );
        // The figure: words received per rank within 1.25x of the bound.
        let v = pl.prediction.max_per_rank as f64 / pl.prediction.bound_per_rank;
        assert!(v <= 1.25, "{expr} {sizes} P={p}: received/bound {v}");
        worst = worst.max(r);
        worst_v = worst_v.max(v);
    }
    println!("{expr} {sizes}: worst touched/bound {worst:.3}, worst received/bound {worst_v:.3}");
}

#[test]
fn mm_within_bound() {
    check("ij,jk->ik", "i=64,j=64,k=64");
    check("ij,jk->ik", "i=30,j=30,k=30");
}

#[test]
fn mttkrp_within_bound() {
    check("ijk,ja,ka->ia", "i=24,j=24,k=24,a=24");
    check("ijk,ja,ka->ia", "i=20,j=20,k=20,a=12");
}

/// Groups that repeat one statement under other index names (a chain's steps) share one SOAP
/// solve in the planner: each group's bounds equal its own solve, to the bit, and the plan's
/// bound is their sum.
#[test]
fn repeated_groups_keep_their_own_bounds() {
    // An 8-site MPS norm: its middle steps are one statement renamed; sizes that differ per
    // site (c=3) keep some apart.
    let expr = "ia,iAb,bBc,cCd,dDe,eEf,fFg,gG,ja,jAk,kBl,lCm,mDn,nEo,oFp,pG->";
    let mut sizes: Vec<String> = "bcdefgklmnop"
        .chars()
        .map(|c| format!("{c}={}", if c == 'c' { 3 } else { 8 }))
        .collect();
    sizes.extend("iaABCDEFGj".chars().map(|c| format!("{c}=2")));
    let sizes = sizes.join(",");
    for p in [1, 2, 3, 4] {
        let pl = plan_sizes(expr, &sizes, p, true);
        let s = (pl.prediction.max_peak_memory as f64).max(1.0);
        let mut sum = 0.0;
        for g in &pl.groups {
            let b = deinsum_soap::parallel_bound(&g.group, p, s);
            assert_eq!(
                (g.bound_memory_independent, g.bound_memory_dependent),
                (b.memory_independent, b.memory_dependent),
                "P={p} group {}",
                g.group.einsum_string()
            );
            sum += b.binding();
        }
        assert_eq!(pl.prediction.bound_per_rank, sum, "P={p}");
    }
}
