//! Apply the TLS lifecycle's actions (`lifecycle::tls::TlsAction`): keys
//! and certificates are generated here (randomness stays at the edge) with
//! `crate::tls::Authority`, and the Secrets are laid out by the builders of
//! `resources::tls` and written with server-side apply. `<db>-ca` is read
//! again before each step: what it holds is kept, whatever the pass saw.

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::{Applier, Done};
use crate::contract::tls::OPERATOR_COMMON_NAME;
use crate::controller::Error;
use crate::controller::database::observe::tls::{
    InstanceParts, ROTATION_ANNOTATION, TlsMaterial, pem_blocks,
};
use crate::lifecycle::tls::{CaRef, LeafKind, TlsAction};
use crate::postgres::REPLICATION_USER;
use crate::resources::tls::{self as built, CaMaterial, InstanceMaterial, KeyPair};
use crate::resources::{SecretKind, names};
use crate::tls::{Authority, CertInfo};

/// What `<db>-ca` holds now.
#[derive(Clone, Debug, Default)]
struct CaState {
    current: Option<KeyPair>,
    next: Option<KeyPair>,
    operator: Option<KeyPair>,
    rotation: Option<String>,
}

impl Applier<'_> {
    /// Carries out one TLS step.
    pub(super) async fn tls(&self, action: &TlsAction) -> Result<Option<Done>, Error> {
        match action {
            TlsAction::ApplyCertificate => return self.apply_certificate().await,
            TlsAction::DeleteCertificate { name } => return self.delete_certificate(name).await,
            _ => {}
        }
        let mut state = self.read_ca().await?;
        let now = jiff::Timestamp::now();
        match action {
            TlsAction::CreateCa { rotation } => {
                let ca = self.new_ca(now)?;
                let authority = Authority::from_pem(&ca.cert_pem, &ca.key_pem)
                    .map_err(tls_error("reading the new CA"))?;
                let operator = authority
                    .issue_client(OPERATOR_COMMON_NAME, self.lifetime(), now)
                    .map_err(tls_error("issuing the operator's identity"))?;
                state.operator = Some(pair(operator));
                state.current = Some(ca);
                state.next = None;
                state.rotation = rotation.clone();
                self.write_ca(&state).await?;
                done(
                    "CertificateAuthorityCreated",
                    format!("created the CA in Secret {}", self.ca_name()),
                )
            }
            TlsAction::CreateNextCa { rotation } => {
                state.next = Some(self.new_ca(now)?);
                state.rotation = rotation.clone();
                self.write_ca(&state).await?;
                done(
                    "CertificateAuthorityRotating",
                    format!(
                        "created the next CA in Secret {}: trusting both",
                        self.ca_name()
                    ),
                )
            }
            TlsAction::PromoteNext => {
                if let Some(next) = state.next.take() {
                    state.current = Some(next);
                }
                self.write_ca(&state).await?;
                done(
                    "CertificateAuthorityPromoted",
                    "the new CA is the current one; dropping the old".to_owned(),
                )
            }
            TlsAction::IssueOperator { issuer } => {
                let authority = self.authority(&state, issuer)?;
                let leaf = authority
                    .issue_client(OPERATOR_COMMON_NAME, self.lifetime(), now)
                    .map_err(tls_error("issuing the operator's identity"))?;
                state.operator = Some(pair(leaf));
                self.write_ca(&state).await?;
                Ok(None)
            }
            TlsAction::WriteInstance {
                instance,
                trust,
                issue,
                issuer,
            } => {
                self.write_instance(&state, instance, trust, issue, issuer.as_ref(), now)
                    .await?;
                Ok(None)
            }
            TlsAction::WriteApp { issuer } => self.write_app(&state, issuer.as_ref(), now).await,
            TlsAction::ApplyCertificate | TlsAction::DeleteCertificate { .. } => Ok(None),
        }
    }

    /// Issues the application role's certificate into `<db>-app` from
    /// `issuer` (common name = the role, which `cert` authentication maps
    /// to the role), or removes it when `None`; `ca.crt` stays as the
    /// instances' writes left it.
    async fn write_app(
        &self,
        state: &CaState,
        issuer: Option<&CaRef>,
        now: jiff::Timestamp,
    ) -> Result<Option<Done>, Error> {
        let name = names::app_secret(&self.model.name);
        let Some(existing) = self
            .secrets()
            .get_opt(&name)
            .await
            .map_err(Error::kube("reading the application Secret"))?
        else {
            // It is created with its password first: an apply here would
            // create it without one. The next pass issues.
            return Ok(None);
        };
        let role = &self.model.initdb.owner;
        let client = match issuer {
            Some(issuer) => Some(pair(
                self.authority(state, issuer)?
                    .issue_client(role, self.lifetime(), now)
                    .map_err(tls_error("issuing the application role's certificate"))?,
            )),
            None => None,
        };
        let issued = client.is_some();
        let material = built::ClientMaterial {
            ca_bundle: built::text(&existing, built::CLIENT_CA_KEY).unwrap_or_default(),
            client,
        };
        self.apply_credential_tls(SecretKind::App, &material)
            .await?;
        if issued {
            done(
                "ClientCertificateIssued",
                format!("issued the certificate of role {role} into Secret {name}"),
            )
        } else {
            done(
                "ClientCertificateRemoved",
                format!("removed the certificate of role {role} from Secret {name}"),
            )
        }
    }

    /// The Certificate `spec.tls.certManager` asked for, once it is unset
    /// (gone already is as good).
    async fn delete_certificate(&self, name: &str) -> Result<Option<Done>, Error> {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            self.namespace,
            &crate::resources::cert_manager::api_resource(),
        );
        match api.delete(name, &kube::api::DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(e) => return Err(Error::kube("deleting the cert-manager Certificate")(e)),
        }
        done(
            "CertificateDeleted",
            format!("deleted cert-manager Certificate {name}: spec.tls.certManager is unset"),
        )
    }

    /// cert-manager's Certificate (`spec.tls.certManager`) for the names
    /// observed this pass, server-side applied as any child is.
    async fn apply_certificate(&self) -> Result<Option<Done>, Error> {
        let crate::api::tls::TlsSource::CertManager { issuer, .. } = &self.model.tls.source else {
            return Ok(None);
        };
        let none = TlsMaterial::default();
        let names = self
            .snapshot
            .tls
            .as_ref()
            .unwrap_or(&none)
            .certificate_names();
        let object = crate::resources::cert_manager::certificate(
            self.model,
            issuer,
            &names,
            self.model.tls.certificate_lifetime,
            self.model.tls.renew_before,
        );
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            self.namespace,
            &crate::resources::cert_manager::api_resource(),
        );
        api.patch(
            &name,
            &kube::api::PatchParams::apply(crate::controller::FIELD_MANAGER).force(),
            &kube::api::Patch::Apply(&object),
        )
        .await
        .map_err(Error::kube("writing the cert-manager Certificate"))?;
        done(
            "CertificateRequested",
            format!(
                "wrote cert-manager Certificate {name} ({}) for {} names",
                issuer.describe(),
                names.len()
            ),
        )
    }

    async fn write_instance(
        &self,
        state: &CaState,
        instance: &str,
        trust: &[CaRef],
        issue: &[LeafKind],
        issuer: Option<&CaRef>,
        now: jiff::Timestamp,
    ) -> Result<(), Error> {
        let secret_name = names::instance_tls_secret(instance);
        let existing = self
            .secrets()
            .get_opt(&secret_name)
            .await
            .map_err(Error::kube("reading an instance TLS Secret"))?
            .map(|s| InstanceParts::from_secret(&s))
            .unwrap_or_default();
        let mut bundle = String::new();
        for ca in trust {
            bundle.push_str(&self.ca_pem(state, ca)?);
        }
        let mut server = existing.server.clone().unwrap_or_default();
        let mut api = existing.api.clone().unwrap_or_default();
        let mut replication = existing.replication.clone().unwrap_or_default();
        if let Some(issuer) = issuer.filter(|_| !issue.is_empty()) {
            let authority = self.authority(state, issuer)?;
            let lifetime = self.lifetime();
            for kind in issue {
                let leaf = match kind {
                    LeafKind::Server => {
                        authority.issue_server(&self.server_names(instance), lifetime, now)
                    }
                    LeafKind::Api => authority.issue_identity(instance, lifetime, now),
                    LeafKind::Replication => {
                        authority.issue_client(REPLICATION_USER, lifetime, now)
                    }
                }
                .map_err(tls_error("issuing an instance certificate"))?;
                match kind {
                    LeafKind::Server => server = pair(leaf),
                    LeafKind::Api => api = pair(leaf),
                    LeafKind::Replication => replication = pair(leaf),
                }
            }
        }
        let mut ca_bundle = bundle.clone();
        // What applications verify PostgreSQL with: the CA that issued the
        // server certificate (the user's, with spec.tls.server).
        let mut for_clients = bundle.clone();
        if let Some(user) = self
            .snapshot
            .tls
            .as_ref()
            .and_then(|t| t.user_server.as_ref())
        {
            // spec.tls.server: the user's certificate, verified by their CA.
            server = KeyPair {
                cert_pem: user.cert_pem.clone(),
                key_pem: user.key_pem.clone(),
            };
            ca_bundle.push_str(&user.ca_pem);
            for_clients = user.ca_pem.clone();
        }
        let material = InstanceMaterial {
            ca_bundle,
            client_ca_bundle: bundle.clone(),
            server,
            api,
            replication,
        };
        let secret = built::instance_tls_secret(self.model, instance, &material);
        self.server_side_apply(&secret, "writing an instance TLS Secret")
            .await?;
        self.credential_bundles(&for_clients).await
    }

    /// The CA bundle of `<db>-app` and `<db>-superuser` follows the
    /// instances' (their own field manager: never a password). The
    /// application role's certificate in `<db>-app` is carried over as it
    /// is (one apply owns every TLS key: leaving it out would remove it);
    /// `TlsAction::WriteApp` issues and removes it.
    async fn credential_bundles(&self, bundle: &str) -> Result<(), Error> {
        for (kind, client) in built::credential_secrets(self.model) {
            let name = kind.secret_name(&self.model.name);
            let client = if client {
                self.secrets()
                    .get_opt(&name)
                    .await
                    .map_err(Error::kube("reading a credential Secret"))?
                    .as_ref()
                    .and_then(built::held_client)
            } else {
                None
            };
            let material = built::ClientMaterial {
                ca_bundle: bundle.to_owned(),
                client,
            };
            self.apply_credential_tls(kind, &material).await?;
        }
        Ok(())
    }

    /// Server-side applies the TLS keys of credential Secret `kind` under
    /// their own field manager.
    async fn apply_credential_tls(
        &self,
        kind: SecretKind,
        material: &built::ClientMaterial,
    ) -> Result<(), Error> {
        let body = built::credential_tls_apply(self.model, kind, material);
        let name = body.metadata.name.clone().unwrap_or_default();
        self.secrets()
            .patch(
                &name,
                &kube::api::PatchParams::apply(built::TLS_FIELD_MANAGER).force(),
                &kube::api::Patch::Apply(&body),
            )
            .await
            .map_err(Error::kube("writing a credential Secret's TLS keys"))?;
        Ok(())
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    fn ca_name(&self) -> String {
        names::ca_secret(&self.model.name)
    }

    async fn read_ca(&self) -> Result<CaState, Error> {
        let Some(secret) = self
            .secrets()
            .get_opt(&self.ca_name())
            .await
            .map_err(Error::kube("reading the CA Secret"))?
        else {
            return Ok(CaState::default());
        };
        let pair = |cert: &str, key: &str| {
            Some(KeyPair {
                cert_pem: built::text(&secret, cert).ok()?,
                key_pem: built::text(&secret, key).ok()?,
            })
        };
        Ok(CaState {
            current: pair(built::CA_CERT, built::CA_KEY),
            next: pair(built::NEXT_CA_CERT, built::NEXT_CA_KEY),
            operator: pair(built::OPERATOR_CERT, built::OPERATOR_KEY),
            rotation: secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ROTATION_ANNOTATION))
                .cloned(),
        })
    }

    async fn write_ca(&self, state: &CaState) -> Result<(), Error> {
        let material = CaMaterial {
            ca: state.current.clone(),
            next: state.next.clone(),
            operator: state.operator.clone().unwrap_or_default(),
        };
        let mut secret = built::ca_secret(self.model, &material);
        if let Some(data) = secret.data.as_mut() {
            // No identity yet: leave the keys out rather than write them empty.
            data.retain(|_, v| !v.0.is_empty());
        }
        if let Some(rotation) = &state.rotation {
            secret
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ROTATION_ANNOTATION.to_owned(), rotation.clone());
        }
        self.server_side_apply(&secret, "writing the CA Secret")
            .await
    }

    fn new_ca(&self, now: jiff::Timestamp) -> Result<KeyPair, Error> {
        let lifetime =
            SignedDuration::try_from(self.model.tls.ca_lifetime).unwrap_or(SignedDuration::MAX);
        let name = format!("tusk {}/{} CA", self.namespace, self.model.name);
        let ca = Authority::generate(&name, lifetime, now).map_err(tls_error("generating a CA"))?;
        Ok(KeyPair {
            cert_pem: ca.cert_pem().to_owned(),
            key_pem: ca.key_pem().to_owned(),
        })
    }

    fn lifetime(&self) -> SignedDuration {
        SignedDuration::try_from(self.model.tls.certificate_lifetime).unwrap_or(SignedDuration::MAX)
    }

    /// The names of `instance`'s server certificate, published endpoints'
    /// included (`observe::tls::TlsMaterial::server_names`).
    fn server_names(&self, instance: &str) -> Vec<String> {
        let none = TlsMaterial::default();
        self.snapshot.tls.as_ref().unwrap_or(&none).server_names(
            &self.model.name,
            self.namespace,
            instance,
        )
    }

    /// The key pair of CA `ca`: the user's, the current or the next one.
    fn ca_pair(&self, state: &CaState, ca: &CaRef) -> Result<KeyPair, Error> {
        let user = self.snapshot.tls.as_ref().and_then(|t| t.user_ca.clone());
        let candidates = [state.current.clone(), state.next.clone(), user];
        let found = match ca {
            CaRef::Created => state.current.clone(),
            CaRef::Known(fp) => candidates
                .into_iter()
                .flatten()
                .find(|pair| CertInfo::parse(&pair.cert_pem).is_ok_and(|i| i.fingerprint == *fp)),
        };
        found.ok_or_else(|| Error::Tls {
            context: "finding the CA to issue from",
            message: format!(
                "no CA {ca:?} in Secret {} or the user's Secret",
                self.ca_name()
            ),
        })
    }

    fn authority(&self, state: &CaState, ca: &CaRef) -> Result<Authority, Error> {
        let pair = self.ca_pair(state, ca)?;
        Authority::from_pem(&pair.cert_pem, &pair.key_pem).map_err(tls_error("reading a CA"))
    }

    /// The certificate of CA `ca` for a bundle: one Tusk holds the key of,
    /// or one only known from an instance's bundle (a CA being dropped).
    fn ca_pem(&self, state: &CaState, ca: &CaRef) -> Result<String, Error> {
        if let Ok(pair) = self.ca_pair(state, ca) {
            return Ok(pem_blocks(&pair.cert_pem).concat());
        }
        let CaRef::Known(fp) = ca else {
            return Err(Error::Tls {
                context: "finding a CA for a trust bundle",
                message: format!("Secret {} has no CA", self.ca_name()),
            });
        };
        self.snapshot
            .tls
            .as_ref()
            .and_then(|t| t.cas.get(fp).cloned())
            .ok_or_else(|| Error::Tls {
                context: "finding a CA for a trust bundle",
                message: format!("no certificate of CA {fp} is known"),
            })
    }
}

fn pair(leaf: crate::tls::Leaf) -> KeyPair {
    KeyPair {
        cert_pem: leaf.cert_pem,
        key_pem: leaf.key_pem,
    }
}

fn done(reason: &'static str, note: String) -> Result<Option<Done>, Error> {
    Ok(Some(Done { reason, note }))
}

fn tls_error(context: &'static str) -> impl Fn(crate::tls::Error) -> Error {
    move |error| Error::Tls {
        context,
        message: error.to_string(),
    }
}
