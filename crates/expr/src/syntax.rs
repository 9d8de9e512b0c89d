//! The pest parser over grammar/einsum.pest and the syntax tree it yields.

use crate::{ExprError, INDEX_RULE};
use pest::Parser;

#[derive(pest_derive::Parser)]
#[grammar = "../../grammar/einsum.pest"]
struct EinsumParser;

/// One item of a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// An index label.
    Label(char),
    /// `...`.
    Ellipsis,
}

/// A term (one operand's or the output's subscripts) with char positions in the expression.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Term {
    /// The items with the char position where each starts.
    pub items: Vec<(Item, usize)>,
    /// The source text of the term, whitespace removed.
    pub text: String,
}

impl Term {
    /// The labels of the term, ellipsis excluded, in order.
    pub fn labels(&self) -> impl Iterator<Item = char> + '_ {
        self.items.iter().filter_map(|(it, _)| match it {
            Item::Label(c) => Some(*c),
            Item::Ellipsis => None,
        })
    }

    /// Char position of the first `...`, if any.
    pub fn ellipsis_position(&self) -> Option<usize> {
        self.items
            .iter()
            .find(|(it, _)| *it == Item::Ellipsis)
            .map(|(_, p)| *p)
    }
}

/// The syntax tree of an einsum: input terms and the optional explicit output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ast {
    pub inputs: Vec<Term>,
    pub output: Option<Term>,
}

/// Maps byte offsets of `expr` to char offsets.
struct CharPos(Vec<usize>);

impl CharPos {
    fn new(expr: &str) -> Self {
        CharPos(expr.char_indices().map(|(b, _)| b).collect())
    }
    fn of(&self, byte: usize) -> usize {
        self.0.partition_point(|&b| b < byte)
    }
}

/// Parses `expr` into its syntax tree; syntax errors carry a caret.
pub(crate) fn parse(expr: &str) -> Result<Ast, ExprError> {
    if let Some(ast) = parse_plain(expr) {
        return Ok(ast);
    }
    parse_with_pest(expr)
}

/// The syntax tree of an expression in the grammar's plainest form, index characters (ASCII
/// letters, or non-ASCII characters that are not whitespace, as opt_einsum's symbols are) and
/// commas with at most one `->` and no commas after it (every such string is an einsum by the
/// grammar), without pest; `None` for anything else. Planning a small einsum from Python took
/// 3.4 us to parse, more than its path search (proptests hold this equal to pest's tree).
pub(crate) fn parse_plain(expr: &str) -> Option<Ast> {
    let index = |c: char| c.is_ascii_alphabetic() || (!c.is_ascii() && !c.is_whitespace());
    let mut inputs = Vec::new();
    // The term being read: an input's until the arrow, then the output's.
    let mut cur = Term::default();
    let mut arrow = false;
    let mut chars = expr.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            ',' if !arrow => inputs.push(std::mem::take(&mut cur)),
            '-' if !arrow && chars.peek().is_some_and(|&(_, n)| n == '>') => {
                chars.next();
                inputs.push(std::mem::take(&mut cur));
                arrow = true;
            }
            c if index(c) => {
                cur.items.push((Item::Label(c), at));
                cur.text.push(c);
            }
            _ => return None,
        }
    }
    if !arrow {
        inputs.push(std::mem::take(&mut cur));
    }
    Some(Ast {
        inputs,
        output: arrow.then_some(cur),
    })
}

/// [`parse`] by the pest grammar: every form, and the syntax errors with their caret.
pub(crate) fn parse_with_pest(expr: &str) -> Result<Ast, ExprError> {
    let pos = CharPos::new(expr);
    let mut pairs =
        EinsumParser::parse(Rule::einsum, expr).map_err(|e| syntax_error(expr, &pos, &e))?;
    let einsum = pairs.next().expect("the einsum rule matched");
    let mut ast = Ast {
        inputs: Vec::new(),
        output: None,
    };
    for p in einsum.into_inner() {
        match p.as_rule() {
            Rule::inputs => {
                for t in p.into_inner() {
                    ast.inputs.push(term(t, &pos));
                }
            }
            Rule::output => {
                let t = p.into_inner().next().expect("output holds a term");
                ast.output = Some(term(t, &pos));
            }
            _ => {}
        }
    }
    check_single_ellipsis(expr, &ast)?;
    Ok(ast)
}

