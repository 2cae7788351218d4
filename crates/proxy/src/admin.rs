//! The admin listener: `/healthz`, `/metrics` (Prometheus text) and `/config` (the file as read).

use crate::body::ClientBody;
use crate::http::{full, text, Body};
use crate::metrics::Metrics;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use std::sync::{Arc, RwLock};

/// What the admin endpoints serve.
pub struct Admin {
    source: Arc<RwLock<String>>,
    metrics: Arc<Metrics>,
}

impl Admin {
    /// Serves `source` (the file as last loaded) as the configuration and `metrics`.
    pub fn new(source: Arc<RwLock<String>>, metrics: Arc<Metrics>) -> Admin {
        Admin { source, metrics }
    }

    /// Answers one admin request.
    pub fn handle(&self, req: Request<ClientBody>) -> Response<Body> {
        match req.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok"),
            "/metrics" => {
                with_type(self.metrics.render(), "application/openmetrics-text; version=1.0.0; charset=utf-8")
            }
            "/config" => {
                let source = self.source.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
                with_type(source, "application/yaml")
            }
            _ => text(StatusCode::NOT_FOUND, "not found: try /healthz, /metrics or /config"),
        }
    }
}

fn with_type(body: String, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
