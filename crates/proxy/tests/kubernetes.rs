//! Kubernetes discovery (the `kube` feature) against a fake API server on 127.0.0.1 that answers
//! the list and the watch of EndpointSlices as the real one does: slices appear, change and
//! disappear while requests go through the proxy, and the proxy's endpoint set follows without a
//! failed request.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tailguard_testkit::{Backend, Mode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// The backends answer 200 after 2 ms.
const PODS: Mode = Mode::Ok(Duration::from_millis(2));

const NAMESPACE: &str = "shop";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices";

/// The EndpointSlices the fake API server holds, with every change as a watch event.
#[derive(Default)]
struct Store {
    /// The last resourceVersion given out.
    version: u64,
    slices: BTreeMap<String, Value>,
    /// (resourceVersion, event type, object), oldest first.
    events: Vec<(u64, &'static str, Value)>,
}

/// A fake Kubernetes API server: lists and watches EndpointSlices of the namespace `shop` by a
/// `kubernetes.io/service-name` label selector, and answers 404 to anything else.
struct FakeApi {
    addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    changed: Arc<watch::Sender<u64>>,
    /// The label selectors asked for, in order.
    selectors: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

type ApiBody = BoxBody<Bytes, Infallible>;

impl FakeApi {
    async fn start() -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Arc::new(Mutex::new(Store::default()));
        let changed = Arc::new(watch::Sender::new(0));
        let selectors = Arc::new(Mutex::new(Vec::new()));
        let (s, c, l) = (store.clone(), changed.clone(), selectors.clone());
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (store, changed, selectors) = (s.clone(), c.clone(), l.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let response = answer(&req, &store, &changed, &selectors);
                    async move { Ok::<_, Infallible>(response) }
                });
                conns.spawn(async move {
                    let _ =
                        auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        FakeApi { addr, store, changed, selectors, task }
    }

    /// Adds or replaces the slice `name` of `service` listing `endpoints` (address, ready,
    /// terminating) at their port, named `http` (one port per slice, as Kubernetes groups
    /// endpoints by port).
    fn put(&self, name: &str, service: &str, endpoints: &[(&Backend, bool, bool)]) {
        let port = endpoints.first().map_or(80, |(b, _, _)| b.addr.port());
        assert!(endpoints.iter().all(|(b, _, _)| b.addr.port() == port), "one port per slice");
        let endpoints: Vec<Value> = endpoints
            .iter()
            .map(|(b, ready, terminating)| {
                json!({"addresses": [b.addr.ip().to_string()], "conditions": {"ready": ready, "serving": ready, "terminating": terminating}})
            })
            .collect();
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": endpoints,
        });
        self.change(name, Some(slice));
    }

    fn delete(&self, name: &str) {
        self.change(name, None);
    }

