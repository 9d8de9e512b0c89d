//! Einsum syntax and meaning: parse NumPy/opt_einsum einsum strings, resolve implicit output,
//! ellipsis and extents, and validate them into an [`ParsedEinsum`].
//!
//! Downstream crates see only *distinct* index sets per operand ([`ParsedEinsum::input_indices`]);
//! diagonals (an index repeated inside one operand) and broadcast dimensions live only in
//! [`Operand::dims`], which the executor's loaders use to map storage coordinates.
//!
//! # The language (grammar/einsum.pest)
//!
//! - An index is one character: an ASCII letter, or any non-ASCII character that is not
//!   whitespace (`i`, `A`, `α`, `名`, `×`: every symbol of opt_einsum's `get_symbol`); ASCII
//!   digits and punctuation are refused ([`is_index`]). Operands are separated by `,`; an optional `->` is followed by the output term; whitespace may separate tokens.
//! - Without `->` the output is implicit (NumPy's rule): the `...` dims, then the indices that
//!   occur exactly once over all inputs, sorted by code point (`A` before `a`).
//! - An index repeated in one operand is a diagonal (`ii->i`); an index missing from the output
//!   is summed; an empty term is a scalar operand (`,ij->ij`); an empty output is a scalar.
//! - `...` (at most once per term) stands for dims given only by [`ExtentSpec::shapes`]. They
//!   are right-aligned across operands and broadcast as NumPy does: at each position the
//!   extents must be equal or 1, and an extent-1 dim against a larger one is
//!   [`Dim::Broadcast`]. Each position becomes a fresh label, disjoint from the expression's
//!   labels and deterministic: Greek small letters (`α`, `β`, ...), then Greek capitals, then
//!   CJK ideographs. An explicit output without `...` sums those dims (as opt_einsum does;
//!   NumPy refuses).
//! - Named indices broadcast too, as in NumPy: with `--shapes`, an index may have extent 1 in
//!   some dims and one other extent elsewhere (`bhqd,bhkd->bhqk` with `2x1x5x4,2x3x7x4` gives
//!   `h` = 3); its extent-1 dims are [`Dim::Broadcast`] (listed in
//!   [`Operand::named_broadcast`]). A repeated index inside one operand must have equal dims.
//! - Extents: shapes first, then [`ExtentSpec::sizes`] (which must agree with the shapes and
//!   name only indices of the einsum), then [`ExtentSpec::default`] for the indices left.
//!   Extents may be 0 (NumPy's empty arrays); element counts of every operand and of the output
//!   fit in `usize`.
//!
//! ```
//! use deinsum_expr::{parse, ExtentSpec};
//! let spec = ExtentSpec::from_flags(Some("i=64,j=32"), Some("16"), None).unwrap();
//! let e = parse("ij,jk", &spec).unwrap();
//! assert_eq!(e.output(), &['i', 'k']);
//! assert_eq!(e.to_string(), "ij,jk->ik");
//! assert_eq!(e.extent('k'), 16);
//! ```

use std::collections::BTreeMap;

mod error;
mod flags;
mod resolve;
mod syntax;
pub use error::ExprError;
pub use flags::{parse_extent, parse_shapes, parse_sizes};
pub use resolve::{checked_product, parse};

/// An index label: a character for which [`is_index`] holds.
pub type Index = char;

/// Whether `c` may be an index: an ASCII letter, or a non-ASCII character that is not
/// whitespace (opt_einsum's symbols; ASCII digits and punctuation are syntax or refused).
pub fn is_index(c: char) -> bool {
    c.is_ascii_alphabetic() || (!c.is_ascii() && !c.is_whitespace())
}

/// The rule of [`is_index`] in words, for error messages.
pub const INDEX_RULE: &str =
    "indices are ASCII letters or non-ASCII characters other than whitespace";

/// One storage dimension of an operand as the user's data is laid out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// The dimension is indexed by this label. A label repeated in one operand is a diagonal.
    Index(Index),
    /// An extent-1 dimension that broadcasts against a larger extent (in `...`, or of a named
    /// index whose extent elsewhere is larger): always accessed at coordinate 0, and not an
    /// index of the operand.
    Broadcast,
}

/// One input operand: its storage dimensions in order (C order, row-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operand {
    /// Storage dimensions, outermost first.
    pub dims: Vec<Dim>,
    /// Distinct indices in order of first appearance, broadcast dimensions excluded.
    pub indices: Vec<Index>,
    /// The broadcast dims written with a label (an extent-1 dim of an index whose extent is
    /// larger, as NumPy broadcasts it): (storage dim, label), so the operand prints as written.
    /// Broadcast dims of `...` are not here.
    pub named_broadcast: Vec<(usize, Index)>,
}