fn term(t: pest::iterators::Pair<'_, Rule>, pos: &CharPos) -> Term {
    let mut items = Vec::new();
    let mut text = String::new();
    for i in t.into_inner() {
        let at = pos.of(i.as_span().start());
        match i.as_rule() {
            Rule::index => {
                let c = i.as_str().chars().next().expect("an index is one char");
                items.push((Item::Label(c), at));
                text.push(c);
            }
            Rule::ellipsis => {
                items.push((Item::Ellipsis, at));
                text.push_str("...");
            }
            _ => {}
        }
    }
    Term { items, text }
}

/// NumPy allows one `...` per term; a second one is reported where it starts.
fn check_single_ellipsis(expr: &str, ast: &Ast) -> Result<(), ExprError> {
    let terms = ast
        .inputs
        .iter()
        .enumerate()
        .map(|(k, t)| (format!("operand {k}"), t))
        .chain(ast.output.iter().map(|t| ("the output".to_string(), t)));
    for (name, t) in terms {
        let mut ell = t.items.iter().filter(|(it, _)| *it == Item::Ellipsis);
        if let (Some(_), Some((_, second))) = (ell.next(), ell.next()) {
            return Err(ExprError::syntax(
                expr,
                *second,
                format!("'...' appears twice in {name}"),
            ));
        }
    }
    Ok(())
}

/// Turns pest's error into a message about the character where parsing stopped.
fn syntax_error(expr: &str, pos: &CharPos, e: &pest::error::Error<Rule>) -> ExprError {
    let byte = match e.location {
        pest::error::InputLocation::Pos(b) => b,
        pest::error::InputLocation::Span((b, _)) => b,
    };
    let rest = expr.get(byte..).unwrap_or("");
    let message = match rest.chars().next() {
        None => "unexpected end of the expression".to_string(),
        Some('-') if rest.starts_with("->") => "'->' appears twice".to_string(),
        Some('-') => "'-' must be followed by '>' (the output arrow is '->')".to_string(),
        Some('>') => "'>' without '-' before it (the output arrow is '->')".to_string(),
        Some('.') => "a '.' that is not part of '...' (an ellipsis is three dots)".to_string(),
        Some(',') => "',' in the output (the output is a single term)".to_string(),
        Some(c) if !crate::is_index(c) => format!("{c:?} is not a valid index ({INDEX_RULE})"),
        Some(c) => format!("unexpected {c:?}"),
    };
    ExprError::syntax(expr, pos.of(byte), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_plain_form_and_what_falls_back() {
        for e in [
            "",
            "->",
            "ij,jk->ik",
            ",ij->ij",
            "ij->",
            "ij,",
            "a,b,c",
            "é",
            "αβ,βγ->αγ",
            "a×,×名->a名",
        ] {
            assert_eq!(parse_plain(e), Some(parse_with_pest(e).unwrap()), "{e:?}");
        }
        for e in [
            "a-b",
            "ij->k,l",
            "i j",
            "...i",
            "ij->>k",
            "i-",
            "a1",
            "ij->i->j",
            "α\u{3000}β",
            "ab\u{a0}",
        ] {
            assert_eq!(parse_plain(e), None, "{e:?}");
        }
    }

    proptest! {
        /// Wherever the plain parser answers, pest's tree is the same.
        #[test]
        fn the_plain_parser_agrees_with_pest(e in "[abAZé×名\u{3000}\u{a0},>. -]{0,14}") {
            if let Some(ast) = parse_plain(&e) {
                prop_assert_eq!(Some(ast), parse_with_pest(&e).ok());
            }
        }
    }
}
