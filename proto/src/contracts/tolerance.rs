//! Known field aliases and defaults a contract may tolerate (P5), applied before validation so
//! the validators and the emitted value only ever see the canonical shape.
//!
//! Models drift on key names (`file` for `path`, `comment` for `body`) and drop empty arrays.
//! Where a contract says so, those drifts are mapped onto the canonical shape instead of costing a
//! repair round. What is *not* listed stays an error: an unrecognised key is rejected rather than
//! dropped, because dropping `inlineComments` would silently lose every comment in it.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::DiagnosticCode;

use super::extract::describe_value;
use super::path::{JsonPath, Segment};
use super::schema_check::{resolve, type_matches, types};
use super::violation::Violation;

/// What a contract tolerates beyond its canonical schema. [`Tolerance::STRICT`] tolerates
/// nothing (every P4 contract).
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub aliases: &'static [Alias],
    /// A required array property that is absent or `null` counts as `[]`.
    pub missing_arrays_are_empty: bool,
}

/// Another key a model may use for a canonical property.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    /// The objects it applies to, as a path pattern: `$.newInlineComments[*]`.
    pub within: &'static str,
    pub alias: &'static str,
    pub canonical: &'static str,
    pub kind: AliasKind,
}

/// How an alias relates to its canonical property.
#[derive(Debug, Clone, Copy)]
pub enum AliasKind {
    /// Another name for the same value. Giving both is ambiguous and rejected.
    Synonym,
    /// A value the canonical one is derived from when the canonical key is absent (the first
    /// line of a `lineRange`). When the canonical key is present it wins and the alias is
    /// ignored. The function returns the canonical value, or why it cannot, worded for the model.
    Fallback(fn(&Value) -> Result<Value, String>),
}

impl Tolerance {
    pub const STRICT: Tolerance = Tolerance {
        aliases: &[],
        missing_arrays_are_empty: false,
    };

    pub fn is_strict(&self) -> bool {
        self.aliases.is_empty() && !self.missing_arrays_are_empty
    }

    pub(crate) fn aliases_within<'a>(
        &'a self,
        pattern: &'a str,
    ) -> impl Iterator<Item = &'a Alias> {
        self.aliases.iter().filter(move |a| a.within == pattern)
    }
}

/// A value rewritten to the canonical shape, and how to name its paths as the model wrote them.
#[derive(Debug)]
pub(crate) struct Normalised {
    pub value: Value,
    /// (parent path as written, canonical key) → the key the model wrote.
    renames: HashMap<(JsonPath, String), String>,
    /// Canonical paths already reported by a violation here; the walker's findings there repeat it.
    pub reported: HashSet<JsonPath>,
    pub violations: Vec<Violation>,
}

impl Normalised {
    /// The path as the model wrote it (alias names instead of canonical ones), which is what a
    /// diagnostic must name and what the locator can find in the text.
    pub(crate) fn written_path(&self, canonical: &JsonPath) -> JsonPath {
        if self.renames.is_empty() {
            return canonical.clone();
        }
        let mut written = JsonPath::root();
        for segment in canonical.segments() {
            match segment {
                Segment::Key(k) => {
                    let key = self
                        .renames
                        .get(&(written.clone(), k.clone()))
                        .cloned()
                        .unwrap_or_else(|| k.clone());
                    written.push(Segment::Key(key));
                }
                Segment::Index(i) => written.push(Segment::Index(*i)),
            }
        }
        written
    }
}

/// Applies `tolerance` to `value` under `schema` (the canonical schema root).
pub(crate) fn normalise(mut value: Value, schema: &Value, tolerance: &Tolerance) -> Normalised {
    let mut n = Normaliser {
        root: schema,
        tolerance,
        renames: HashMap::new(),
        reported: HashSet::new(),
        violations: Vec::new(),
    };
    if !tolerance.is_strict() {
        n.visit(
            &mut value,
            schema,
            &mut JsonPath::root(),
            &mut JsonPath::root(),
        );
    }
    Normalised {
        value,
        renames: n.renames,
        reported: n.reported,
        violations: n.violations,
    }
}

