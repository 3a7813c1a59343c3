//! What a handler takes from a request besides the state: the bearer-token
//! authorization of a mutation, and its JSON body.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::super::Shared;
use super::error::{ApiError, Category};

/// The request carries the instance token: it may mutate. Take it as
/// `Result<Authorized, ApiError>` and check it first inside the operation's
/// span, so that a refusal is traced like any other answer.
pub struct Authorized;

impl FromRequestParts<Arc<Shared>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, ApiError> {
        // Without a configured token nothing may mutate: an unset Secret
        // must not mean "open".
        let Some(expected) = &shared.config.token else {
            return Err(ApiError::new(
                Category::Forbidden,
                "mutating endpoints are disabled: TUSK_INSTANCE_TOKEN is not set",
            ));
        };
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        match presented {
            Some(token) if constant_time_eq(token.as_bytes(), expected.expose().as_bytes()) => {
                Ok(Authorized)
            }
            _ => Err(ApiError::new(
                Category::Unauthenticated,
                "missing or wrong bearer token",
            )),
        }
    }
}

/// Equal-length inputs are compared without an early exit, so the time taken does
/// not reveal how much of a guess was right. (The length is not secret.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A JSON body of `T`, decoded only once the handler asks, after the
/// authorization: an unauthorized caller learns nothing of what a body must
/// hold. A body that cannot be read at all is refused by axum, as before.
pub struct JsonBody<T> {
    bytes: Bytes,
    of: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> JsonBody<T> {
    pub fn decode(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.bytes)
            .map_err(|err| ApiError::invalid(format!("invalid body: {err}")))
    }

    /// [`Self::decode`], with an empty (or blank) body meaning the default.
    pub fn decode_or_default(&self) -> Result<T, ApiError>
    where
        T: Default,
    {
        if self.bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        self.decode()
    }
}

impl<T, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = BytesRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, BytesRejection> {
        Ok(JsonBody {
            bytes: Bytes::from_request(request, state).await?,
            of: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_inputs() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    fn body<T>(text: &str) -> JsonBody<T> {
        JsonBody {
            bytes: Bytes::from(text.to_owned()),
            of: PhantomData,
        }
    }

    #[test]
    fn a_blank_body_is_the_default_only_where_asked() {
        let blank = body::<crate::contract::ReloadRequest>(" \n");
        assert!(blank.decode_or_default().is_ok());
        let error = blank.decode().err().map(|e| (e.category, e.message));
        assert!(
            matches!(&error, Some((Category::Invalid, m)) if m.starts_with("invalid body: ")),
            "{error:?}"
        );
    }
}
