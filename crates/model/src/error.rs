//! [`ModelError`]: what is wrong with an experiment file, where, and what was expected.
//!
//! Every error names the file, the field as a dotted path (`services.backend.replicas`, list
//! items by index: `variants.0.name`, the same syntax overrides use) and the expectation:
//! `examples/bloc.yaml: services.backend.replicas: expected a positive integer, got 0`.
//! Errors found while reading YAML add its line and column when the parser knows them.

use std::fmt;
use std::path::{Path, PathBuf};

/// An error in an experiment file (or a data file it refers to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelError {
    /// The file at fault; empty when not known (errors from a lone config value).
    pub file: PathBuf,
    /// The dotted path of the field at fault; empty for the file as a whole.
    pub path: String,
    /// What was wrong and what was expected.
    pub message: String,
    /// Line and column (from 1) in the file, when known.
    pub location: Option<(usize, usize)>,
}

impl ModelError {
    /// An error at field `path` of `file`.
    pub fn new(file: impl Into<PathBuf>, path: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError { file: file.into(), path: path.into(), message: message.into(), location: None }
    }

    /// An error at field `path` of a file not yet known (the caller adds it with [`Self::in_file`]).
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError::new(PathBuf::new(), path, message)
    }

    /// Names the file, unless one is already named.
    pub fn in_file(mut self, file: &Path) -> Self {
        if self.file.as_os_str().is_empty() {
            self.file = file.to_path_buf();
        }
        self
    }

    /// Puts the path under `prefix` (`prefix.path`).
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = join(prefix, &self.path);
        self
    }

    /// Adds a note at the end of the message.
    pub fn note(mut self, note: &str) -> Self {
        self.message = format!("{} ({note})", self.message);
        self
    }

    /// A YAML syntax or schema error, from deserialising `file`.
    pub(crate) fn from_yaml(file: &Path, error: serde_path_to_error::Error<serde_yaml_ng::Error>) -> Self {
        let path = dotted(error.path());
        let inner = error.into_inner();
        let location = inner.location().map(|l| (l.line(), l.column()));
        let mut message = inner.to_string();
        if let Some((line, column)) = location {
            let suffix = format!(" at line {line} column {column}");
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
        }
        // serde_yaml_ng puts its own path in front of the message; ours is above.
        if let Some((head, rest)) = message.split_once(": ") {
            if !head.contains(char::is_whitespace) {
                message = rest.to_string();
            }
        }
        ModelError { file: file.to_path_buf(), path, message: humanize(&message), location }
    }

    /// A schema error from deserialising an already-parsed YAML value (no location is known).
    pub(crate) fn from_value(file: &Path, error: serde_path_to_error::Error<serde_yaml_ng::Error>) -> Self {
        let path = dotted(error.path());
        let message = humanize(&error.into_inner().to_string());
        ModelError::new(file, path, message)
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.as_os_str().is_empty() {
            write!(f, "{}: ", self.file.display())?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some((line, column)) = self.location {
            write!(f, " (line {line}, column {column})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ModelError {}

impl From<tailguard_policy::config::ConfigError> for ModelError {
    /// A policy's parameter error, at its field (the caller puts it under its section).
    fn from(e: tailguard_policy::config::ConfigError) -> Self {
        ModelError::at(e.path, e.message)
    }
}

/// `prefix.path`, either of which may be empty.
pub(crate) fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}.{path}"),
    }
}

/// A serde path in override syntax: `services.api.calls.0.service`.
fn dotted(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let parts: Vec<String> = path
        .iter()
        .map(|segment| match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_string(),
        })
        .collect();
    parts.join(".")
}