    fn change(&self, name: &str, slice: Option<Value>) {
        let mut store = self.store.lock().unwrap();
        store.version += 1;
        let version = store.version;
        let (kind, object) = match slice {
            Some(mut slice) => {
                slice["metadata"]["resourceVersion"] = json!(version.to_string());
                let kind = if store.slices.contains_key(name) { "MODIFIED" } else { "ADDED" };
                store.slices.insert(name.to_string(), slice.clone());
                (kind, slice)
            }
            None => {
                let mut slice = store.slices.remove(name).expect("a slice to delete");
                slice["metadata"]["resourceVersion"] = json!(version.to_string());
                ("DELETED", slice)
            }
        };
        store.events.push((version, kind, object));
        drop(store);
        self.changed.send_replace(version);
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fake API server's answer to `req`.
fn answer(
    req: &Request<Incoming>,
    store: &Arc<Mutex<Store>>,
    changed: &watch::Sender<u64>,
    selectors: &Mutex<Vec<String>>,
) -> Response<ApiBody> {
    let status = |code: u16, message: &str| {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code});
        Response::builder().status(code).body(Full::new(Bytes::from(body.to_string())).boxed()).unwrap()
    };
    if req.method() != hyper::Method::GET || req.uri().path() != SLICES {
        return status(404, &format!("not found: {} {}", req.method(), req.uri()));
    }
    let query: HashMap<String, String> = req.uri().query().map(query_pairs).unwrap_or_default();
    let selector = query.get("labelSelector").cloned().unwrap_or_default();
    selectors.lock().unwrap().push(selector.clone());
    let Some(service) = selector.strip_prefix("kubernetes.io/service-name=").map(str::to_string) else {
        return status(400, &format!("unexpected labelSelector {selector:?}"));
    };
    let selected = move |slice: &Value| slice["metadata"]["labels"]["kubernetes.io/service-name"] == service.as_str();
    let json = || Response::builder().header("content-type", "application/json");
    if query.get("watch").map(String::as_str) != Some("true") {
        let store = store.lock().unwrap();
        let items: Vec<&Value> = store.slices.values().filter(|s| selected(s)).collect();
        let list = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSliceList",
            "metadata": {"resourceVersion": store.version.to_string()},
            "items": items,
        });
        return json().body(Full::new(Bytes::from(list.to_string())).boxed()).unwrap();
    }
    // A watch: every event after the version asked for, one JSON object a line, as they come.
    let Some(from) = query.get("resourceVersion").and_then(|v| v.parse::<u64>().ok()) else {
        return status(400, "a watch without a resourceVersion");
    };
    let events =
        futures::stream::unfold((store.clone(), from, changed.subscribe()), move |(store, mut seen, mut changes)| {
            let selected = selected.clone();
            async move {
                loop {
                    changes.borrow_and_update();
                    let lines: String = {
                        let store = store.lock().unwrap();
                        let new = store.events.iter().filter(|(v, _, slice)| *v > seen && selected(slice));
                        let lines = new.map(|(_, kind, slice)| format!("{}\n", json!({"type": kind, "object": slice})));
                        let lines = lines.collect();
                        seen = seen.max(store.version);
                        lines
                    };
                    if !lines.is_empty() {
                        return Some((Ok(Frame::data(Bytes::from(lines))), (store, seen, changes)));
                    }
                    changes.changed().await.ok()?;
                }
            }
        });
    json().body(StreamBody::new(events).boxed()).unwrap()
}

