//! `deinsum plan --mem`: the figure an infeasible budget reports is the least that plans,
//! through the CLI's own path (the candidate-path choice included).

mod cli_support;
use cli_support::deinsum;

#[test]
fn the_needed_figure_is_the_least_budget_that_plans() {
    for (args, needed) in [
        (
            &["plan", "ij,jk->ik", "--size", "64", "--procs", "4"][..],
            4160u64,
        ),
        (
            &[
                "plan",
                "abij,cdab->cdij",
                "--sizes",
                "a=13,b=11,i=7,j=5,c=5,d=3",
                "--procs",
                "1",
            ][..],
            10010,
        ),
    ] {
        // The figures are for inputs started canonically (where every plan moves them).
        let below = (needed - 1).to_string();
        let mut a = args.to_vec();
        a.extend(["--inputs-canonical", "--mem", &below]);
        let (code, _, err) = deinsum(&a);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(
            err.contains(&format!("needs {needed} words")),
            "{a:?}: {err}"
        );
        let at = needed.to_string();
        let mut a = args.to_vec();
        a.extend(["--inputs-canonical", "--mem", &at]);
        let (code, out, err) = deinsum(&a);
        assert_eq!(code, 0, "{a:?}: {out}{err}");
    }
}