/// Rewrites serde's messages for people who write YAML, not Rust:
/// `invalid type: string "x", expected u32` → `expected a non-negative integer, got the string "x"`.
pub(crate) fn humanize(message: &str) -> String {
    for lead in ["invalid type: ", "invalid value: ", "invalid length "] {
        if let Some(rest) = message.strip_prefix(lead) {
            if let Some((got, expected)) = rest.rsplit_once(", expected ") {
                return format!("expected {}, got {}", expectation(expected), found(got));
            }
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (field, known) = rest.split_once(", ").unwrap_or((rest, ""));
        let known =
            known.strip_prefix("expected one of ").or_else(|| known.strip_prefix("expected ")).map(unquote_list);
        return match known {
            Some(known) => format!("unknown field {}; expected one of: {known}", requote(field)),
            None => format!("unknown field {}; this takes no fields", requote(field)),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (value, known) = rest.split_once(", ").unwrap_or((rest, ""));
        let known =
            known.strip_prefix("expected one of ").or_else(|| known.strip_prefix("expected ")).map(unquote_list);
        return format!("unknown value {}; expected one of: {}", requote(value), known.unwrap_or_default());
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        return format!("missing required field {}", requote(field));
    }
    if let Some(field) = message.strip_prefix("duplicate field ") {
        return format!("field {} is given twice", requote(field));
    }
    message.to_string()
}

/// serde's name of an expected type, in YAML words.
fn expectation(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a map" | "map" => "a mapping".into(),
        "a sequence" => "a list".into(),
        e if e.starts_with("struct ") || e.starts_with("internally tagged enum ") => "a mapping".into(),
        e => e.to_string(),
    }
}

/// serde's description of a value found, in YAML words.
fn found(got: &str) -> String {
    for lead in ["integer ", "floating point ", "boolean ", "character "] {
        if let Some(v) = got.strip_prefix(lead) {
            return v.trim_matches('`').to_string();
        }
    }
    match got {
        "map" => "a mapping".into(),
        "sequence" => "a list".into(),
        "unit value" => "nothing (null)".into(),
        g if g.starts_with("string ") => format!("the {g}"),
        g => g.to_string(),
    }
}

/// `` `name` `` → `"name"`.
fn requote(s: &str) -> String {
    format!("\"{}\"", s.trim().trim_matches('`'))
}

/// `` `a`, `b` or `c` `` → `a, b, c`.
fn unquote_list(s: &str) -> String {
    s.replace(" or ", ", ").replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_file_path_message_and_location() {
        let e =
            ModelError::new("examples/bloc.yaml", "services.backend.replicas", "expected a positive integer, got 0");
        assert_eq!(e.to_string(), "examples/bloc.yaml: services.backend.replicas: expected a positive integer, got 0");
        let e = ModelError { location: Some((12, 5)), ..e };
        assert_eq!(
            e.to_string(),
            "examples/bloc.yaml: services.backend.replicas: expected a positive integer, got 0 (line 12, column 5)"
        );
        assert_eq!(ModelError::new("a.yaml", "", "empty file").to_string(), "a.yaml: empty file");
    }

    #[test]
    fn context_is_added_from_outside_in() {
        let e =
            ModelError::at("file", "cannot read it").under("services.api.service_time").in_file(Path::new("x.yaml"));
        assert_eq!(e.to_string(), "x.yaml: services.api.service_time.file: cannot read it");
        let e = e.in_file(Path::new("other.yaml"));
        assert_eq!(e.file, Path::new("x.yaml"), "the first file named stays");
    }

    #[test]
    fn serde_messages_become_yaml_words() {
        assert_eq!(humanize("invalid value: integer `-1`, expected u32"), "expected a non-negative integer, got -1");
        assert_eq!(
            humanize("invalid type: string \"many\", expected u32"),
            "expected a non-negative integer, got the string \"many\""
        );
        assert_eq!(humanize("invalid type: sequence, expected struct Service"), "expected a mapping, got a list");
        assert_eq!(
            humanize("unknown field `replica`, expected one of `replicas`, `workers`"),
            "unknown field \"replica\"; expected one of: replicas, workers"
        );
        assert_eq!(
            humanize("unknown variant `rnd`, expected one of `random`, `round-robin`"),
            "unknown value \"rnd\"; expected one of: random, round-robin"
        );
        assert_eq!(humanize("unknown field `x`, expected `a` or `b`"), "unknown field \"x\"; expected one of: a, b");
        assert_eq!(humanize("missing field `name`"), "missing required field \"name\"");
        assert_eq!(humanize("something else"), "something else");
    }
}
