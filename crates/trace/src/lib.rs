//! tailguard's traces (docs/traces.md): one span model ([`model`]) for the lab and the
//! simulator, written and read as Jaeger-compatible JSON ([`jaeger`]), and an in-process OTLP/HTTP
//! receiver ([`collector`]) that the lab starts so a run collects its proxies' spans by itself.
//!
//! The tuner (python/) reads the Jaeger files to find each request's critical path and each
//! service's latency variability, so every span names its service (its process) and its parent.

#[cfg(feature = "collector")]
pub mod collector;
pub mod jaeger;
pub mod model;

#[cfg(feature = "collector")]
pub use collector::{Collector, CollectorHandle};
pub use jaeger::JaegerError;
pub use model::{Process, Span, Tag, Trace, Value};
