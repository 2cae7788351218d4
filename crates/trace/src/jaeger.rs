//! Jaeger's JSON trace format: the body of its query API's `GET /api/traces` and what its UI's
//! "JSON File" upload accepts, so our files open in a stock Jaeger UI.
//!
//! `{"data": [{"traceID", "spans": [{"traceID", "spanID", "operationName", "references":
//! [{"refType": "CHILD_OF", "traceID", "spanID"}], "startTime" (µs), "duration" (µs), "tags":
//! [{"key", "type", "value"}], "logs": [], "processID", "warnings": null, "flags": 1}],
//! "processes": {"p1": {"serviceName", "tags"}}, "warnings": null}]}`. Ids are lower-case hex:
//! 32 digits for traces, 16 for spans.

use crate::model::{Process, Span, Tag, Trace, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Why a Jaeger file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JaegerError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The text is not Jaeger JSON.
    #[error("{path}: not a Jaeger JSON trace file: {message}")]
    Format { path: String, message: String },
}

#[derive(Serialize, Deserialize)]
struct File {
    data: Vec<JTrace>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JTrace {
    #[serde(rename = "traceID")]
    trace_id: String,
    spans: Vec<JSpan>,
    processes: BTreeMap<String, JProcess>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpan {
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
    operation_name: String,
    #[serde(default)]
    references: Vec<JReference>,
    start_time: u64,
    duration: u64,
    #[serde(default)]
    tags: Vec<JTag>,
    #[serde(default)]
    logs: Vec<serde_json::Value>,
    #[serde(rename = "processID")]
    process_id: String,
    #[serde(default)]
    warnings: Option<Vec<String>>,
    #[serde(default)]
    flags: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JReference {
    ref_type: String,
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JProcess {
    service_name: String,
    #[serde(default)]
    tags: Vec<JTag>,
}

#[derive(Serialize, Deserialize)]
struct JTag {
    key: String,
    #[serde(rename = "type")]
    kind: String,
    value: serde_json::Value,
}

/// The trace id as Jaeger prints it.
pub fn trace_id_hex(id: u128) -> String {
    format!("{id:032x}")
}

/// The span id as Jaeger prints it.
pub fn span_id_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// Writes `traces` as one Jaeger JSON document to `out`.
pub fn write(traces: &[Trace], out: impl Write) -> serde_json::Result<()> {
    serde_json::to_writer(out, &File { data: traces.iter().map(to_jaeger).collect() })
}

/// Writes `traces` to the file at `path`.
pub fn write_file(traces: &[Trace], path: &Path) -> Result<(), JaegerError> {
    let io = |source| JaegerError::Io { path: path.display().to_string(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    write(traces, &mut out).map_err(|e| io(e.into()))?;
    out.flush().map_err(io)
}

/// Reads the Jaeger file at `path`.
pub fn read_file(path: &Path) -> Result<Vec<Trace>, JaegerError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| JaegerError::Io { path: path.display().to_string(), source })?;
    parse(&text).map_err(|message| JaegerError::Format { path: path.display().to_string(), message })
}

/// Parses a Jaeger JSON document; the error says what was wrong.
pub fn parse(text: &str) -> Result<Vec<Trace>, String> {
    let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
    file.data.into_iter().map(from_jaeger).collect()
}

fn to_jaeger(trace: &Trace) -> JTrace {
    let trace_id = trace_id_hex(trace.id);
    let process_id = |i: usize| format!("p{}", i + 1);
    let spans = trace
        .spans
        .iter()
        .map(|s| JSpan {
            trace_id: trace_id.clone(),
            span_id: span_id_hex(s.id),
            operation_name: s.operation.clone(),
            references: s
                .parent
                .map(|p| JReference {
                    ref_type: "CHILD_OF".to_string(),
                    trace_id: trace_id.clone(),
                    span_id: span_id_hex(p),
                })
                .into_iter()
                .collect(),
            start_time: s.start_us,
            duration: s.duration_us,
            tags: s.tags.iter().map(to_jtag).collect(),
            logs: Vec::new(),
            process_id: process_id(s.process),
            warnings: None,
            flags: 1,
        })
        .collect();
    let processes = trace
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (process_id(i), JProcess { service_name: p.service.clone(), tags: p.tags.iter().map(to_jtag).collect() })
        })
        .collect();
    JTrace { trace_id, spans, processes, warnings: None }
}

fn to_jtag(tag: &Tag) -> JTag {
    let (kind, value) = match &tag.value {
        Value::Str(s) => ("string", serde_json::Value::from(s.as_str())),
        Value::Bool(b) => ("bool", serde_json::Value::from(*b)),
        Value::Int(i) => ("int64", serde_json::Value::from(*i)),
        Value::Float(f) => ("float64", serde_json::Value::from(*f)),
    };
    JTag { key: tag.key.clone(), kind: kind.to_string(), value }
}

fn from_jaeger(t: JTrace) -> Result<Trace, String> {
    let id = parse_id(&t.trace_id).ok_or_else(|| format!("bad traceID {:?}", t.trace_id))?;
    let mut keys = Vec::new();
    let mut processes = Vec::new();
    for (key, p) in t.processes {
        keys.push(key);
        let tags = p.tags.into_iter().map(from_jtag).collect::<Result<_, _>>()?;
        processes.push(Process { service: p.service_name, tags });
    }
    let spans = t
        .spans
        .into_iter()
        .map(|s| {
            let span_id = parse_id(&s.span_id).ok_or_else(|| format!("bad spanID {:?}", s.span_id))? as u64;
            let process = keys
                .iter()
                .position(|k| *k == s.process_id)
                .ok_or_else(|| format!("span {} names unknown process {:?}", s.span_id, s.process_id))?;
            let parent = s
                .references
                .iter()
                .find(|r| r.ref_type == "CHILD_OF")
                .or(s.references.first())
                .map(|r| parse_id(&r.span_id).map(|p| p as u64).ok_or_else(|| format!("bad spanID {:?}", r.span_id)))
                .transpose()?;
            Ok(Span {
                id: span_id,
                parent,
                process,
                operation: s.operation_name,
                start_us: s.start_time,
                duration_us: s.duration,
                tags: s.tags.into_iter().map(from_jtag).collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Trace { id, processes, spans })
}

fn from_jtag(tag: JTag) -> Result<Tag, String> {
    let bad = || format!("tag {:?}: a {} tag with value {}", tag.key, tag.kind, tag.value);
    let value = match tag.kind.as_str() {
        "bool" => Value::Bool(tag.value.as_bool().ok_or_else(bad)?),
        "int64" => Value::Int(tag.value.as_i64().ok_or_else(bad)?),
        "float64" => Value::Float(tag.value.as_f64().ok_or_else(bad)?),
        // `string`, `binary` (base64 text) and anything newer are kept as text.
        _ => Value::Str(tag.value.as_str().map_or_else(|| tag.value.to_string(), str::to_string)),
    };
    Ok(Tag { key: tag.key, value })
}

/// A hex id of up to 32 digits.
fn parse_id(hex: &str) -> Option<u128> {
    if hex.is_empty() || hex.len() > 32 {
        return None;
    }
    u128::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trace {
        Trace {
            id: 0x0af7651916cd43dd8448eb211c80319c,
            processes: vec![
                Process { service: "frontend".into(), tags: vec![Tag::new("replica", 0u32)] },
                Process { service: "backend".into(), tags: vec![] },
            ],
            spans: vec![
                Span {
                    id: 0xb7ad6b7169203331,
                    parent: None,
                    process: 0,
                    operation: "frontend".into(),
                    start_us: 1_000,
                    duration_us: 250,
                    tags: vec![Tag::new("ok", true), Tag::new("ratio", 0.5)],
                },
                Span {
                    id: 1,
                    parent: Some(0xb7ad6b7169203331),
                    process: 1,
                    operation: "backend".into(),
                    start_us: 1_010,
                    duration_us: 100,
                    tags: vec![Tag::new("kind", "retry")],
                },
            ],
        }
    }

    #[test]
    fn the_document_has_jaegers_field_names_and_types() {
        let mut out = Vec::new();
        write(&[sample()], &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let t = &v["data"][0];
        assert_eq!(t["traceID"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t["processes"]["p1"]["serviceName"], "frontend");
        assert_eq!(t["processes"]["p1"]["tags"][0], serde_json::json!({"key": "replica", "type": "int64", "value": 0}));
        let child = &t["spans"][1];
        assert_eq!(child["spanID"], "0000000000000001");
        assert_eq!(child["processID"], "p2");
        assert_eq!(
            child["references"],
            serde_json::json!([{"refType": "CHILD_OF", "traceID": "0af7651916cd43dd8448eb211c80319c", "spanID": "b7ad6b7169203331"}])
        );
        assert_eq!(child["startTime"], 1010);
        assert_eq!(child["duration"], 100);
        assert_eq!(child["flags"], 1);
        assert!(child["warnings"].is_null() && t["warnings"].is_null());
        assert_eq!(child["logs"], serde_json::json!([]));
        assert_eq!(t["spans"][0]["references"], serde_json::json!([]));
        assert_eq!(t["spans"][0]["tags"][1], serde_json::json!({"key": "ratio", "type": "float64", "value": 0.5}));
    }

    #[test]
    fn a_written_file_reads_back_equal() {
        let mut out = Vec::new();
        write(&[sample()], &mut out).unwrap();
        assert_eq!(parse(std::str::from_utf8(&out).unwrap()).unwrap(), vec![sample()]);
    }

    #[test]
    fn bad_documents_are_errors_that_say_why() {
        assert!(parse("{}").unwrap_err().contains("data"));
        let bad_process = r#"{"data":[{"traceID":"1","spans":[{"traceID":"1","spanID":"2","operationName":"x",
            "startTime":0,"duration":0,"processID":"p9"}],"processes":{}}]}"#;
        assert!(parse(bad_process).unwrap_err().contains("unknown process \"p9\""));
        let bad_id = r#"{"data":[{"traceID":"xyz","spans":[],"processes":{}}]}"#;
        assert!(parse(bad_id).unwrap_err().contains("bad traceID"));
    }
}
