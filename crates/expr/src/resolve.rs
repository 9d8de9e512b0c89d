//! From the syntax tree to a validated [`ParsedEinsum`]: output, ellipsis, extents.

use crate::syntax::{Ast, Item, Term};
use crate::{Dim, ExprError, ExtentSpec, Index, Operand, ParsedEinsum};
use std::fmt;

/// Parses and validates `expr` with the extents of `spec` into an [`ParsedEinsum`].
///
/// The language is NumPy's (see grammar/einsum.pest): one character per index
/// ([`crate::is_index`]), `,` between operands, an optional `->` and output, `...` for
/// broadcast dimensions. Without
/// `->` the output is implicit: the `...` dimensions, then the indices that occur exactly once,
/// sorted. Extents come from `spec`: shapes (which alone size `...`), then named sizes (which
/// must agree with the shapes), then the default for the indices left.
pub fn parse(expr: &str, spec: &ExtentSpec) -> Result<ParsedEinsum, ExprError> {
    let ast = crate::syntax::parse(expr)?;
    resolve(expr, &ast, spec)
}

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
    let labels = Labels::of(ast);
    check_output(expr, ast, &labels)?;
    check_spec(spec, &labels)?;

    // How many dims each operand's `...` covers (0 without `...`).
    let ell_dims = ellipsis_dims(expr, ast, spec)?;
    let nb = ell_dims.iter().copied().max().unwrap_or(0);
    let ellipsis = fresh_labels(nb, &labels)?;
    let bext = broadcast_extents(ast, spec, &ell_dims, nb)?;

    // Extents the shapes give to labels: NumPy broadcasts an extent-1 dim of a named index
    // against the index's other extent, so a label's extent is its one extent other than 1.
    let mut extents: Vec<Option<(usize, Source)>> = match &spec.shapes {
        Some(shapes) => label_extents(ast, shapes, &labels)?,
        None => vec![None; labels.len()],
    };
    let ell = EllipsisDims {
        per_operand: &ell_dims,
        labels: &ellipsis,
        extents: &bext,
    };
    let inputs: Vec<Operand> = (0..ast.inputs.len())
        .map(|k| storage_dims(ast, spec, k, &labels, &extents, &ell))
        .collect();

    for (&c, &n) in &spec.sizes {
        // check_spec made sure that every named index is a label.
        let Some(id) = labels.id(c) else { continue };
        set_extent(&mut extents[id], c, n, Source::Sizes)?;
    }
    fill_missing(spec, &labels, &mut extents)?;

    let output = output_labels(ast, &ellipsis, &labels);
    // One map at the end, built from sorted pairs (a map grown entry by entry, with a second
    // one for the sources, was most of the time a 10-operand einsum took to resolve).
    let mut pairs: Vec<(Index, usize)> = ellipsis.iter().copied().zip(bext).collect();
    pairs.extend(
        labels
            .sorted
            .iter()
            .zip(&extents)
            .filter_map(|(&c, e)| e.map(|(n, _)| (c, n))),
    );
    pairs.sort_unstable_by_key(|&(c, _)| c);
    let extent_of = |c: Index| match pairs.binary_search_by_key(&c, |&(x, _)| x) {
        Ok(i) => pairs[i].1,
        Err(_) => 1,
    };
    check_sizes(&inputs, &output, ast, extent_of)?;
    Ok(ParsedEinsum {
        inputs,
        output,
        extents: pairs.into_iter().collect(),
        implicit_output: ast.output.is_none(),
        ellipsis,
    })
}

/// The labels of the inputs, sorted by code point: their positions are dense ids whose order
/// is the order a map over the labels iterates in.
struct Labels {
    sorted: Vec<Index>,
}

impl Labels {
    fn of(ast: &Ast) -> Self {
        let mut sorted: Vec<Index> = ast.inputs.iter().flat_map(|t| t.labels()).collect();
        sorted.sort_unstable();
        sorted.dedup();
        Labels { sorted }
    }

    fn len(&self) -> usize {
        self.sorted.len()
    }

    fn id(&self, c: Index) -> Option<usize> {
        self.sorted.binary_search(&c).ok()
    }