impl Operand {
    /// Builds an operand from its storage dimensions, deriving the distinct index list.
    pub fn new(dims: Vec<Dim>) -> Self {
        let mut indices = Vec::new();
        for d in &dims {
            if let Dim::Index(c) = d {
                if !indices.contains(c) {
                    indices.push(*c);
                }
            }
        }
        Operand {
            dims,
            indices,
            named_broadcast: Vec::new(),
        }
    }

    /// The storage shape of this operand given the einsum's extents (broadcast dims are 1).
    pub fn shape(&self, extents: &BTreeMap<Index, usize>) -> Vec<usize> {
        self.dims
            .iter()
            .map(|d| match d {
                Dim::Index(c) => extents.get(c).copied().unwrap_or(1),
                Dim::Broadcast => 1,
            })
            .collect()
    }

    /// True when some index occurs twice in this operand (a diagonal is taken on load).
    pub fn has_diagonal(&self) -> bool {
        self.dims
            .iter()
            .filter(|d| matches!(d, Dim::Index(_)))
            .count()
            != self.indices.len()
    }
}

/// A validated einsum: operands, output, and the extent of every index.
///
/// Invariants: every output index occurs in some input and at most once in the output; every
/// index has an extent >= 1; the product of the extents of every operand and of the output fits
/// in `usize`. Ellipsis dimensions have been replaced by fresh labels (see [`ParsedEinsum::ellipsis`]).
/// The fields are private so that only [`parse`] and [`ParsedEinsum::new`] (which check the
/// invariants) and [`ParsedEinsum::from_parts`] (which does not) make one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedEinsum {
    /// The input operands in order.
    inputs: Vec<Operand>,
    /// The output indices in order (distinct).
    output: Vec<Index>,
    /// Extent of every index that occurs.
    extents: BTreeMap<Index, usize>,
    /// Whether the output was implicit (no `->` in the source).
    implicit_output: bool,
    /// The labels that stand for `...` dimensions, outermost first (empty without ellipsis).
    ellipsis: Vec<Index>,
}

impl ParsedEinsum {
    /// An einsum with an explicit `output` and no ellipsis, checked against the invariants of
    /// [`ParsedEinsum`]: every index of an operand or of the output has an extent (0 included), `extents` names
    /// no other index, output indices are distinct and occur in some input, and element counts
    /// fit in `usize`.
    pub fn new(
        inputs: Vec<Operand>,
        output: Vec<Index>,
        extents: BTreeMap<Index, usize>,
    ) -> Result<Self, ExprError> {
        let e = ParsedEinsum::from_parts(inputs, output, extents);
        e.validate()?;
        Ok(e)
    }

    /// An einsum as [`parse`] left it, from all its parts (as a plan file stores them), checked
    /// like [`ParsedEinsum::new`]; the labels standing for `...` must be indices of the einsum.
    pub fn restore(
        inputs: Vec<Operand>,
        output: Vec<Index>,
        extents: BTreeMap<Index, usize>,
        implicit_output: bool,
        ellipsis: Vec<Index>,
    ) -> Result<Self, ExprError> {
        let mut e = ParsedEinsum::new(inputs, output, extents)?;
        if let Some(c) = ellipsis.iter().find(|c| !e.extents.contains_key(c)) {
            return Err(ExprError::invalid(format!(
                "'{c}' stands for an ellipsis dimension but no operand has it"
            )));
        }
        e.implicit_output = implicit_output;
        e.ellipsis = ellipsis;
        Ok(e)
    }

    /// An einsum from its parts with an explicit output and no ellipsis, **without** checking
    /// any invariant of [`ParsedEinsum`]: for tests and tools that build an einsum by hand (possibly
    /// a deliberately invalid one). Prefer [`ParsedEinsum::new`] or [`parse`].
    pub fn from_parts(
        inputs: Vec<Operand>,
        output: Vec<Index>,
        extents: BTreeMap<Index, usize>,
    ) -> Self {
        ParsedEinsum {
            inputs,
            output,
            extents,
            implicit_output: false,
            ellipsis: Vec::new(),
        }
    }

