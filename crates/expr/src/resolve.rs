//! From the syntax tree to a validated [`ParsedEinsum`]: output, ellipsis, extents.

use crate::syntax::{Ast, Item, Term};
use crate::{Dim, ExprError, ExtentSpec, Index, Operand, ParsedEinsum};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Where an extent came from, for conflict messages.
#[derive(Clone, Copy)]
enum Source {
    Shape { operand: usize, dim: usize },
    Sizes,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Shape { operand, dim } => {
                write!(f, "--shapes, operand {operand} dimension {dim}")
            }
            Source::Sizes => write!(f, "--sizes"),
        }
    }
}

/// The validated einsum of `ast` under `spec`: the output checked, `...` given fresh labels,
/// every index its extent and every operand its storage dims.
pub(crate) fn resolve(expr: &str, ast: &Ast, spec: &ExtentSpec) -> Result<ParsedEinsum, ExprError> {
    let input_labels: BTreeSet<Index> = ast.inputs.iter().flat_map(|t| t.labels()).collect();
    check_output(expr, ast, &input_labels)?;
    check_spec(spec, &input_labels)?;

    // How many dims each operand's `...` covers (0 without `...`).
    let ell_dims = ellipsis_dims(expr, ast, spec)?;
    let nb = ell_dims.iter().copied().max().unwrap_or(0);
    let ellipsis = fresh_labels(nb, &input_labels)?;

    let mut extents: BTreeMap<Index, usize> = BTreeMap::new();
    let mut sources: BTreeMap<Index, Source> = BTreeMap::new();
    let bext = broadcast_extents(ast, spec, &ell_dims, nb)?;
    for (b, &c) in ellipsis.iter().enumerate() {
        extents.insert(c, bext[b]);
    }

    // Extents the shapes give to labels: NumPy broadcasts an extent-1 dim of a named index
    // against the index's other extent, so a label's extent is its one extent other than 1.
    if let Some(shapes) = &spec.shapes {
        for (c, (n, src)) in label_extents(ast, shapes)? {
            set_extent(&mut extents, &mut sources, c, n, src)?;
        }
    }
    let ell = EllipsisDims {
        per_operand: &ell_dims,
        labels: &ellipsis,
        extents: &bext,
    };
    let inputs = (0..ast.inputs.len())
        .map(|k| storage_dims(ast, spec, k, &extents, &ell))
        .collect();

    for (&c, &n) in &spec.sizes {
        set_extent(&mut extents, &mut sources, c, n, Source::Sizes)?;
    }
    fill_missing(spec, &input_labels, &mut extents)?;

    let output = output_labels(ast, &ellipsis);
    let einsum = ParsedEinsum {
        inputs,
        output,
        extents,
        implicit_output: ast.output.is_none(),
        ellipsis,
    };
    check_sizes(&einsum, ast)?;
    Ok(einsum)
}

/// The broadcast extent of each `...` position (counted from the left of the longest): the
/// largest of the operands' extents there, the others 1 or equal (1 everywhere without shapes).
fn broadcast_extents(
    ast: &Ast,
    spec: &ExtentSpec,
    ell_dims: &[usize],
    nb: usize,
) -> Result<Vec<usize>, ExprError> {
    let mut bext = vec![1usize; nb];
    let Some(shapes) = &spec.shapes else {
        return Ok(bext);
    };
    let mut bfrom: Vec<Option<usize>> = vec![None; nb];
    for (k, t) in ast.inputs.iter().enumerate() {
        let start = t.ellipsis_position_in_dims();
        for j in 0..ell_dims[k] {
            let b = nb - ell_dims[k] + j;
            let n = shapes[k][start + j];
            if n == 1 {
                continue;
            }
            match bfrom[b] {
                Some(prev) if bext[b] != n => {
                    return Err(ExprError::invalid(format!(
                        "'...' shapes do not broadcast: operand {prev} has extent {} and \
                         operand {k} has extent {n} at broadcast dimension {b} \
                         (counted from the left of the longest '...')",
                        bext[b]
                    )))
                }
                Some(_) => {}
                None => {
                    bfrom[b] = Some(k);
                    bext[b] = n;
                }
            }
        }
    }
    Ok(bext)
}

