//! Typed errors for einsum parsing and validation.

/// An einsum that cannot be parsed or does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A syntax error at a character position (0-based, in chars) of the expression.
    #[error("syntax error at position {position}: {message}\n  {expr}\n  {caret}")]
    Syntax {
        /// What is wrong.
        message: String,
        /// The expression as given.
        expr: String,
        /// Character offset of the offending position.
        position: usize,
        /// A line with a caret under the offending position.
        caret: String,
    },
    /// Any semantic problem (extents, shapes, output indices), with a one-line message.
    #[error("{0}")]
    Invalid(String),
}
