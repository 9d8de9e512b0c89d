//! Cross-check against NumPy: 360 random einsums (tests/data/numpy_cases.py wrote the table by
//! running numpy.einsum; the last 60 broadcast named indices of extent 1). Our output shape
//! must equal NumPy's, NumPy's sum over all-ones inputs (the size of the iteration space) must
//! equal the product of our extents, and every operand's storage shape must be the one given.

use deinsum_expr::{parse, ExtentSpec};

#[test]
fn output_shapes_and_iteration_space_match_numpy() {
    let table = include_str!("data/numpy_cases.txt");
    let mut n = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('|').collect();
        let (expr, shapes, out_shape, sum) = (f[0], f[1], f[2], f[3]);
        let spec = ExtentSpec::from_flags(None, None, Some(shapes)).unwrap();
        let e = parse(expr, &spec).unwrap_or_else(|err| panic!("{line}: {err}"));
        let ours: Vec<String> = e
            .output()
            .iter()
            .map(|&c| e.extent(c).to_string())
            .collect();
        assert_eq!(ours.join("x"), out_shape, "{line}: parsed as {e}");
        let given = deinsum_expr::parse_shapes(shapes).unwrap();
        for (k, op) in e.inputs().iter().enumerate() {
            assert_eq!(
                op.shape(e.extents()),
                given[k],
                "{line}: operand {k} of {e}"
            );
        }
        // The canonical form reads back to the same einsum with the same shapes.
        let again = parse(&e.to_string(), &spec).unwrap_or_else(|err| panic!("{e}: {err}"));
        assert_eq!(
            again.inputs(),
            e.inputs(),
            "{line}: {e} reads back differently"
        );
        let space: usize = e.extents().values().product();
        assert_eq!(
            space as f64,
            sum.parse::<f64>().unwrap(),
            "{line}: parsed as {e}"
        );
        n += 1;
    }
    assert_eq!(n, 360);
}