/// What [`storage_dims`] needs of the ellipsis: dims per operand, labels and broadcast extents.
struct EllipsisDims<'a> {
    per_operand: &'a [usize],
    labels: &'a [Index],
    extents: &'a [usize],
}

/// Operand `k`'s storage dims: an extent-1 dim of a larger index is a broadcast dim.
fn storage_dims(
    ast: &Ast,
    spec: &ExtentSpec,
    k: usize,
    extents: &BTreeMap<Index, usize>,
    ell: &EllipsisDims<'_>,
) -> Operand {
    let nb = ell.labels.len();
    let mut dims = Vec::new();
    let mut named_broadcast = Vec::new();
    for (item, _) in &ast.inputs[k].items {
        match item {
            Item::Label(c) => {
                let n = spec.shapes.as_ref().map_or(0, |s| s[k][dims.len()]);
                if n == 1 && extents.get(c).is_some_and(|&e| e > 1) {
                    named_broadcast.push((dims.len(), *c));
                    dims.push(Dim::Broadcast);
                } else {
                    dims.push(Dim::Index(*c));
                }
            }
            Item::Ellipsis => {
                for j in 0..ell.per_operand[k] {
                    let b = nb - ell.per_operand[k] + j;
                    let n = spec.shapes.as_ref().map_or(1, |s| s[k][dims.len()]);
                    dims.push(if n == 1 && ell.extents[b] > 1 {
                        Dim::Broadcast
                    } else {
                        Dim::Index(ell.labels[b])
                    });
                }
            }
        }
    }
    let mut op = Operand::new(dims);
    op.named_broadcast = named_broadcast;
    op
}

/// Gives the default extent to every input label still without one, or names them.
fn fill_missing(
    spec: &ExtentSpec,
    input_labels: &BTreeSet<Index>,
    extents: &mut BTreeMap<Index, usize>,
) -> Result<(), ExprError> {
    let missing: Vec<Index> = input_labels
        .iter()
        .copied()
        .filter(|c| !extents.contains_key(c))
        .collect();
    match (spec.default, missing.as_slice()) {
        (_, []) => Ok(()),
        (Some(n), _) => {
            for c in missing {
                extents.insert(c, n);
            }
            Ok(())
        }
        (None, [c]) => Err(ExprError::invalid(format!(
            "no extent for index '{c}' (give --sizes {c}=N, --size N or --shapes)"
        ))),
        (None, cs) => {
            let list: Vec<String> = cs.iter().map(|c| format!("'{c}'")).collect();
            Err(ExprError::invalid(format!(
                "no extent for indices {} (give --sizes, --size N or --shapes)",
                list.join(", ")
            )))
        }
    }
}

impl Term {
    /// The storage dimension where `...` starts (the number of labels before it).
    fn ellipsis_position_in_dims(&self) -> usize {
        self.items
            .iter()
            .take_while(|(it, _)| *it != Item::Ellipsis)
            .count()
    }
}

/// The extent of every label that the shapes size, with where it came from: the one extent
/// other than 1 among the label's dims (NumPy's broadcasting), or 1. A label repeated inside
/// one operand takes a diagonal, so its dims there must be equal (NumPy does not broadcast them).
fn label_extents(
    ast: &Ast,
    shapes: &[Vec<usize>],
) -> Result<BTreeMap<Index, (usize, Source)>, ExprError> {
    let mut out: BTreeMap<Index, (usize, Source)> = BTreeMap::new();
    for (k, t) in ast.inputs.iter().enumerate() {
        // An operand's few labels: a list, not a map (a map per operand was a tenth of
        // parsing a 14-operand einsum).
        let mut here: Vec<(Index, usize, usize)> = Vec::new();
        let mut d = 0;
        for (item, _) in &t.items {
            match item {
                Item::Label(c) => {
                    let n = shapes[k][d];
                    if let Some(&(_, first, m)) = here.iter().find(|h| h.0 == *c) {
                        if m != n {
                            return Err(ExprError::invalid(format!(
                                "index '{c}' repeats in operand {k} with extents {m} (dimension \
                                 {first}) and {n} (dimension {d}); a repeated index takes a \
                                 diagonal, so its extents must be equal"
                            )));
                        }
                    } else {
                        here.push((*c, d, n));
                    }
                    let src = Source::Shape { operand: k, dim: d };
                    match out.get(c) {
                        Some(&(prev, from)) if prev != n && prev != 1 && n != 1 => {
                            return Err(ExprError::invalid(format!(
                                "two different extents for index '{c}': {prev} ({from}) and {n} \
                                 ({src}) (NumPy broadcasts only extent 1 against another extent)"
                            )))
                        }
                        Some(&(prev, _)) if prev != 1 || n == 1 => {}
                        _ => {
                            out.insert(*c, (n, src));
                        }
                    }
                    d += 1;
                }
                Item::Ellipsis => d = shapes[k].len() - (t.labels().count() - d),
            }
        }
    }
    Ok(out)
}