    fn contains(&self, c: Index) -> bool {
        self.id(c).is_some()
    }
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
    labels: &Labels,
    extents: &[Option<(usize, Source)>],
    ell: &EllipsisDims<'_>,
) -> Operand {
    let nb = ell.labels.len();
    let mut dims = Vec::new();
    let mut named_broadcast = Vec::new();
    for (item, _) in &ast.inputs[k].items {
        match item {
            Item::Label(c) => {
                let n = spec.shapes.as_ref().map_or(0, |s| s[k][dims.len()]);
                let known = labels.id(*c).and_then(|id| extents[id]);
                if n == 1 && known.is_some_and(|(e, _)| e != 1) {
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
                    dims.push(if n == 1 && ell.extents[b] != 1 {
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
    labels: &Labels,
    extents: &mut [Option<(usize, Source)>],
) -> Result<(), ExprError> {
    let missing: Vec<Index> = labels
        .sorted
        .iter()
        .zip(extents.iter())
        .filter(|(_, e)| e.is_none())
        .map(|(&c, _)| c)
        .collect();
    match (spec.default, missing.as_slice()) {
        (_, []) => Ok(()),
        (Some(n), _) => {
            for e in extents.iter_mut().filter(|e| e.is_none()) {
                *e = Some((n, Source::Sizes));
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
    labels: &Labels,
) -> Result<Vec<Option<(usize, Source)>>, ExprError> {
    let mut out: Vec<Option<(usize, Source)>> = vec![None; labels.len()];
    // An operand's few labels: a list, not a map (a map per operand was a tenth of parsing a
    // 14-operand einsum), one list for all operands.
    let mut here: Vec<(Index, usize, usize)> = Vec::new();
    for (k, t) in ast.inputs.iter().enumerate() {
        here.clear();
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
                    let slot = &mut out[labels.id(*c).expect("an input label")];
                    match *slot {
                        Some((prev, from)) if prev != n && prev != 1 && n != 1 => {
                            return Err(ExprError::invalid(format!(
                                "two different extents for index '{c}': {prev} ({from}) and {n} \
                                 ({src}) (NumPy broadcasts only extent 1 against another extent)"
                            )))
                        }
                        Some((prev, _)) if prev != 1 || n == 1 => {}
                        _ => *slot = Some((n, src)),
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
fn check_output(expr: &str, ast: &Ast, labels: &Labels) -> Result<(), ExprError> {
    let Some(out) = &ast.output else {
        return Ok(());
    };
    let mut seen = vec![false; labels.len()];
    for (item, at) in &out.items {
        if let Item::Label(c) = item {
            let Some(id) = labels.id(*c) else {
                return Err(ExprError::semantic(
                    expr,
                    *at,
                    format!("output index '{c}' does not occur in any input"),
                ));
            };
            if std::mem::replace(&mut seen[id], true) {
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

/// The spec's extents name indices that exist (extent 0 is allowed: NumPy's empty arrays).
fn check_spec(spec: &ExtentSpec, labels: &Labels) -> Result<(), ExprError> {
    for &c in spec.sizes.keys() {
        if !labels.contains(c) {
            return Err(ExprError::invalid(format!(
                "--sizes names index '{c}', which does not occur in the einsum"
            )));
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
fn fresh_labels(n: usize, used: &Labels) -> Result<Vec<Index>, ExprError> {
    let greek_small = (0x3B1..=0x3C9).filter(|&u| u != 0x3C2);
    let greek_capital = (0x391..=0x3A9).filter(|&u| u != 0x3A2);
    let rest = 0x4E00..=0x10FFFF;
    let labels: Vec<Index> = greek_small
        .chain(greek_capital)
        .chain(rest)
        .filter_map(char::from_u32)
        .filter(|&c| c.is_alphabetic() && !used.contains(c))
        .take(n)
        .collect();
    if labels.len() < n {
        return Err(ExprError::invalid(format!(
            "too many '...' dimensions ({n}): there are not enough free index labels"
        )));
    }
    Ok(labels)
}

/// Gives label `c` (whose slot is `slot`) the extent `n` from `src`, or says that it has
/// another.
fn set_extent(
    slot: &mut Option<(usize, Source)>,
    c: Index,
    n: usize,
    src: Source,
) -> Result<(), ExprError> {
    match *slot {
        Some((prev, from)) if prev != n => Err(ExprError::invalid(format!(
            "two different extents for index '{c}': {prev} ({from}) and {n} ({src}){}",
            if prev == 1 || n == 1 {
                " (--sizes must give the extent after broadcasting)"
            } else {
                ""
            }
        ))),
        Some(_) => Ok(()),
        None => {
            *slot = Some((n, src));
            Ok(())
        }
    }
}

/// The explicit output, or NumPy's implicit one: `...` dims first, then the labels that occur
/// exactly once over all inputs, sorted by code point.
fn output_labels(ast: &Ast, ellipsis: &[Index], labels: &Labels) -> Vec<Index> {
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
            let mut count = vec![0usize; labels.len()];
            for c in ast.inputs.iter().flat_map(|t| t.labels()) {
                count[labels.id(c).expect("an input label")] += 1;
            }
            let mut out = ellipsis.to_vec();
            out.extend(
                labels
                    .sorted
                    .iter()
                    .zip(&count)
                    .filter(|&(_, &n)| n == 1)
                    .map(|(&c, _)| c),
            );
            out
        }
    }
}

/// Element counts of every operand and of the output fit in `usize` (`extent_of` gives each
/// index's extent).
fn check_sizes(
    inputs: &[Operand],
    output: &[Index],
    ast: &Ast,
    extent_of: impl Fn(Index) -> usize,
) -> Result<(), ExprError> {
    for (k, op) in inputs.iter().enumerate() {
        let dims = op.dims.iter().map(|d| match d {
            Dim::Index(c) => extent_of(*c),
            Dim::Broadcast => 1,
        });
        if checked_product_of(dims).is_none() {
            return Err(ExprError::invalid(format!(
                "operand {k} ('{}') has more elements than fit in usize",
                ast.inputs[k].text
            )));
        }
    }
    if checked_product_of(output.iter().map(|&c| extent_of(c))).is_none() {
        return Err(ExprError::invalid(
            "the output has more elements than fit in usize",
        ));
    }
    Ok(())
}

/// Product of `dims`, or `None` on overflow.
pub fn checked_product(dims: &[usize]) -> Option<usize> {
    checked_product_of(dims.iter().copied())
}

/// [`checked_product`] of dims as they come, without collecting them.
fn checked_product_of(mut dims: impl Iterator<Item = usize>) -> Option<usize> {
    dims.try_fold(1usize, |acc, d| acc.checked_mul(d))
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
