//! Kubernetes manifests as multi-document YAML streams of generic values: what this crate does
//! not know (fields, kinds, custom resources) is kept as it was. Comments are not kept (the YAML
//! library reads values, not text).

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

/// A manifest that cannot be read or changed, naming where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{origin}: document {document}{what}: {message}")]
pub struct ManifestError {
    /// The file (`-` for stdin).
    pub origin: String,
    /// The document's place in the stream, from 1.
    pub document: usize,
    /// ` (Deployment web)` when the document could be read that far, else empty.
    pub what: String,
    pub message: String,
}

impl ManifestError {
    pub fn new(origin: &str, document: usize, doc: Option<&Value>, message: impl Into<String>) -> ManifestError {
        let what = doc.map(describe).filter(|d| !d.is_empty()).map(|d| format!(" ({d})")).unwrap_or_default();
        ManifestError { origin: origin.to_string(), document, what, message: message.into() }
    }
}

/// `Deployment web`: a document's kind and name, as far as it has them.
pub fn describe(doc: &Value) -> String {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = doc.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
    format!("{kind} {name}").trim().to_string()
}

/// The documents of a YAML stream, empty ones (`---` twice, comments only) dropped. Every
/// document must be a mapping: a Kubernetes object or a `List`.
pub fn read(text: &str, origin: &str) -> Result<Vec<Value>, ManifestError> {
    Ok(read_numbered(text, origin)?.into_iter().map(|(_, doc)| doc).collect())
}

/// [`read`], each document with its place in the stream (from 1, empty documents counted), which
/// errors name.
pub fn read_numbered(text: &str, origin: &str) -> Result<Vec<(usize, Value)>, ManifestError> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let doc = Value::deserialize(de).map_err(|e| ManifestError::new(origin, i + 1, None, e.to_string()))?;
        match doc {
            Value::Null => {}
            Value::Mapping(_) => docs.push((i + 1, doc)),
            other => {
                let message = format!(
                    "expected a Kubernetes object (a mapping with `kind`), got {}",
                    tailguard_model::overrides::kind(&other)
                );
                return Err(ManifestError::new(origin, i + 1, None, message));
            }
        }
    }
    Ok(docs)
}

/// The documents as one YAML stream, `---` between them.
pub fn write(docs: &[Value]) -> String {
    let texts: Vec<String> =
        docs.iter().map(|d| serde_yaml_ng::to_string(d).expect("a YAML value serialises")).collect();
    texts.join("---\n")
}

/// A YAML mapping from text written in this crate (its templates).
pub fn template(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("a template of this crate is valid YAML")
}

/// The mapping at `key` of `map`, created empty if absent; `None` if something else is there.
pub fn child<'a>(map: &'a mut Mapping, key: &str) -> Option<&'a mut Mapping> {
    if !map.contains_key(key) || map.get(key) == Some(&Value::Null) {
        map.insert(key.into(), Value::Mapping(Mapping::new()));
    }
    map.get_mut(key)?.as_mapping_mut()
}

/// The list at `key` of `map`, created empty if absent; `None` if something else is there.
pub fn list<'a>(map: &'a mut Mapping, key: &str) -> Option<&'a mut Vec<Value>> {
    if !map.contains_key(key) || map.get(key) == Some(&Value::Null) {
        map.insert(key.into(), Value::Sequence(Vec::new()));
    }
    map.get_mut(key)?.as_sequence_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_reads_and_writes_back_with_empty_documents_dropped() {
        let text = "# head\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: X\nz: 1\na: 2\n";
        let docs = read(text, "f.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        let numbers: Vec<usize> = read_numbered(text, "f.yaml").unwrap().into_iter().map(|(n, _)| n).collect();
        // YAML's numbering: a comment before the first `---` is no document; an empty one is.
        assert_eq!(numbers, [1, 3]);
        assert_eq!(describe(&docs[0]), "ConfigMap a");
        let out = write(&docs);
        assert_eq!(out, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\nkind: X\nz: 1\na: 2\n");
        assert_eq!(read(&out, "again").unwrap(), docs);
    }

    #[test]
    fn bad_documents_are_named_by_their_place() {
        let e = read("kind: A\n---\nkind: [\n", "f.yaml").unwrap_err();
        assert_eq!((e.origin.as_str(), e.document), ("f.yaml", 2));
        assert!(e.to_string().starts_with("f.yaml: document 2: "), "{e}");
        let e = read("kind: A\n---\n- 1\n", "-").unwrap_err();
        assert_eq!(e.to_string(), "-: document 2: expected a Kubernetes object (a mapping with `kind`), got a list");
    }
}