/// Every output index occurs in an input, and only once in the output.
fn check_output(expr: &str, ast: &Ast, input_labels: &BTreeSet<Index>) -> Result<(), ExprError> {
    let Some(out) = &ast.output else {
        return Ok(());
    };
    let mut seen = BTreeSet::new();
    for (item, at) in &out.items {
        if let Item::Label(c) = item {
            if !input_labels.contains(c) {
                return Err(ExprError::semantic(
                    expr,
                    *at,
                    format!("output index '{c}' does not occur in any input"),
                ));
            }
            if !seen.insert(*c) {
                return Err(ExprError::semantic(
                    expr,
                    *at,
                    format!("index '{c}' appears twice in the output"),
                ));
            }
        }
    }
    Ok(())
}

/// Extents in the spec are >= 1 (a hand-built spec may hold 0) and name indices that exist.
fn check_spec(spec: &ExtentSpec, input_labels: &BTreeSet<Index>) -> Result<(), ExprError> {
    for (&c, &n) in &spec.sizes {
        if !input_labels.contains(&c) {
            return Err(ExprError::invalid(format!(
                "--sizes names index '{c}', which does not occur in the einsum"
            )));
        }
        if n == 0 {
            return Err(ExprError::invalid(format!(
                "--sizes: extent 0 for index '{c}' is not allowed (extents are at least 1)"
            )));
        }
    }
    if spec.default == Some(0) {
        return Err(ExprError::invalid(
            "--size: extent 0 is not allowed (extents are at least 1)",
        ));
    }
    if let Some(shapes) = &spec.shapes {
        for (k, s) in shapes.iter().enumerate() {
            if let Some(d) = s.iter().position(|&n| n == 0) {
                return Err(ExprError::invalid(format!(
                    "--shapes: extent 0 in dimension {d} of operand {k} is not allowed \
                     (extents are at least 1)"
                )));
            }
        }
    }
    Ok(())
}

/// The number of dims each operand's `...` covers, from the shapes.
fn ellipsis_dims(expr: &str, ast: &Ast, spec: &ExtentSpec) -> Result<Vec<usize>, ExprError> {
    let Some(shapes) = &spec.shapes else {
        if let Some((k, at)) = ast
            .inputs
            .iter()
            .enumerate()
            .find_map(|(k, t)| t.ellipsis_position().map(|p| (k, p)))
        {
            return Err(ExprError::semantic(
                expr,
                at,
                format!("the dimensions of '...' in operand {k} must be given by --shapes"),
            ));
        }
        return Ok(vec![0; ast.inputs.len()]);
    };
    if shapes.len() != ast.inputs.len() {
        return Err(ExprError::invalid(format!(
            "--shapes gives {} shape{} but the einsum has {} operand{}",
            shapes.len(),
            plural(shapes.len()),
            ast.inputs.len(),
            plural(ast.inputs.len())
        )));
    }
    let mut out = Vec::with_capacity(shapes.len());
    for (k, (t, s)) in ast.inputs.iter().zip(shapes).enumerate() {
        let nlab = t.labels().count();
        let has_ell = t.ellipsis_position().is_some();
        if (has_ell && s.len() < nlab) || (!has_ell && s.len() != nlab) {
            return Err(ExprError::invalid(format!(
                "--shapes: shape {} of operand {k} has {} dimension{} but its term '{}' needs {}{}",
                shape_str(s),
                s.len(),
                plural(s.len()),
                t.text,
                if has_ell { "at least " } else { "" },
                nlab
            )));
        }
        out.push(s.len() - nlab);
    }
    Ok(out)
}

