//! Dotted-path overrides of a YAML document: `services.backend.replicas: 40`,
//! `services.api.calls.0.count: 3`. Scenarios, variants and `--quick` runs are overrides.
//!
//! The path must exist in the document, so a typo is an error rather than a silently ignored
//! setting; the one exception is the last step, which may add a new key to an existing mapping
//! (to set a field the file left at its default). List items are addressed by index from 0.

use serde_yaml_ng::{Mapping, Value};

/// Sets the value at dotted `path` in `doc` to `value`. The error says which part of the path does
/// not exist and what was there instead.
pub fn set(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("override path {path:?} has an empty part; expected names separated by single dots"));
    }
    let mut node = doc;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let here = parts[..i].join(".");
        let here = if here.is_empty() { "the file".to_string() } else { here };
        let missing = |what: String| format!("no such path {path:?}: {what}");
        node = match node {
            Value::Mapping(map) => {
                if last {
                    map.insert(Value::String(part.to_string()), value);
                    return Ok(());
                }
                match key_of(map, part) {
                    Some(key) => map.get_mut(&key).expect("key_of found it"),
                    None => return Err(missing(format!("{here} has no key {part:?}; it has: {}", keys(map)))),
                }
            }
            Value::Sequence(items) => {
                let len = items.len();
                let index = part.parse::<usize>().ok().filter(|&n| n < len).ok_or_else(|| {
                    missing(format!(
                        "{here} is a list of {len}; expected an index from 0 to {}, got {part:?}",
                        len as i64 - 1
                    ))
                })?;
                if last {
                    items[index] = value;
                    return Ok(());
                }
                &mut items[index]
            }
            Value::Tagged(tagged) => &mut tagged.value,
            other => return Err(missing(format!("{here} is {}, not a mapping or a list", kind(other)))),
        };
    }
    unreachable!("the loop returns at the last part")
}

/// The key of `map` spelled `part`: a string key, or a number or boolean written the same way.
fn key_of(map: &Mapping, part: &str) -> Option<Value> {
    map.keys().find(|k| scalar_text(k).as_deref() == Some(part)).cloned()
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn keys(map: &Mapping) -> String {
    let names: Vec<String> = map.keys().filter_map(scalar_text).collect();
    if names.is_empty() {
        "no keys".to_string()
    } else {
        names.join(", ")
    }
}

/// What a YAML value is, for error messages ("a list", "a mapping", ...).
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "empty (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_yaml_ng::from_str(
            "services:\n  api:\n    replicas: 2\n    calls:\n      - service: db\n        count: 1\n  db: {}\nworkload:\n  target: api\n",
        )
        .unwrap()
    }

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn replaces_existing_values_in_mappings_and_lists() {
        let mut d = doc();
        set(&mut d, "services.api.replicas", yaml("40")).unwrap();
        set(&mut d, "services.api.calls.0.count", yaml("3")).unwrap();
        assert_eq!(d["services"]["api"]["replicas"], yaml("40"));
        assert_eq!(d["services"]["api"]["calls"][0]["count"], yaml("3"));
    }

    #[test]
    fn adds_a_new_key_to_an_existing_mapping() {
        let mut d = doc();
        set(&mut d, "services.db.workers", yaml("8")).unwrap();
        set(&mut d, "workload.open", yaml("{rate: 100}")).unwrap();
        assert_eq!(d["services"]["db"]["workers"], yaml("8"));
        assert_eq!(d["workload"]["open"]["rate"], yaml("100"));
    }

    #[test]
    fn a_missing_key_on_the_way_is_an_error_naming_it() {
        let mut d = doc();
        let e = set(&mut d, "services.fronted.replicas", yaml("4")).unwrap_err();
        assert_eq!(e, "no such path \"services.fronted.replicas\": services has no key \"fronted\"; it has: api, db");
        let e = set(&mut d, "workload.open.rate", yaml("4")).unwrap_err();
        assert!(e.contains("workload has no key \"open\""), "{e}");
    }

    #[test]
    fn list_indices_must_be_numbers_in_range() {
        let mut d = doc();
        let e = set(&mut d, "services.api.calls.1.count", yaml("2")).unwrap_err();
        assert_eq!(
            e,
            "no such path \"services.api.calls.1.count\": services.api.calls is a list of 1; expected an index from 0 to 0, got \"1\""
        );
        let e = set(&mut d, "services.api.calls.first", yaml("2")).unwrap_err();
        assert!(e.contains("got \"first\""), "{e}");
    }

    #[test]
    fn scalars_cannot_be_walked_into_and_empty_parts_are_refused() {
        let mut d = doc();
        let e = set(&mut d, "workload.target.name", yaml("x")).unwrap_err();
        assert!(e.ends_with("workload.target is a string, not a mapping or a list"), "{e}");
        let e = set(&mut d, "services..replicas", yaml("1")).unwrap_err();
        assert!(e.contains("empty part"), "{e}");
    }
}
