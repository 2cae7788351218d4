//! What can go wrong while building or starting a synthetic service.

use std::net::SocketAddr;

/// An error building or starting a synthetic service; each names what was wrong and what was
/// expected.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The experiment file could not be loaded or resolved.
    #[error(transparent)]
    Model(#[from] tailguard_model::ModelError),
    /// The options do not fit the experiment (an unknown service, a replica out of range, a
    /// missing or malformed downstream URL).
    #[error("{0}")]
    Options(String),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The listening socket failed while accepting connections.
    #[error("accepting connections failed: {0}")]
    Accept(std::io::Error),
}
