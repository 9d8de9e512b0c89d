//! Typed errors for einsum parsing and validation.

/// An einsum that cannot be parsed or does not make sense.
///
/// Every message is one line that names the problem. The variants that point into the
/// expression ([`ExprError::Syntax`], [`ExprError::Semantic`]) add two more lines when
/// displayed: the expression and a caret under the offending character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A syntax error at a character position (0-based, in chars) of the expression.
    #[error("syntax error at position {position}: {message}\n  {expr}\n  {caret}")]
    Syntax {
        /// What is wrong.
        message: String,
        /// The expression as given (control characters shown as spaces or `?`).
        expr: String,
        /// Character offset of the offending position.
        position: usize,
        /// A line with a caret under the offending position (wide chars count two columns).
        caret: String,
    },
    /// Any semantic problem (extents, shapes, output indices), with a one-line message.
    #[error("{0}")]
    Invalid(String),
    /// A semantic problem that has a place in the expression (an output index that no input
    /// has, an index twice in the output, `...` without shapes).
    #[error("{message} (at position {position})\n  {expr}\n  {caret}")]
    Semantic {
        /// What is wrong.
        message: String,
        /// The expression as given (control characters shown as spaces or `?`).
        expr: String,
        /// Character offset of the offending position.
        position: usize,
        /// A line with a caret under the offending position (wide chars count two columns).
        caret: String,
    },
}

impl ExprError {
    /// The one-line message, without the expression and caret lines.
    pub fn message(&self) -> &str {
        match self {
            ExprError::Syntax { message, .. } | ExprError::Semantic { message, .. } => message,
            ExprError::Invalid(m) => m,
        }
    }

    /// The character position in the expression the error points at, if it has one.
    pub fn position(&self) -> Option<usize> {
        match self {
            ExprError::Syntax { position, .. } | ExprError::Semantic { position, .. } => {
                Some(*position)
            }
            ExprError::Invalid(_) => None,
        }
    }

    /// A syntax error at char position `position` of `expr`.
    pub(crate) fn syntax(expr: &str, position: usize, message: impl Into<String>) -> Self {
        ExprError::Syntax {
            message: message.into(),
            expr: printable(expr),
            position,
            caret: caret(expr, position),
        }
    }

    /// A semantic error at char position `position` of `expr`.
    pub(crate) fn semantic(expr: &str, position: usize, message: impl Into<String>) -> Self {
        ExprError::Semantic {
            message: message.into(),
            expr: printable(expr),
            position,
            caret: caret(expr, position),
        }
    }

    /// A semantic error without a position.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ExprError::Invalid(message.into())
    }
}

/// The expression with one printable char per char, so the caret line stays aligned and the
/// message stays on its lines.
fn printable(expr: &str) -> String {
    expr.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// Spaces up to the char at `position`, then `^`; wide (East Asian) chars take two columns so
/// the caret lines up in a terminal.
fn caret(expr: &str, position: usize) -> String {
    let cols: usize = expr
        .chars()
        .take(position)
        .map(|c| if wide(c) { 2 } else { 1 })
        .sum();
    let mut s = " ".repeat(cols);
    s.push('^');
    s
}

/// East Asian Wide and Fullwidth blocks (Hangul, CJK, kana, fullwidth forms).
fn wide(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x115F
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x20000..=0x3FFFD)
}
