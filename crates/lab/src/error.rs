//! What can go wrong in the lab, each error naming the run, the process or the file at fault.

use std::path::PathBuf;

/// An error of the lab. Processes it started are stopped before it is returned. An I/O error is
/// part of the message, not a `source`: printed as a chain it would appear twice.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The experiment file could not be resolved for a run.
    #[error(transparent)]
    Model(#[from] tailguard_model::ModelError),
    /// A process could not be started.
    #[error("cannot start {name} ({command}): {error}")]
    Spawn { name: String, command: String, error: std::io::Error },
    /// A process exited, or never became ready, while the lab needed it.
    #[error("{name} {what}; the end of its stderr ({log}):\n{tail}")]
    Process { name: String, what: String, log: PathBuf, tail: String },
    /// The load generator refused its configuration.
    #[error("the load generator: {0}")]
    Load(#[from] tailguard_load::LoadError),
    /// A file of the lab's output could not be written.
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: std::io::Error },
    /// A variant's peer sidecar (HAProxy, nginx) cannot express one of its policies.
    #[error("{scenario} / {variant}: {refused}")]
    Peer { scenario: String, variant: String, refused: crate::peers::Refused },
    /// Setting up the network (addresses, namespaces, delays) failed.
    #[error("network set-up: {0}")]
    Network(String),
    /// Ctrl-C or SIGTERM: the lab stopped what it started and gave up.
    #[error("interrupted: every process the lab started has been stopped")]
    Interrupted,
    /// Every selected run was skipped (they need the simulator's oracle balancer).
    #[error(
        "nothing was run: {} need the oracle balancer, which exists only in the simulator (`tailguard sim`); \
         choose other variants with --variant",
        skipped.join(", ")
    )]
    NothingToRun { skipped: Vec<String> },
    /// `error` stopped the lab after some runs had finished: `finished` holds their results
    /// (their traces are written), for the caller to save.
    #[error("{error} ({} of {total} runs had finished)", finished.runs.len())]
    Unfinished { finished: Box<tailguard_sim::Results>, total: usize, error: Box<LabError> },
}
