//! [`Experiment`]: an experiment file loaded and validated; [`Run`]: one scenario × variant of
//! it, with every override applied, ready for the simulator or the lab.
//!
//! Resolution order (docs/experiment-files.md): the file as written; the `quick` overrides (for
//! `--quick` runs); the scenario's `set`; the variant's `set`; then the variant's policies
//! (`client`, `edges`, `admission`), where an `outlier` left out becomes `off` for a peer's
//! variant and for a plain load-generator client; then validation of the result.

use crate::calibration::Calibration;
use crate::error::ModelError;
use crate::schema::{ExperimentFile, Network, OutlierSetting, Service, SidecarKind, Variant, Workload};
use crate::{overrides, validate};
use indexmap::IndexMap;
use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scenario name of a file that lists none.
pub const DEFAULT_SCENARIO: &str = "default";

/// Top-level keys starting with this are ignored: a place for YAML anchors shared by variants
/// (`x-fast: &fast {...}`), as in Docker Compose files.
pub const EXTENSION_PREFIX: &str = "x-";

/// An experiment file, loaded and validated.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// The file as written (after YAML merge keys).
    pub file: ExperimentFile,
    /// The file's path, as given (errors name it).
    origin: PathBuf,
    /// The file as a YAML document, which overrides are applied to.
    doc: Value,
}

/// One scenario × variant of an experiment, self-contained: every override applied, every call
/// edge's `policy` final, the workload's `client` final.
#[derive(Clone, Debug)]
pub struct Run {
    /// The scenario's name (`default` when the file has none).
    pub scenario: String,
    /// The variant's name.
    pub variant: String,
    /// Services by name, in file order.
    pub services: IndexMap<String, Service>,
    /// The network between services.
    pub network: Network,
    /// The load offered.
    pub workload: Workload,
    /// The experiment file's directory: relative paths in the run (empirical data) start here.
    pub base_dir: PathBuf,
    /// The variant's sidecar (the lab runs it beside every replica; the simulator runs a peer's
    /// policies as the peer does and labels its results with it).
    pub sidecar: SidecarKind,
    /// The calibration `network.calibrated` names, read (the simulator charges its hops).
    pub calibration: Option<Calibration>,
}

impl Run {
    /// The run's length (warm-up + duration), unless it is sized by a number of requests.
    pub fn horizon(&self) -> Option<Duration> {
        self.workload.duration.map(|d| self.workload.warmup.get() + d.get())
    }

    /// The threads of a peer sidecar's process (HAProxy's `nbthread`, by default one per core):
    /// the calibrated machine's cores; one without a calibration, so that a run reads the same on
    /// every machine.
    pub fn peer_threads(&self) -> u32 {
        self.calibration.as_ref().and_then(|c| c.cores).unwrap_or(1)
    }

    /// The seed of this run's random streams (its open-loop arrivals, its replicas' draws): the
    /// experiment's `seed` mixed with the scenario's name, not the variant's, so that variants face
    /// the same arrivals and service times as far as their choices allow. The simulator, `tailguard
    /// serve` and the lab's load generator all seed from it, so for one seed the lab offers the
    /// very arrivals the simulator does.
    pub fn stream_seed(&self, seed: u64) -> u64 {
        // FNV-1a: stable across platforms and Rust versions, unlike std's hasher.
        self.scenario
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }
}

