//! Kubernetes objects as YAML values: parsing a rendered stream, finding objects
//! by kind and name, and writing them back as a stream.

use serde::Deserialize;
use serde_yaml::{Mapping, Value};

use crate::Error;

/// Every non-empty document of a multi-document YAML stream (`helm template`).
pub fn parse_stream(text: &str) -> Result<Vec<Value>, Error> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(Error::Yaml)?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

pub fn kind(object: &Value) -> &str {
    object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn name(object: &Value) -> &str {
    object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The one object of `kind` named `name`.
pub fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> Result<&'a Value, Error> {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && name(o) == name_)
        .ok_or_else(|| Error::Missing(format!("{kind_} {name_}")))
}

/// Follows a path of mapping keys.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

/// Like [`at`], for a value that must be there.
pub fn required<'a>(value: &'a Value, path: &[&str]) -> Result<&'a Value, Error> {
    at(value, path).ok_or_else(|| Error::Missing(path.join(".")))
}

/// The mapping at `key` in `map`, created when absent.
pub fn mapping_mut<'a>(map: &'a mut Mapping, key: &str) -> Result<&'a mut Mapping, Error> {
    map.entry(Value::from(key))
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or_else(|| Error::Shape(format!("{key} is not a mapping")))
}

/// Labels Helm adds to what it installs; they are wrong on objects applied with
/// kubectl or installed by OLM.
const HELM_LABELS: &[&str] = &["helm.sh/chart", "app.kubernetes.io/managed-by"];

/// The object without Helm's bookkeeping labels.
pub fn without_helm_labels(mut object: Value) -> Value {
    let labels = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_mapping_mut);
    if let Some(labels) = labels {
        for label in HELM_LABELS {
            labels.remove(*label);
        }
    }
    object
}

/// The object without `metadata.namespace`: OLM places a bundle's extra objects
/// in the namespace it installs the operator into.
pub fn without_namespace(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_mapping_mut) {
        metadata.remove("namespace");
    }
    object
}

/// A YAML stream with a header comment, documents separated by `---`.
pub fn to_stream(header: &str, objects: &[Value]) -> Result<String, Error> {
    let mut out = String::new();
    for line in header.lines() {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    // No `---` before the first document: some readers (operator-sdk's bundle
    // loader) take a comment-only first document for an empty object.
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml::to_string(object).map_err(Error::Yaml)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_parses_into_its_objects_skipping_empty_documents() {
        let text = "# Source: x\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: a\n---\n---\nkind: Role\nmetadata:\n  name: b\n";
        let objects = parse_stream(text).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(find(&objects, "Role", "b").map(name).unwrap(), "b");
        assert!(find(&objects, "Role", "a").is_err());
    }

    #[test]
    fn helm_labels_are_dropped_and_others_kept() {
        let object: Value = serde_yaml::from_str(
            "metadata:\n  labels:\n    helm.sh/chart: tusk-0.1.0\n    app.kubernetes.io/managed-by: Helm\n    app.kubernetes.io/name: tusk\n",
        )
        .unwrap();
        let labels = without_helm_labels(object)["metadata"]["labels"].clone();
        let keys: Vec<_> = labels
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(keys, ["app.kubernetes.io/name"]);
    }

    #[test]
    fn a_written_stream_reads_back_the_same() {
        let objects = parse_stream("kind: A\nx: 1\n---\nkind: B\ny: [1, 2]\n").unwrap();
        let text = to_stream("Generated.\nDo not edit.", &objects).unwrap();
        assert!(text.starts_with("# Generated.\n# Do not edit.\nkind: A\n"));
        assert_eq!(parse_stream(&text).unwrap(), objects);
    }
}