struct Normaliser<'s> {
    root: &'s Value,
    tolerance: &'s Tolerance,
    renames: HashMap<(JsonPath, String), String>,
    reported: HashSet<JsonPath>,
    violations: Vec<Violation>,
}

impl<'s> Normaliser<'s> {
    fn visit(
        &mut self,
        value: &mut Value,
        schema: &'s Value,
        canonical: &mut JsonPath,
        written: &mut JsonPath,
    ) {
        let schema = self.branch_for(schema, value);
        match value {
            Value::Object(object) => {
                self.apply_aliases(object, canonical, written);
                if self.tolerance.missing_arrays_are_empty {
                    self.fill_arrays(object, schema);
                }
                let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                    return;
                };
                for (key, child) in object.iter_mut() {
                    let Some(child_schema) = properties.get(key) else {
                        continue;
                    };
                    let written_key = self
                        .renames
                        .get(&(written.clone(), key.clone()))
                        .cloned()
                        .unwrap_or_else(|| key.clone());
                    canonical.push(Segment::Key(key.clone()));
                    written.push(Segment::Key(written_key));
                    self.visit(child, child_schema, canonical, written);
                    canonical.pop();
                    written.pop();
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = schema.get("items") else {
                    return;
                };
                for (i, item) in items.iter_mut().enumerate() {
                    canonical.push(Segment::Index(i));
                    written.push(Segment::Index(i));
                    self.visit(item, item_schema, canonical, written);
                    canonical.pop();
                    written.pop();
                }
            }
            _ => {}
        }
    }

    /// The schema that describes `value`: `$ref` followed, and of `anyOf` the branch whose type
    /// fits (the non-null side of a nullable object).
    fn branch_for(&self, schema: &'s Value, value: &Value) -> &'s Value {
        let schema = resolve(self.root, schema);
        match schema.get("anyOf").and_then(Value::as_array) {
            Some(branches) => branches
                .iter()
                .map(|b| resolve(self.root, b))
                .find(|b| types(self.root, b).iter().any(|t| type_matches(t, value)))
                .unwrap_or(schema),
            None => schema,
        }
    }

    fn apply_aliases(
        &mut self,
        object: &mut Map<String, Value>,
        canonical: &JsonPath,
        written: &JsonPath,
    ) {
        let pattern = canonical.pattern();
        for alias in self.tolerance.aliases_within(&pattern) {
            let Some(alias_value) = object.remove(alias.alias) else {
                continue;
            };
            let alias_path = written.clone().key(alias.alias);
            match alias.kind {
                AliasKind::Synonym if object.contains_key(alias.canonical) => {
                    self.violations.push(Violation::at_key(
                        DiagnosticCode::ConstraintViolation,
                        alias_path,
                        format!(
                            "both \"{}\" and \"{}\" are given, and they name the same value; keep only \"{}\"",
                            alias.alias, alias.canonical, alias.canonical
                        ),
                    ));
                }
                AliasKind::Synonym => {
                    object.insert(alias.canonical.to_owned(), alias_value);
                    self.renames.insert(
                        (written.clone(), alias.canonical.to_owned()),
                        alias.alias.to_owned(),
                    );
                }
                AliasKind::Fallback(_) if object.contains_key(alias.canonical) => {}
                AliasKind::Fallback(derive) => match derive(&alias_value) {
                    Ok(derived) => {
                        object.insert(alias.canonical.to_owned(), derived);
                        self.renames.insert(
                            (written.clone(), alias.canonical.to_owned()),
                            alias.alias.to_owned(),
                        );
                    }
                    Err(why) => {
                        self.violations.push(Violation::at_value(
                            DiagnosticCode::TypeMismatch,
                            alias_path,
                            format!("{why}, found {}", describe_value(&alias_value)),
                        ));
                        self.reported.insert(canonical.clone().key(alias.canonical));
                    }
                },
            }
        }
    }

    fn fill_arrays(&mut self, object: &mut Map<String, Value>, schema: &Value) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            if types(self.root, property) == ["array"]
                && object.get(name).is_none_or(Value::is_null)
            {
                object.insert(name.clone(), Value::Array(Vec::new()));
            }
        }
    }
}