/// Labels for the `...` dims, deterministic and disjoint from the expression's labels:
/// Greek small letters, then Greek capitals, then CJK ideographs and beyond.
fn fresh_labels(n: usize, used: &BTreeSet<Index>) -> Result<Vec<Index>, ExprError> {
    let greek_small = (0x3B1..=0x3C9).filter(|&u| u != 0x3C2);
    let greek_capital = (0x391..=0x3A9).filter(|&u| u != 0x3A2);
    let rest = 0x4E00..=0x10FFFF;
    let labels: Vec<Index> = greek_small
        .chain(greek_capital)
        .chain(rest)
        .filter_map(char::from_u32)
        .filter(|c| c.is_alphabetic() && !used.contains(c))
        .take(n)
        .collect();
    if labels.len() < n {
        return Err(ExprError::invalid(format!(
            "too many '...' dimensions ({n}): there are not enough free index labels"
        )));
    }
    Ok(labels)
}

fn set_extent(
    extents: &mut BTreeMap<Index, usize>,
    sources: &mut BTreeMap<Index, Source>,
    c: Index,
    n: usize,
    src: Source,
) -> Result<(), ExprError> {
    match extents.get(&c) {
        Some(&prev) if prev != n => Err(ExprError::invalid(format!(
            "two different extents for index '{c}': {prev} ({}) and {n} ({src}){}",
            sources
                .get(&c)
                .map_or("'...'".to_string(), |s| s.to_string()),
            if prev == 1 || n == 1 {
                " (--sizes must give the extent after broadcasting)"
            } else {
                ""
            }
        ))),
        Some(_) => Ok(()),
        None => {
            extents.insert(c, n);
            sources.insert(c, src);
            Ok(())
        }
    }
}

/// The explicit output, or NumPy's implicit one: `...` dims first, then the labels that occur
/// exactly once over all inputs, sorted by code point.
fn output_labels(ast: &Ast, ellipsis: &[Index]) -> Vec<Index> {
    match &ast.output {
        Some(t) => {
            let mut out = Vec::new();
            for (item, _) in &t.items {
                match item {
                    Item::Label(c) => out.push(*c),
                    Item::Ellipsis => out.extend_from_slice(ellipsis),
                }
            }
            out
        }
        None => {
            let mut count: BTreeMap<Index, usize> = BTreeMap::new();
            for c in ast.inputs.iter().flat_map(|t| t.labels()) {
                *count.entry(c).or_insert(0) += 1;
            }
            let mut out = ellipsis.to_vec();
            out.extend(count.into_iter().filter(|&(_, n)| n == 1).map(|(c, _)| c));
            out
        }
    }
}

/// Element counts of every operand and of the output fit in `usize`.
fn check_sizes(e: &ParsedEinsum, ast: &Ast) -> Result<(), ExprError> {
    for (k, op) in e.inputs.iter().enumerate() {
        if checked_product(&op.shape(&e.extents)).is_none() {
            return Err(ExprError::invalid(format!(
                "operand {k} ('{}') has more elements than fit in usize",
                ast.inputs[k].text
            )));
        }
    }
    let out: Vec<usize> = e.output.iter().map(|c| e.extent(*c)).collect();
    if checked_product(&out).is_none() {
        return Err(ExprError::invalid(
            "the output has more elements than fit in usize",
        ));
    }
    Ok(())
}

/// Product of `dims`, or `None` on overflow.
pub fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn shape_str(s: &[usize]) -> String {
    if s.is_empty() {
        "() (a scalar)".to_string()
    } else {
        s.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("x")
    }
}
