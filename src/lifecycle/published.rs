//! What the controller observed of the published endpoints
//! (`spec.expose`): each entry's Service, the probe through it, the
//! operator's own address and `<db>-app-external`. Plain data for
//! `Observed.exposure`; `exposure` decides on it.

use crate::api::expose::{ExposeTarget, ExposeType};

/// What the controller observed of `spec.expose`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExposureObserved {
    /// One per `spec.expose` entry, in the spec's order.
    pub entries: Vec<EntryObserved>,
    /// The operator pod's own address (`POD_IP`), to tell a user whose
    /// `allowedSourceRanges` leave the probe out.
    pub operator_address: Option<String>,
    /// The `<db>-app-external` Secret, against what the builder makes.
    pub external_secret: ExternalSecret,
}

/// One `spec.expose` entry and what Kubernetes did with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryObserved {
    pub target: ExposeTarget,
    pub type_: ExposeType,
    pub hostname: Option<String>,
    pub allowed_source_ranges: Vec<String>,
    /// The Service's name (`api::expose::service_name`).
    pub service: String,
    /// The Service, when it exists.
    pub seen: Option<ServiceSeen>,
    /// The handshake through the first address, when there was one.
    pub probe: EndpointProbe,
}

/// What a published Service says of its addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceSeen {
    /// `status.loadBalancer.ingress`: each entry's IP, else its hostname.
    pub ingress: Vec<String>,
    /// `spec.ports[0].nodePort`.
    pub node_port: Option<i32>,
}

/// The outcome of the handshake through an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EndpointProbe {
    /// No address to probe (or not probed in this pass).
    #[default]
    NotProbed,
    /// PostgreSQL answered and presented a certificate that verified.
    Reached,
    /// Why it failed, in plain words.
    Failed(String),
}

/// `<db>-app-external` as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ExternalSecret {
    #[default]
    Absent,
    /// It holds exactly what the builder makes from this pass.
    AsBuilt,
    /// It exists and differs (or nothing can be built now).
    Differs,
    /// It cannot be built now (the `<db>-app` Secret is missing or
    /// incomplete); why. One that exists is left as it is.
    Unbuildable(String),
}
