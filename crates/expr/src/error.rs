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
        /// A line with a caret under the offending position.
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
        /// A line with a caret under the offending position.
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
            caret: caret(position),
        }
    }

    /// A semantic error at char position `position` of `expr`.
    pub(crate) fn semantic(expr: &str, position: usize, message: impl Into<String>) -> Self {
        ExprError::Semantic {
            message: message.into(),
            expr: printable(expr),
            position,
            caret: caret(position),
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

fn caret(position: usize) -> String {
    let mut s = " ".repeat(position);
    s.push('^');
    s
}
