//! tailguard on Kubernetes (docs/deploy.md).
//!
//! - [`inject`]: `tailguard inject`, which adds the tailguard sidecar to the workloads of a
//!   manifest stream (as `linkerd inject` does) and leaves everything else as it was;
//! - [`render`]: `tailguard lab render --k8s`, an experiment file as manifests, so an experiment
//!   too big for one machine runs on a cluster from the same file;
//! - [`sidecar`]: what both add to a pod (the native sidecar container, its ConfigMap volume,
//!   Prometheus annotations);
//! - [`manifest`]: multi-document YAML streams read and written as generic values, so fields
//!   this crate does not know are kept as they were.
//!
//! Every manifest written here is checked offline and strictly against the Kubernetes API's
//! types by `tools/k8s-validate` (tests/validate.rs).

pub mod inject;
pub mod manifest;
pub mod render;
pub mod sidecar;

pub use inject::{inject, InjectOptions};
pub use manifest::ManifestError;
pub use render::{render, RenderOptions};

/// The image every manifest runs unless told otherwise: the `tailguard` binary of this version
/// (the Dockerfile at the repository's root builds it).
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/tailguard/tailguard:", env!("CARGO_PKG_VERSION"));
