//! Keeps the webhook certificate alive: creates the Secret when missing, renews
//! the serving certificate before it expires, reloads the running TLS server, and
//! keeps the `caBundle` current in the CRDs and the ValidatingWebhookConfiguration.
//! Every replica runs it; writes use resourceVersion preconditions, so replicas
//! racing on a renewal converge on one certificate.

use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

use super::Error;
use super::certs::{self, CertBundle};

#[derive(Clone, Debug)]
pub struct RotationConfig {
    pub namespace: String,
    pub secret: String,
    pub service: String,
    pub crds: Vec<String>,
    pub validating_webhook: String,
    pub interval: Duration,
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Returns a current bundle, creating or renewing the Secret when needed.
pub async fn ensure(client: &Client, config: &RotationConfig) -> Result<CertBundle, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    for _ in 0..5 {
        let now = Timestamp::now();
        let existing = secrets
            .get_opt(&config.secret)
            .await
            .map_err(Error::kube("reading the webhook certificate"))?;
        let Some(secret) = existing else {
            let bundle = certs::generate(&config.service, &config.namespace, now)?;
            let secret = certs::to_secret(&bundle, &config.secret, &config.namespace);
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    info!(secret = %config.secret, "created the webhook certificate");
                    return Ok(bundle);
                }
                Err(e) if conflict(&e) => continue,
                Err(e) => return Err(Error::kube("creating the webhook certificate")(e)),
            }
        };
        let next = match certs::from_secret(&secret) {
            Ok(bundle) if !certs::needs_renewal(&bundle, now) => return Ok(bundle),
            Ok(bundle) => certs::renew(&bundle, &config.service, &config.namespace, now)?,
            Err(e) => {
                warn!(error = %e, "the webhook certificate Secret is unusable; issuing a new CA");
                certs::generate(&config.service, &config.namespace, now)?
            }
        };
        let mut replacement = certs::to_secret(&next, &config.secret, &config.namespace);
        replacement.metadata.resource_version = secret.metadata.resource_version.clone();
        match secrets
            .replace(&config.secret, &PostParams::default(), &replacement)
            .await
        {
            Ok(_) => {
                info!(secret = %config.secret, not_after = %next.not_after, "renewed the webhook certificate");
                return Ok(next);
            }
            Err(e) if conflict(&e) => continue,
            Err(e) => return Err(Error::kube("renewing the webhook certificate")(e)),
        }
    }
    Err(Error::Certificate(certs::CertError::Missing(
        "a stable Secret after 5 conflicting writes",
    )))
}

/// Puts `ca` into the CRDs' conversion webhook and the validating webhooks, where it differs.
pub async fn publish_ca_bundle(
    client: &Client,
    config: &RotationConfig,
    ca: &str,
) -> Result<(), Error> {
    let bundle = ByteString(ca.as_bytes().to_vec());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &config.crds {
        let Some(crd) = crds
            .get_opt(name)
            .await
            .map_err(Error::kube("reading a CRD"))?
        else {
            continue;
        };
        let current = crd
            .spec
            .conversion
            .as_ref()
            .and_then(|c| c.webhook.as_ref())
            .and_then(|w| w.client_config.as_ref())
            .and_then(|c| c.ca_bundle.as_ref());
        if current != Some(&bundle) {
            let encoded = base64::engine::general_purpose::STANDARD.encode(ca);
            let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": encoded}}}}});
            crds.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube("publishing the CA bundle to a CRD"))?;
            info!(crd = %name, "published the webhook CA bundle");
        }
    }
    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(mut configuration) = hooks
        .get_opt(&config.validating_webhook)
        .await
        .map_err(Error::kube("reading the ValidatingWebhookConfiguration"))?
    {
        let mut changed = false;
        for webhook in configuration.webhooks.iter_mut().flatten() {
            if webhook.client_config.ca_bundle.as_ref() != Some(&bundle) {
                webhook.client_config.ca_bundle = Some(bundle.clone());
                changed = true;
            }
        }
        if changed {
            match hooks
                .replace(
                    &config.validating_webhook,
                    &PostParams::default(),
                    &configuration,
                )
                .await
            {
                Ok(_) => {
                    info!(configuration = %config.validating_webhook, "published the webhook CA bundle")
                }
                // Another replica got there first; the next pass checks again.
                Err(e) if conflict(&e) => {}
                Err(e) => return Err(Error::kube("publishing the CA bundle to the webhooks")(e)),
            }
        }
    }
    Ok(())
}

/// Prepares the TLS configuration the server starts with.
pub async fn initial(
    client: &Client,
    config: &RotationConfig,
) -> Result<(RustlsConfig, CertBundle), Error> {
    let bundle = ensure(client, config).await?;
    publish_ca_bundle(client, config, &bundle.ca_cert).await?;
    let tls = RustlsConfig::from_pem(
        bundle.tls_cert.clone().into_bytes(),
        bundle.tls_key.clone().into_bytes(),
    )
    .await
    .map_err(Error::Tls)?;
    Ok((tls, bundle))
}

/// Re-checks every `interval` until `shutdown`, reloading `tls` when the certificate changes.
pub async fn run(
    client: Client,
    config: RotationConfig,
    tls: RustlsConfig,
    mut current: CertBundle,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let bundle = match ensure(&client, &config).await {
            Ok(bundle) => bundle,
            Err(error) => {
                warn!(%error, "could not check the webhook certificate");
                continue;
            }
        };
        if bundle.tls_cert != current.tls_cert {
            match tls
                .reload_from_pem(
                    bundle.tls_cert.clone().into_bytes(),
                    bundle.tls_key.clone().into_bytes(),
                )
                .await
            {
                Ok(()) => info!(not_after = %bundle.not_after, "reloaded the webhook certificate"),
                Err(error) => {
                    warn!(%error, "could not load the renewed webhook certificate");
                    continue;
                }
            }
        }
        if let Err(error) = publish_ca_bundle(&client, &config, &bundle.ca_cert).await {
            warn!(%error, "could not publish the webhook CA bundle");
        }
        current = bundle;
    }
}