    /// Checks the invariants that [`ParsedEinsum::new`] promises.
    fn validate(&self) -> Result<(), ExprError> {
        let mut used = std::collections::BTreeSet::new();
        for (k, op) in self.inputs.iter().enumerate() {
            for &c in &op.indices {
                if !self.extents.contains_key(&c) {
                    return Err(ExprError::invalid(format!(
                        "index '{c}' of operand {k} has no extent"
                    )));
                }
                used.insert(c);
            }
            if checked_product(&op.shape(&self.extents)).is_none() {
                return Err(ExprError::invalid(format!(
                    "operand {k} has more elements than fit in usize"
                )));
            }
        }
        for (p, &c) in self.output.iter().enumerate() {
            if !used.contains(&c) {
                return Err(ExprError::invalid(format!(
                    "output index '{c}' occurs in no input"
                )));
            }
            if self.output[..p].contains(&c) {
                return Err(ExprError::invalid(format!(
                    "output index '{c}' occurs twice"
                )));
            }
        }
        if let Some(c) = self.extents.keys().find(|c| !used.contains(c)) {
            return Err(ExprError::invalid(format!(
                "an extent is given for '{c}', which no operand has"
            )));
        }
        let out: Vec<usize> = self.output.iter().map(|c| self.extent(*c)).collect();
        if checked_product(&out).is_none() {
            return Err(ExprError::invalid(
                "the output has more elements than fit in usize",
            ));
        }
        Ok(())
    }

    /// The input operands in order.
    pub fn inputs(&self) -> &[Operand] {
        &self.inputs
    }

    /// Number of input operands.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Distinct indices of input `k`, in order of first appearance.
    pub fn input_indices(&self, k: usize) -> &[Index] {
        &self.inputs[k].indices
    }

    /// The output indices in order (distinct).
    pub fn output(&self) -> &[Index] {
        &self.output
    }

    /// The extent of every index that occurs, by index.
    pub fn extents(&self) -> &BTreeMap<Index, usize> {
        &self.extents
    }

    /// Every extent as `index=extent`, by index (as `--sizes` takes them).
    pub fn extent_labels(&self) -> Vec<String> {
        self.extents
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect()
    }

    /// Extent of index `c` (1 for an unknown index, which a validated einsum never has).
    pub fn extent(&self, c: Index) -> usize {
        self.extents.get(&c).copied().unwrap_or(1)
    }

    /// Whether the output was implicit (no `->` in the source).
    pub fn implicit_output(&self) -> bool {
        self.implicit_output
    }

    /// The labels that stand for `...` dimensions, outermost first (empty without ellipsis).
    pub fn ellipsis(&self) -> &[Index] {
        &self.ellipsis
    }

    /// All distinct indices of the einsum, sorted.
    pub fn all_indices(&self) -> Vec<Index> {
        self.extents.keys().copied().collect()
    }
}

/// How extents are given: by name, one default for all, or per-operand shapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentSpec {
    /// Extents named by index (`--sizes i=64,j=32`).
    pub sizes: BTreeMap<Index, usize>,
    /// Extent of every index not named (`--size N`).
    pub default: Option<usize>,
    /// Per-operand shapes (`--shapes 64x32,32x16`).
    pub shapes: Option<Vec<Vec<usize>>>,
}

impl ParsedEinsum {
    /// The canonical subscripts of input `k`: its storage dims, with the run of `...` dims
    /// (ellipsis labels and broadcast dims) written as `...`.
    pub fn input_subscripts(&self, k: usize) -> String {
        let op = &self.inputs[k];
        let dims = op.dims.iter().enumerate().map(|(p, d)| match d {
            Dim::Index(c) => Some(*c),
            Dim::Broadcast => op
                .named_broadcast
                .iter()
                .find(|&&(q, _)| q == p)
                .map(|&(_, c)| c),
        });
        self.subscripts(dims)
    }

    /// The canonical subscripts of the output, with the `...` dims written as `...`.
    pub fn output_subscripts(&self) -> String {
        self.subscripts(self.output.iter().map(|c| Some(*c)))
    }

    fn subscripts(&self, dims: impl Iterator<Item = Option<Index>>) -> String {
        let mut s = String::new();
        let mut in_ellipsis = false;
        for d in dims {
            let ell = match d {
                Some(c) => self.ellipsis.contains(&c),
                None => true,
            };
            match (ell, d) {
                (true, _) if in_ellipsis => {}
                (true, _) => s.push_str("..."),
                (false, Some(c)) => s.push(c),
                (false, None) => unreachable!("a broadcast dim is an ellipsis dim"),
            }
            in_ellipsis = ell;
        }
        s
    }
}

/// The canonical form: explicit output, no whitespace, `...` where the ellipsis dims are.
/// Parsing it again with the same extents gives the same inputs, output, extents and ellipsis
/// labels (the output is then explicit).
impl std::fmt::Display for ParsedEinsum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for k in 0..self.inputs.len() {
            if k > 0 {
                f.write_str(",")?;
            }
            f.write_str(&self.input_subscripts(k))?;
        }
        write!(f, "->{}", self.output_subscripts())
    }
}
