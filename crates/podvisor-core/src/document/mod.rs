//! podvisor's YAML documents, read the one way both builds share: YAML into a JSON value with
//! the line:column of every field (`yaml`), then into typed structs with unknown fields and
//! type errors reported at the place the user wrote them. The Supervision document
//! (`supervision`) needs nothing more, so the PID 1 build reads it with this module alone; pod
//! manifests (`spec`, full build) add the Kubernetes types.

pub mod supervision;
pub mod yaml;

use std::fmt;

use serde::de::DeserializeOwned;

use yaml::{Document, Pos};

/// One problem in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// Field path as Kubernetes prints it: `spec.containers[0].name`.
    pub path: String,
    pub pos: Option<Pos>,
    pub message: String,
}

/// Every problem found in one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors {
    pub file: String,
    pub errors: Vec<SpecError>,
}

impl fmt::Display for SpecErrors {
    /// One line per problem: `FILE:LINE:COL: PATH: MESSAGE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.file)?;
            if let Some(pos) = e.pos {
                write!(f, ":{pos}")?;
            }
            if e.path.is_empty() {
                write!(f, ": {}", e.message)?;
            } else {
                write!(f, ": {}: {}", e.path, e.message)?;
            }
        }
        Ok(())
    }
}

/// The YAML documents of a file, or its syntax error as the file's one problem.
pub fn read_documents(file: &str, text: &str) -> Result<Vec<Document>, SpecErrors> {
    yaml::parse_documents(text).map_err(|e| SpecErrors {
        file: file.to_string(),
        errors: vec![SpecError {
            path: String::new(),
            pos: e.pos,
            message: e.message,
        }],
    })
}

/// The one document of a file that must hold exactly one, a `kind`.
pub(crate) fn read_one_document(
    file: &str,
    text: &str,
    kind: &str,
) -> Result<Document, SpecErrors> {
    let mut documents = read_documents(file, text)?;
    if documents.len() != 1 {
        return Err(SpecErrors {
            file: file.to_string(),
            errors: vec![SpecError {
                path: String::new(),
                pos: documents.get(1).map(|d| d.pos),
                message: format!(
                    "expected exactly one document, a {kind}; found {}",
                    documents.len()
                ),
            }],
        });
    }
    Ok(documents.remove(0))
}

/// Collects problems with their positions in one document.
pub(crate) struct Problems<'a> {
    pub(crate) doc: &'a Document,
    pub(crate) prefix: String,
    pub(crate) errors: &'a mut Vec<SpecError>,
}

impl Problems<'_> {
    pub(crate) fn push(&mut self, path: &str, message: impl Into<String>) {
        let path = join(&self.prefix, path);
        self.errors.push(SpecError {
            pos: Some(self.doc.position(&path)),
            path,
            message: message.into(),
        });
    }
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (_, true) => prefix.to_string(),
        _ if path.starts_with('[') => format!("{prefix}{path}"),
        _ => format!("{prefix}.{path}"),
    }
}

/// Deserializes `T` from a document, reporting type errors and unknown fields with positions.
pub(crate) fn typed<T: DeserializeOwned>(doc: &Document, errors: &mut Vec<SpecError>) -> Option<T> {
    let mut unknown: Vec<String> = Vec::new();
    let result: Result<T, _> = {
        let mut on_unknown = |path: serde_ignored::Path<'_>| unknown.push(ignored_path(&path));
        let ignored = serde_ignored::Deserializer::new(doc.value.clone(), &mut on_unknown);
        serde_path_to_error::deserialize(ignored)
    };
    for path in unknown {
        let (parent, field) = match path.rfind(['.', '[']) {
            Some(i) => (&path[..i], path[i..].trim_start_matches('.')),
            None => ("", path.as_str()),
        };
        errors.push(SpecError {
            pos: Some(doc.position(&path)),
            message: format!("unknown field \"{field}\""),
            path: parent.to_string(),
        });
    }
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let path = error_path(e.path());
            errors.push(SpecError {
                pos: Some(doc.position(&path)),
                path,
                message: e.into_inner().to_string(),
            });
            None
        }
    }
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match path {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => join(&ignored_path(parent), key),
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

fn error_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join(&out, key),
            Segment::Enum { variant } => out = join(&out, variant),
            Segment::Unknown => {}
        }
    }
    out
}
