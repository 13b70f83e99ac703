//! YAML documents as JSON values plus an index from field path to line:column.
//!
//! The Kubernetes types are deserialized from the JSON value (through `serde_path_to_error` and
//! `serde_ignored`), which report problems as field paths; the index turns each path back into
//! the place in the file where the user wrote it.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

/// 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

fn pos_of<T>(s: &Spanned<T>) -> Pos {
    Pos {
        line: s.referenced.line(),
        column: s.referenced.column(),
    }
}

/// A YAML node with the position of every key and item below it.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::UInt(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(Spanned<String>, Spanned<Node>)> = Vec::new();
        // (The parser itself rejects duplicate keys.)
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

/// One YAML document: its value as JSON, and where each field path was written.
#[derive(Debug, Clone)]
pub struct Document {
    pub value: Value,
    /// Position of the document itself (its first line).
    pub pos: Pos,
    positions: BTreeMap<String, Pos>,
}

impl Document {
    /// A document of a value that no text was read for (a request's body made into a pod
    /// spec): its problems have no position worth giving.
    #[cfg(feature = "spec")]
    pub(crate) fn unplaced(value: Value) -> Document {
        Document {
            value,
            pos: Pos { line: 0, column: 0 },
            positions: BTreeMap::new(),
        }
    }

    /// Where the field at `path` (`spec.containers[0].name`) was written, or the nearest
    /// enclosing field that was.
    pub fn position(&self, path: &str) -> Pos {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return *pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.pos,
            }
        }
    }
}

/// Why a YAML text could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub pos: Option<Pos>,
    pub message: String,
}

/// Reads every document of a YAML stream. Empty documents are skipped.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, SyntaxError> {
    // kubectl reads manifests as YAML 1.1 (go-yaml v2 through sigs.k8s.io/yaml), where a
    // number with a leading 0 is octal: `defaultMode: 0400` is 256, as users write modes.
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    let docs: Vec<Spanned<Node>> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| {
            let pos = e.location().map(|l| Pos {
                line: l.line(),
                column: l.column(),
            });
            // The message alone, without the location and snippet the error's own text adds
            // (we print our own; and the PID 1 build then links no snippet renderer).
            use serde_saphyr::MessageFormatter;
            let message = serde_saphyr::DefaultMessageFormatter.format_message(&e);
            let message = message.lines().next().unwrap_or("invalid YAML");
            SyntaxError {
                pos,
                message: message.to_string(),
            }
        })?;
    Ok(docs
        .into_iter()
        .filter(|d| !matches!(d.value, Node::Null))
        .map(|d| {
            let pos = pos_of(&d);
            let mut positions = BTreeMap::new();
            let value = to_json(d.value, String::new(), &mut positions);
            Document {
                value,
                pos,
                positions,
            }
        })
        .collect())
}

fn to_json(node: Node, path: String, positions: &mut BTreeMap<String, Pos>) -> Value {
    match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Int(i) => Value::from(i),
        Node::UInt(u) => Value::from(u),
        Node::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    let p = format!("{path}[{i}]");
                    positions.insert(p.clone(), pos_of(&item));
                    to_json(item.value, p, positions)
                })
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (key, value) in entries {
                let p = if path.is_empty() {
                    key.value.clone()
                } else {
                    format!("{path}.{}", key.value)
                };
                positions.insert(p.clone(), pos_of(&key));
                map.insert(key.value, to_json(value.value, p, positions));
            }
            Value::Object(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_keys_and_items() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: x\n  - name: b\n---\nkind: ConfigMap\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        let d = &docs[0];
        assert_eq!(d.value["spec"]["containers"][1]["name"], "b");
        assert_eq!(d.position("kind"), Pos { line: 2, column: 1 });
        assert_eq!(
            d.position("spec.containers[1].name"),
            Pos { line: 7, column: 5 }
        );
        // An unknown path falls back to its nearest known parent.
        assert_eq!(
            d.position("spec.containers[1].nope"),
            d.position("spec.containers[1]")
        );
        assert_eq!(docs[1].position("kind").line, 9);
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = parse_documents("a: [1, 2\nb: c\n").unwrap_err();
        assert!(e.pos.is_some(), "{e:?}");
        let e = parse_documents("a: 1\na: 2\n").unwrap_err();
        assert!(e.message.starts_with("duplicate mapping key"), "{e:?}");
        assert_eq!(e.pos, Some(Pos { line: 2, column: 1 }));
    }
}

#[cfg(test)]
mod octal_tests {
    use super::*;

    #[test]
    fn modes_with_a_leading_zero_are_octal_as_kubectl_reads_them() {
        let docs = parse_documents("a: 0400\nb: 0644\nc: 420\nd: 0o755\ne: '0400'\n").unwrap();
        let v = &docs[0].value;
        assert_eq!(v["a"], 256);
        assert_eq!(v["b"], 420);
        assert_eq!(v["c"], 420);
        assert_eq!(v["d"], 493);
        assert_eq!(v["e"], "0400");
    }
}