impl Experiment {
    /// Reads, parses and validates the experiment file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Experiment, ModelError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::new(path, "", format!("cannot read the experiment file: {e}")))?;
        Experiment::parse(&text, path)
    }

    /// Parses and validates experiment text; `origin` is the path errors name, and relative paths
    /// in the file start from its directory.
    pub fn parse(text: &str, origin: &Path) -> Result<Experiment, ModelError> {
        let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| {
            let location = e.location().map(|l| (l.line(), l.column()));
            let message = match location {
                Some((line, column)) => {
                    let full = e.to_string();
                    let suffix = format!(" at line {line} column {column}");
                    full.strip_suffix(&suffix).map(str::to_string).unwrap_or(full)
                }
                None => e.to_string(),
            };
            ModelError { location, ..ModelError::new(origin, "", format!("invalid YAML: {message}")) }
        })?;
        doc.apply_merge().map_err(|e| ModelError::new(origin, "", format!("invalid YAML merge (<<): {e}")))?;
        if let Value::Mapping(top) = &mut doc {
            top.retain(|key, _| !key.as_str().is_some_and(|k| k.starts_with(EXTENSION_PREFIX)));
        }
        let file = match serde_path_to_error::deserialize::<_, ExperimentFile>(&doc) {
            Ok(file) => file,
            Err(e) => return Err(with_location(ModelError::from_value(origin, e), text, origin)),
        };
        let experiment = Experiment { file, origin: origin.to_path_buf(), doc };
        validate::experiment(&experiment.file, &experiment.base_dir()).map_err(|e| e.in_file(origin))?;
        experiment.check_overrides()?;
        Ok(experiment)
    }

    /// The file's path, as given.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// The directory relative paths in the file start from.
    pub fn base_dir(&self) -> PathBuf {
        match self.origin.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The scenarios' names in file order; `["default"]` when the file has none.
    pub fn scenario_names(&self) -> Vec<String> {
        if self.file.scenarios.is_empty() {
            return vec![DEFAULT_SCENARIO.to_string()];
        }
        self.file.scenarios.iter().map(|s| s.name.clone()).collect()
    }

    /// The variants' names in file order.
    pub fn variant_names(&self) -> Vec<String> {
        self.file.variants.iter().map(|v| v.name.clone()).collect()
    }

    /// The scenarios and the variants named in `scenarios` and `variants` (all of them where
    /// none is named), in file order; a name the file lacks is an error that lists the file's.
    pub fn select(&self, scenarios: &[String], variants: &[String]) -> Result<(Vec<String>, Vec<String>), ModelError> {
        for name in scenarios {
            self.scenario_index(name)?;
        }
        for name in variants {
            self.variant(name)?;
        }
        let keep = |all: Vec<String>, asked: &[String]| -> Vec<String> {
            all.into_iter().filter(|n| asked.is_empty() || asked.contains(n)).collect()
        };
        Ok((keep(self.scenario_names(), scenarios), keep(self.variant_names(), variants)))
    }

    /// The seed the file asks for, used when the command line gives none.
    pub fn seed(&self) -> Option<u64> {
        self.file.seed
    }

    /// One scenario × variant: applies the `quick` overrides (if `quick`), the scenario's `set`,
    /// the variant's `set`, `client`, `edges` and `admission`, then validates the result.
    pub fn resolve(&self, scenario: &str, variant: &str, quick: bool) -> Result<Run, ModelError> {
        let origin = self.origin.as_path();
        let scenario_index = self.scenario_index(scenario)?;
        let (variant_index, v) = self.variant(variant)?;
        let mut doc = self.doc.clone();
        if quick {
            apply(&mut doc, &self.file.quick, "quick").map_err(|e| e.in_file(origin))?;
        }
        if let Some(i) = scenario_index {
            apply(&mut doc, &self.file.scenarios[i].set, &format!("scenarios.{i}.set"))
                .map_err(|e| e.in_file(origin))?;
        }
        apply(&mut doc, &v.set, &format!("variants.{variant_index}.set")).map_err(|e| e.in_file(origin))?;

        let note = match (quick, scenario_index.is_some()) {
            (true, true) => format!("with the quick overrides, scenario {scenario:?} and variant {variant:?} applied"),
            (true, false) => format!("with the quick overrides and variant {variant:?} applied"),
            (false, true) => format!("with scenario {scenario:?} and variant {variant:?} applied"),
            (false, false) => format!("with variant {variant:?} applied"),
        };
        let resolved: ExperimentFile =
            serde_path_to_error::deserialize(&doc).map_err(|e| ModelError::from_value(origin, e).note(&note))?;
        let ExperimentFile { mut services, network, mut workload, .. } = resolved;
        apply_variant(v, variant_index, &mut services, &mut workload).map_err(|e| e.in_file(origin).note(&note))?;
        let base_dir = self.base_dir();
        validate::topology(&services, &workload, &base_dir, validate::Stage::Resolved)
            .map_err(|e| e.in_file(origin).note(&note))?;
        let calibration = match &network.calibrated {
            None => None,
            Some(file) => Some(
                Calibration::load(&base_dir.join(file))
                    .map_err(|e| ModelError::new(origin, "network.calibrated", format!("{file}: {e}")))?,
            ),
        };
        Ok(Run {
            scenario: scenario.to_string(),
            variant: variant.to_string(),
            services,
            network,
            workload,
            base_dir,
            sidecar: v.sidecar,
            calibration,
        })
    }

    fn scenario_index(&self, name: &str) -> Result<Option<usize>, ModelError> {
        if self.file.scenarios.is_empty() && name == DEFAULT_SCENARIO {
            return Ok(None);
        }
        match self.file.scenarios.iter().position(|s| s.name == name) {
            Some(i) => Ok(Some(i)),
            None => Err(ModelError::new(
                &self.origin,
                "scenarios",
                format!("no scenario named {name:?}; expected one of: {}", self.scenario_names().join(", ")),
            )),
        }
    }

    fn variant(&self, name: &str) -> Result<(usize, &Variant), ModelError> {
        self.file.variants.iter().enumerate().find(|(_, v)| v.name == name).ok_or_else(|| {
            ModelError::new(
                &self.origin,
                "variants",
                format!("no variant named {name:?}; expected one of: {}", self.variant_names().join(", ")),
            )
        })
    }

    /// Every override list applies to the file as written, so a mistyped path is reported at load.
    fn check_overrides(&self) -> Result<(), ModelError> {
        let mut lists = vec![(&self.file.quick, "quick".to_string())];
        lists.extend(self.file.scenarios.iter().enumerate().map(|(i, s)| (&s.set, format!("scenarios.{i}.set"))));
        lists.extend(self.file.variants.iter().enumerate().map(|(i, v)| (&v.set, format!("variants.{i}.set"))));
        for (list, at) in lists {
            apply(&mut self.doc.clone(), list, &at).map_err(|e| e.in_file(&self.origin))?;
        }
        Ok(())
    }
}