/// `a=b&c=d%2Fe` as pairs, percent-decoded.
fn query_pairs(query: &str) -> HashMap<String, String> {
    let decode = |s: &str| {
        let mut out = Vec::new();
        let mut bytes = s.bytes();
        while let Some(b) = bytes.next() {
            match b {
                b'%' => {
                    let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                    out.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                b'+' => out.push(b' '),
                b => out.push(b),
            }
        }
        String::from_utf8(out).unwrap()
    };
    query.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

type TestClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get(client: &TestClient, url: &str) -> (StatusCode, String) {
    let req = Request::get(url).body(Empty::new()).unwrap();
    let response =
        tokio::time::timeout(Duration::from_secs(5), client.request(req)).await.expect("an answer within 5 s").unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of the sample `series` (name and labels, exactly as exposed), if exposed.
async fn sample(proxy: &Proxy, series: &str) -> Option<f64> {
    let metrics = get(&client(), &format!("http://{}/metrics", proxy.admin.unwrap())).await.1;
    let line = metrics.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))?;
    line[series.len()..].trim().parse().ok()
}

const ENDPOINTS: &str = "tailguard_egress_endpoints{upstream=\"svc\"}";

/// Waits (up to 5 s) until the proxy has `n` endpoints.
async fn until_endpoints(proxy: &Proxy, n: usize) {
    let started = Instant::now();
    loop {
        let now = sample(proxy, ENDPOINTS).await;
        if now == Some(n as f64) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{now:?} endpoints after 5 s, expected {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_set_follows_endpoint_slices_under_load_without_a_failed_request() {
    // Like pods, the backends share a port on addresses of their own (all of 127.0.0.0/8 is
    // loopback).
    let a = Backend::start_on("127.0.0.1:0".parse().unwrap(), "a", PODS).await;
    let port = a.addr.port();
    let on = |last: u8| SocketAddr::from(([127, 0, 0, last], port));
    let (b, c, other) = (
        Backend::start_on(on(2), "b", PODS).await,
        Backend::start_on(on(3), "c", PODS).await,
        Backend::start_on(on(4), "other", PODS).await,
    );
    let api = FakeApi::start().await;
    // `b` is not ready yet; `other` belongs to another Service.
    api.put("backend-1", "backend", &[(&a, true, false), (&b, false, false)]);
    api.put("other-1", "other", &[(&other, true, false)]);

    // The client finds the server in the kubeconfig that KUBECONFIG names (the only test in this
    // binary, so no other test sees the variable).
    let kubeconfig = std::env::temp_dir().join(format!("tailguard-kubeconfig-{}.yaml", std::process::id()));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: 'http://{}'}}}}]\nusers: [{{name: proxy, user: {{token: t}}}}]\ncontexts: [{{name: fake, context: {{cluster: fake, user: proxy, namespace: {NAMESPACE}}}}}]\ncurrent-context: fake\n",
        api.addr
    );
    std::fs::write(&kubeconfig, text).unwrap();
    std::env::set_var("KUBECONFIG", &kubeconfig);
    // The namespace is the kubeconfig context's; `port` by name.
    let config = "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      discovery: {kubernetes: {service: backend, port: http}}\nadmin: {listen: 127.0.0.1:0}\nshutdown_grace: 1s\n";
    let proxy = Arc::new(Proxy::start(Config::parse(config, Path::new("test.yaml")).unwrap()).await.unwrap());
    std::fs::remove_file(&kubeconfig).unwrap();

    // The proxy starts with the first list in: `a` alone.
    assert_eq!(sample(&proxy, ENDPOINTS).await, Some(1.0));
    let url = format!("http://{}/x", proxy.egress.unwrap());
    assert_eq!(get(&client(), &url).await, (StatusCode::OK, "a".to_string()));

    // Four clients in a loop while the slices change.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = JoinSet::new();
    for _ in 0..4 {
        let (url, stop) = (url.clone(), stop.clone());
        load.spawn(async move {
            let client = client();
            let (mut answered, mut failed) = (0, Vec::new());
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                match get(&client, &url).await {
                    (StatusCode::OK, _) => answered += 1,
                    other => failed.push(other),
                }
            }
            (answered, failed)
        });
    }
    let pause = || tokio::time::sleep(Duration::from_millis(200));
    // `b` becomes ready.
    api.put("backend-1", "backend", &[(&a, true, false), (&b, true, false)]);
    until_endpoints(&proxy, 2).await;
    pause().await;
    // A second slice appears with `c`.
    api.put("backend-2", "backend", &[(&c, true, false)]);
    until_endpoints(&proxy, 3).await;
    pause().await;
    // `a` terminates: it leaves (drained) while still listed.
    api.put("backend-1", "backend", &[(&a, false, true), (&b, true, false)]);
    until_endpoints(&proxy, 2).await;
    let a_hits = a.hits();
    pause().await;
    assert_eq!(a.hits(), a_hits, "a terminating endpoint gets no new request");
    // The first slice disappears: `c` alone.
    api.delete("backend-1");
    until_endpoints(&proxy, 1).await;
    let b_hits = b.hits();
    pause().await;
    assert_eq!(b.hits(), b_hits, "an endpoint of a deleted slice gets no new request");
    let c_hits = c.hits();
    pause().await;
    assert!(c.hits() > c_hits + 10, "c alone takes the load: {c_hits} then {}", c.hits());

    stop.store(true, Ordering::SeqCst);
    let (mut answered, mut failed) = (0, Vec::new());
    while let Some(result) = load.join_next().await {
        let (n, f) = result.unwrap();
        answered += n;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}",
        failed.len(),
        answered + failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(answered > 100, "only {answered} requests");
    assert!(a.hits() > 0 && b.hits() > 0, "a {} b {}", a.hits(), b.hits());
    assert_eq!(other.hits(), 0, "another Service's slice is never used");
    let errors = "tailguard_egress_discovery_errors_total{upstream=\"svc\"}";
    assert_eq!(sample(&proxy, errors).await, Some(0.0));

    // The last slice gone: no endpoint is left to name, so the last set is kept (as with DNS), the
    // answer counts as an error, and requests are still answered.
    api.delete("backend-2");
    let started = Instant::now();
    while sample(&proxy, errors).await != Some(1.0) {
        assert!(started.elapsed() < Duration::from_secs(5), "the empty answer was not counted in 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sample(&proxy, ENDPOINTS).await, Some(1.0));
    assert_eq!(get(&client(), &url).await, (StatusCode::OK, "c".to_string()));
    let selectors = api.selectors.lock().unwrap().clone();
    assert!(selectors.iter().all(|s| s == "kubernetes.io/service-name=backend"), "{selectors:?}");
}
