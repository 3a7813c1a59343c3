//! `tusk_kube_requests_total{verb,resource}`: every request the operator's Kubernetes
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
pub struct RequestLabels {
    /// `list`, `get`, `watch`, `create`, `patch`, `update` or `delete`.
    pub verb: String,
    /// The resource's plural, with its subresource (`databases/status`).
    pub resource: String,
}

/// The counter family, cloned into the layer and registered once.
#[derive(Clone, Debug, Default)]
pub struct KubeRequests {
    requests: Family<RequestLabels, Counter>,
}

impl KubeRequests {
    /// Registers `tusk_kube_requests_total` in `registry` (unprefixed: pass
    /// the `tusk` sub-registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kube_requests",
            "Requests the operator sent to the Kubernetes API server, by verb and resource",
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

/// What a request counts under, from its method and path: a GET of a
/// collection is a `list` (a `watch` with `watch=true`), of one object a
/// `get`.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> RequestLabels {
    // `/api/v1/...` or `/apis/<group>/<version>/...`
    let rest: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match rest.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => &[][..],
    };
    let (resource, below) = match rest {
        ["namespaces", _, resource, below @ ..] => (*resource, below),
        [resource, below @ ..] => (*resource, below),
        [] => ("", &[][..]),
    };
    let resource = match below {
        [_, subresource, ..] => format!("{resource}/{subresource}"),
        _ => resource.to_owned(),
    };
    let named = !below.is_empty();
    let watching = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true"));
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PATCH => "patch",
        Method::PUT => "update",
        Method::DELETE => "delete",
        _ => method.as_str(),
    };
    RequestLabels {
        verb: verb.to_ascii_lowercase(),
        resource,
    }
}

#[derive(Clone, Debug)]
pub struct CountLayer {
    requests: Family<RequestLabels, Counter>,
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
    requests: Family<RequestLabels, Counter>,
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
        let labels = classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        self.requests.get_or_create(&labels).inc();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: Method, uri: &str) -> (String, String) {
        let uri: http::Uri = uri.parse().unwrap_or_default();
        let l = classify(&method, uri.path(), uri.query());
        (l.verb, l.resource)
    }

    #[test]
    fn requests_count_by_verb_and_resource() {
        let pair = |v: &str, r: &str| (v.to_owned(), r.to_owned());
        assert_eq!(
            labels(
                Method::GET,
                "/api/v1/namespaces/shop/secrets?labelSelector=a"
            ),
            pair("list", "secrets")
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/pods?watch=true&resourceVersion=1"),
            pair("watch", "pods")
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/namespaces/shop/secrets/orders-ca"),
            pair("get", "secrets")
        );
        assert_eq!(
            labels(
                Method::PATCH,
                "/apis/tusk.dev/v1/namespaces/shop/databases/orders/status?fieldManager=tusk"
            ),
            pair("patch", "databases/status")
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/namespaces/shop"),
            pair("get", "namespaces")
        );
        assert_eq!(
            labels(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/shop/events"
            ),
            pair("create", "events")
        );
        assert_eq!(
            labels(
                Method::GET,
                "/apis/storage.k8s.io/v1/storageclasses/standard"
            ),
            pair("get", "storageclasses")
        );
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
                .get_or_create(&RequestLabels {
                    verb: verb.to_owned(),
                    resource: "pods".to_owned(),
                })
                .get()
        };
        assert_eq!(count("watch"), 1);
        assert_eq!(count("list"), 2);
    }
}