/// Applies overrides `path → value` in order; errors are at `at` (`scenarios.1.set`).
fn apply(doc: &mut Value, list: &IndexMap<String, Value>, at: &str) -> Result<(), ModelError> {
    for (path, value) in list {
        validate::override_root(path).map_err(|m| ModelError::at(at, format!("override {path}: {m}")))?;
        overrides::set(doc, path, value.clone()).map_err(|m| ModelError::at(at, m))?;
    }
    Ok(())
}

/// The variant's policies: `edges` entries on their edges (`workload->TARGET` on the workload's
/// client), `client` on every other call edge, `admission` on its services; then no default
/// outlier ejection where tailguard's sidecar does not apply the policy.
fn apply_variant(
    v: &Variant,
    index: usize,
    services: &mut IndexMap<String, Service>,
    workload: &mut Workload,
) -> Result<(), ModelError> {
    let mut edges = Vec::with_capacity(v.edges.len());
    for (key, policy) in &v.edges {
        let (caller, callee) = validate::edge_key(key, services, workload)
            .map_err(|m| ModelError::at(format!("variants.{index}.edges.{key}"), m))?;
        edges.push(((caller.to_string(), callee.to_string()), policy));
    }
    let named = |caller: &str, callee: &str| {
        edges.iter().find(|((a, b), _)| a == caller && b == callee).map(|(_, p)| (*p).clone())
    };
    for (name, service) in services.iter_mut() {
        for call in service.all_calls_mut() {
            if let Some(policy) = named(name, &call.service).or_else(|| v.client.clone()) {
                call.policy = policy;
            }
        }
    }
    if let Some(policy) = named(validate::WORKLOAD_CALLER, &workload.target) {
        workload.client = policy;
    }
    // Outlier ejection is tailguard's default, not a peer's (HAProxy and nginx have their own
    // passive checks, which a variant writes out), nor the load generator's, which calls the entry
    // replicas itself when its policy is plain.
    let peer = v.sidecar != SidecarKind::Tailguard;
    let policies = services.values_mut().flat_map(|s| s.calls.iter_mut().map(|c| &mut c.policy));
    for policy in policies.filter(|_| peer) {
        if policy.outlier.is_default() {
            policy.outlier = OutlierSetting::Off;
        }
    }
    if (peer || workload.client.is_plain()) && workload.client.outlier.is_default() {
        workload.client.outlier = OutlierSetting::Off;
    }
    // HAProxy serves what its caller abandoned: a callee's ingress HAProxy passes a request on to
    // the app and keeps it there when the caller's egress times out and closes ("aborted requests
    // will be served"; `option abortonclose` drops only those still queued in HAProxy: manual,
    // `option abortonclose`). Its callees finish the work.
    if v.sidecar == SidecarKind::Haproxy {
        for service in services.values_mut() {
            service.cancellable = false;
        }
    }
    for (name, admission) in &v.admission {
        let service = services.get_mut(name).ok_or_else(|| {
            ModelError::at(format!("variants.{index}.admission.{name}"), format!("no service named {name:?}"))
        })?;
        // The whole service's: its groups' own admission too.
        service.admission = admission.clone();
        service.groups.values_mut().for_each(|g| g.admission = None);
    }
    Ok(())
}

/// Adds the YAML line and column to a schema error, by deserialising the text again (the value
/// route loses positions; the text route has them, and reports the same path unless merge keys
/// moved things around).
fn with_location(error: ModelError, text: &str, origin: &Path) -> ModelError {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, ExperimentFile>(deserializer) {
        Err(e) => {
            let located = ModelError::from_yaml(origin, e);
            if located.path == error.path {
                return ModelError { location: located.location, ..error };
            }
            error
        }
        Ok(_) => error,
    }
}

#[cfg(test)]
mod tests;
