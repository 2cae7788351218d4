//! A request's downstream calls: plain HTTP GETs to each called service's URL (in the lab, the
//! replica's sidecar egress, which balances, times out, retries and hedges; this side does none
//! of that), one after another or all at once, each edge `count` times.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailguard_model::schema::Fanout;
use tokio::task::JoinSet;

use crate::spec::Spec;

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
    /// (callee, URL) per call, each edge repeated `count` times, in file order.
    plan: Vec<(String, Uri)>,
    fanout: Fanout,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Calls {
    /// The call plan of `spec`: edges with `count: 0` are left out.
    pub fn new(spec: &Spec) -> Calls {
        let mut plan = Vec::new();
        for (edge, url) in spec.service.calls.iter().zip(&spec.downstream) {
            if let Some(url) = url {
                plan.extend(std::iter::repeat_n((edge.service.clone(), url.clone()), edge.count as usize));
            }
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        Calls { plan, fanout: spec.service.fanout, client }
    }

    /// Makes every call; the first failure (sequential: the calls after it are not made;
    /// parallel: all are waited for) is returned as a message naming the callee.
    pub async fn make(&self, context: &TraceContext) -> Result<(), String> {
        match self.fanout {
            Fanout::Sequential => {
                for (callee, url) in &self.plan {
                    call(&self.client, callee, url.clone(), context).await?;
                }
                Ok(())
            }
            Fanout::Parallel => {
                let mut set = JoinSet::new();
                for (callee, url) in &self.plan {
                    let (client, callee, url) = (self.client.clone(), callee.clone(), url.clone());
                    let context = context.clone();
                    set.spawn(async move { call(&client, &callee, url, &context).await });
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

/// One GET; success is a 2xx status with its body read (so the connection can be reused).
async fn call(
    client: &Client<HttpConnector, Empty<Bytes>>,
    callee: &str,
    url: Uri,
    context: &TraceContext,
) -> Result<(), String> {
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
