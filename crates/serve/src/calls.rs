//! A request's downstream calls: plain HTTP GETs to each called service's URL (in the lab, the
//! replica's sidecar egress, which balances, times out, retries and hedges; this side does none
//! of that), or a command to a redis or memcached callee ([`crate::store`]), one after another or
//! all at once, each edge `count` times.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailguard_model::schema::Fanout;
use tokio::task::JoinSet;

use crate::spec::{Downstream, Spec};
use crate::store::Store;

/// The most of a downstream answer's body that is read (and thrown away).
const MAX_BODY: usize = 1 << 20;

/// The W3C trace-context headers (`traceparent`, `tracestate`) copied from a request onto its
/// downstream calls, so a sidecar's spans for those calls join the trace of the request
/// (docs/traces.md). The service makes no spans itself: its sidecar's ingress span covers it.
#[derive(Clone, Debug, Default)]
pub struct TraceContext {
    traceparent: Option<HeaderValue>,
    tracestate: Option<HeaderValue>,
}

impl TraceContext {
    /// The trace context of a request with `headers`, if it has one.
    pub fn of(headers: &HeaderMap) -> TraceContext {
        TraceContext {
            traceparent: headers.get("traceparent").cloned(),
            tracestate: headers.get("tracestate").cloned(),
        }
    }
}

/// The calls every request makes, and the client that makes them.
#[derive(Clone, Debug)]
pub struct Calls {
    /// (callee, where) per call, each edge repeated `count` times, in file order.
    plan: Vec<(String, Target)>,
    fanout: Fanout,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Calls {
    /// The call plan of `spec`: edges with `count: 0` are left out.
    pub fn new(spec: &Spec) -> Calls {
        let mut plan = Vec::new();
        for (edge, down) in spec.service.calls.iter().zip(&spec.downstream) {
            let target = match down {
                Some(Downstream::Http(url)) => Target::Http(url.clone()),
                // One store (one connection pool) per edge, shared by its `count` calls.
                Some(Downstream::Store(protocol, addrs)) => Target::Store(Store::new(*protocol, addrs.clone())),
                None => continue,
            };
            plan.extend(std::iter::repeat_n((edge.service.clone(), target), edge.count as usize));
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        Calls { plan, fanout: spec.service.fanout, client }
    }

    /// Makes every call; the first failure (sequential: the calls after it are not made;
    /// parallel: all are waited for) is returned as a message naming the callee.
    pub async fn make(&self, context: &TraceContext) -> Result<(), String> {
        match self.fanout {
            Fanout::Sequential => {
                for (callee, target) in &self.plan {
                    call(&self.client, callee, target, context).await?;
                }
                Ok(())
            }
            Fanout::Parallel => {
                let mut set = JoinSet::new();
                for (callee, target) in &self.plan {
                    let (client, callee, target) = (self.client.clone(), callee.clone(), target.clone());
                    let context = context.clone();
                    set.spawn(async move { call(&client, &callee, &target, &context).await });
                }
                let mut first_failure = None;
                while let Some(joined) = set.join_next().await {
                    let outcome = joined.unwrap_or_else(|e| Err(format!("a call task failed: {e}")));
                    if let (Err(e), None) = (outcome, &first_failure) {
                        first_failure = Some(e);
                    }
                }
                first_failure.map_or(Ok(()), Err)
            }
        }
    }
}

/// Where one call goes.
#[derive(Clone, Debug)]
enum Target {
    Http(Uri),
    Store(Store),
}

/// One call: an HTTP GET (success is a 2xx status with its body read, so the connection can be
/// reused) or one store command exchange.
async fn call(
    client: &Client<HttpConnector, Empty<Bytes>>,
    callee: &str,
    target: &Target,
    context: &TraceContext,
) -> Result<(), String> {
    let url = match target {
        Target::Http(url) => url.clone(),
        Target::Store(store) => return store.call().await.map_err(|e| format!("{callee}: {e}")),
    };
    let mut request = Request::get(url).body(Empty::new()).map_err(|e| format!("{callee}: {e}"))?;
    for (name, value) in [("traceparent", &context.traceparent), ("tracestate", &context.tracestate)] {
        if let Some(value) = value {
            request.headers_mut().insert(name, value.clone());
        }
    }
    let response = client.request(request).await.map_err(|e| format!("{callee}: {e}"))?;
    let status = response.status();
    Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("{callee}: reading the answer: {e}"))?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("{callee}: answered {status}"))
    }
}
