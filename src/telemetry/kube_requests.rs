//! `tusk_kube_requests_total{verb}`: every request the operator's Kubernetes
//! client sends, counted in a tower layer around it. The API server's own
//! `apiserver_request_total` does not say who asked, and the figure that
//! decides how many Databases one operator carries is how much of the API
//! server it takes (`bench/scale` reads this counter).

use std::task::{Context, Poll};

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// `watch` for a GET with `watch=true`, else the lower-case method.
    pub verb: String,
}

/// The counter family, cloned into the layer and registered once.
#[derive(Clone, Debug, Default)]
pub struct KubeRequests {
    requests: Family<VerbLabels, Counter>,
}

impl KubeRequests {
    /// Registers `tusk_kube_requests_total` in `registry` (unprefixed: pass
    /// the `tusk` sub-registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kube_requests",
            "Requests the operator sent to the Kubernetes API server, by verb (watch for a GET with watch=true)",
            self.requests.clone(),
        );
    }

    /// The layer that counts what passes through it.
    pub fn layer(&self) -> CountLayer {
        CountLayer {
            requests: self.requests.clone(),
        }
    }
}

/// The verb a request counts under.
pub fn verb(method: &Method, query: Option<&str>) -> String {
    let watching = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true"));
    if *method == Method::GET && watching {
        return "watch".to_owned();
    }
    method.as_str().to_ascii_lowercase()
}

#[derive(Clone, Debug)]
pub struct CountLayer {
    requests: Family<VerbLabels, Counter>,
}

impl<S> Layer<S> for CountLayer {
    type Service = CountService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountService {
            inner,
            requests: self.requests.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct CountService<S> {
    inner: S,
    requests: Family<VerbLabels, Counter>,
}

impl<S, B> Service<Request<B>> for CountService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb(request.method(), request.uri().query());
        self.requests.get_or_create(&VerbLabels { verb }).inc();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_with_watch_counts_as_a_watch_and_the_rest_by_method() {
        assert_eq!(
            verb(&Method::GET, Some("labelSelector=a&watch=true")),
            "watch"
        );
        assert_eq!(verb(&Method::GET, Some("watch=truex")), "get");
        assert_eq!(verb(&Method::GET, None), "get");
        assert_eq!(verb(&Method::PATCH, Some("fieldManager=tusk")), "patch");
    }

    #[tokio::test]
    async fn every_request_through_the_layer_is_counted() {
        let counts = KubeRequests::default();
        let mut service = counts
            .layer()
            .layer(tower::service_fn(|_: Request<()>| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        for uri in [
            "/api/v1/pods?watch=true",
            "/api/v1/pods",
            "/api/v1/pods?x=1",
        ] {
            let request = Request::get(uri).body(()).unwrap_or_default();
            let _ = service.call(request).await;
        }
        let count = |verb: &str| {
            counts
                .requests
                .get_or_create(&VerbLabels {
                    verb: verb.to_owned(),
                })
                .get()
        };
        assert_eq!(count("watch"), 1);
        assert_eq!(count("get"), 2);
    }
}
