//! The pod spec as a run keeps it: the manifest's spec as compact JSON text. A run only hands
//! it on (a status line writes it as it is) and reads it back where a resize needs it, so it
//! holds the text rather than a JSON tree, which for a pod of 100 containers took three times
//! the memory; and the API types' code for a whole spec stays out of what a run keeps.

use std::sync::Arc;

use serde_json::Value;

/// The spec as compact JSON text, shared: a status line holds it as it is, and knows it
/// unchanged by its address (a change makes a new one).
#[derive(Debug, Clone)]
pub struct SpecJson(Arc<str>);

impl SpecJson {
    /// The spec `value` as compact JSON.
    pub fn new(value: &Value) -> SpecJson {
        SpecJson(value.to_string().into())
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The spec as a JSON tree (made for each call).
    pub fn value(&self) -> serde_json::Result<Value> {
        serde_json::from_str(&self.0)
    }

    /// The spec read as `T` (made for each call).
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.0)
    }

    /// Whether `other` is this very spec (shared), or the same text.
    pub fn same(&self, other: &SpecJson) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }

    /// Whether `other` is this very spec, shared (not a copy): what the tests check.
    #[cfg(test)]
    pub fn shared_with(&self, other: &SpecJson) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Handed over between the two images of a run as a JSON string holding the text.
impl serde::Serialize for SpecJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SpecJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SpecJson, D::Error> {
        let text = String::deserialize(d)?;
        // Only JSON is taken: what a status line writes must be JSON.
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(serde::de::Error::custom)?;
        Ok(SpecJson(text.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_the_compact_json_and_reads_back_as_the_same_tree() {
        let value = json!({"containers": [{"name": "c0", "image": "busybox"}], "a": 1});
        let spec = SpecJson::new(&value);
        assert_eq!(
            spec.text(),
            r#"{"containers":[{"name":"c0","image":"busybox"}],"a":1}"#
        );
        assert_eq!(spec.value().unwrap(), value);
        let again: SpecJson = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert!(again.same(&spec) && !again.shared_with(&spec));
        assert!(spec.shared_with(&spec.clone()));
        assert!(!spec.same(&SpecJson::new(&json!({}))));
        // What is not JSON is refused, not kept.
        let err = serde_json::from_str::<SpecJson>(r#""{\"containers\": [""#).unwrap_err();
        assert!(err.to_string().contains("EOF"), "{err}");
    }
}
