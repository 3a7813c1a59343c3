//! The API's one error: a [`Category`], which fixes the HTTP status, and a
//! message, answered as the contract's [`ErrorBody`].

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::contract::ErrorBody;

/// What kind of refusal or failure an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// The request is malformed or asks for what cannot be (400).
    Invalid,
    /// No bearer token, or the wrong one (401).
    Unauthenticated,
    /// The path needs a client certificate and none was presented (401,
    /// without a bearer challenge: no token would do).
    Uncertified,
    /// Mutations are disabled on this instance, or the client certificate
    /// names someone who may not call it (403).
    Forbidden,
    /// There is nothing of the kind here (404).
    NotFound,
    /// The instance's state does not allow it now (409).
    Conflict,
    /// It failed on this instance (500).
    Internal,
    /// PostgreSQL, or what the operation needs, is not available (503).
    Unavailable,
    /// It did not finish in time (504).
    Timeout,
}

impl Category {
    pub fn status(self) -> StatusCode {
        match self {
            Category::Invalid => StatusCode::BAD_REQUEST,
            Category::Unauthenticated | Category::Uncertified => StatusCode::UNAUTHORIZED,
            Category::Forbidden => StatusCode::FORBIDDEN,
            Category::NotFound => StatusCode::NOT_FOUND,
            Category::Conflict => StatusCode::CONFLICT,
            Category::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Category::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Category::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// Why a request was not carried out.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub category: Category,
    pub message: String,
}

impl ApiError {
    pub fn new(category: Category, message: impl Into<String>) -> Self {
        ApiError {
            category,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(Category::Invalid, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(Category::Conflict, message)
    }

    pub fn internal(error: impl std::fmt::Display) -> Self {
        ApiError::new(Category::Internal, error.to_string())
    }

    /// The local PostgreSQL could not be reached or answer.
    pub fn postgres(error: impl std::fmt::Display) -> Self {
        ApiError::new(
            Category::Unavailable,
            format!("PostgreSQL is not available: {error}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.category.status();
        let body = Json(ErrorBody {
            error: self.message,
        });
        if self.category == Category::Unauthenticated {
            (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (status, body).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_token_asks_for_a_bearer_token() {
        let response = ApiError::new(Category::Unauthenticated, "no").into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers().get(header::WWW_AUTHENTICATE),
            Some(&header::HeaderValue::from_static("Bearer"))
        );
        let response = ApiError::postgres("down").into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get(header::WWW_AUTHENTICATE).is_none());
    }
}
