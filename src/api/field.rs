//! One problem with a spec, naming the field: what every rule of
//! [`super::validate`] returns, and the webhook and the conditions quote.
//! Its own module so that the rules kept beside their fields (placement,
//! autoGrow, the WAL volume) can build one without depending on `validate`,
//! which depends on them.

use std::fmt;

/// One problem with a spec, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}
