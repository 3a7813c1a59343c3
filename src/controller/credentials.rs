//! The credentials the controllers present to the instance managers: the
//! token of a Database's managers, from the Secret the Database controller
//! creates. Any controller that calls a manager's `POST` reads it here.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::{Context, Error};
use crate::resources::{PASSWORD_KEY, names};

/// The token the managers of `database` take for their `POST`s.
pub async fn instance_token(
    ctx: &Context,
    namespace: &str,
    database: &str,
) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get(&names::instance_token_secret(database))
        .await
        .map_err(Error::kube("reading the instance token Secret"))?;
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(PASSWORD_KEY))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .ok_or(Error::MissingField("password in the instance token Secret"))
}
