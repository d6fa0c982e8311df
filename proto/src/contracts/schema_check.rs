//! Validates a `serde_json::Value` against the JSON Schema subset schemars generates for our
//! contracts, collecting every violation instead of stopping at the first.
//!
//! The fast path (typed serde) only says "valid" or "not"; when it says "not", the repair round
//! needs every problem, named by path and worded for the model. This walker produces that list
//! from the same schema the prompts show, so the contract the model reads and the rules it is
//! held to cannot drift apart.
//!
//! Supported keywords are listed in [`SUPPORTED_KEYWORDS`]; a test fails when a generated schema
//! uses anything else, so a constraint can never be silently ignored. Semantics follow JSON Schema
//! 2020-12, except that "integer" means a JSON number written without fraction or exponent (as
//! serde reads it), so that both paths agree on `1.0`.

use serde_json::{Map, Value};

use crate::DiagnosticCode;

use super::extract::describe_value;
use super::path::{JsonPath, Segment};
use super::tolerance::Tolerance;
use super::violation::Violation;

/// Keywords the walker enforces.
pub const SUPPORTED_KEYWORDS: &[&str] = &[
    "$ref",
    "anyOf",
    "type",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minimum",
    "maximum",
    "format",
    "pattern",
];

/// Keywords that carry no constraint.
pub const ANNOTATION_KEYWORDS: &[&str] = &[
    "$schema",
    "$defs",
    "title",
    "description",
    "default",
    "examples",
];

/// `format` values the walker understands (`uint32` bounds integers; `double` is any number).
pub const SUPPORTED_FORMATS: &[&str] = &["uint32", "double"];

/// `pattern` values the walker understands. `\S`: the string holds a non-whitespace character,
/// i.e. it is not empty after trimming.
pub const SUPPORTED_PATTERNS: &[&str] = &["\\S"];

/// Every violation of `schema` by `value`, in document order of the schema walk.
pub(crate) fn check(schema: &Value, value: &Value, tolerance: &Tolerance) -> Vec<Violation> {
    let mut walker = Walker {
        root: schema,
        tolerance,
        out: Vec::new(),
    };
    let mut path = JsonPath::root();
    walker.walk(schema, value, &mut path);
    walker.out
}

/// Follows `$ref` (local `#/...` pointers only) until a schema without one.
pub(crate) fn resolve<'s>(root: &'s Value, mut schema: &'s Value) -> &'s Value {
    for _ in 0..32 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => schema = target,
                None => return schema,
            },
            None => return schema,
        }
    }
    schema
}

/// The JSON type names a schema allows (after `$ref`), or none when it does not say.
pub(crate) fn types<'s>(root: &'s Value, schema: &'s Value) -> Vec<&'s str> {
    match resolve(root, schema).get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

pub(crate) fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

/// Schema keywords used anywhere in `schema` that the walker would not enforce (empty for every
/// schema we generate; a test holds that).
pub fn unsupported_keywords(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_unsupported(schema, "#", &mut found);
    found
}

fn collect_unsupported(schema: &Value, at: &str, found: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        if !schema.is_boolean() {
            found.push(format!("{at}: a schema must be an object or a boolean"));
        }
        return;
    };
    for (keyword, value) in object {
        let here = format!("{at}/{keyword}");
        if !SUPPORTED_KEYWORDS.contains(&keyword.as_str())
            && !ANNOTATION_KEYWORDS.contains(&keyword.as_str())
        {
            found.push(format!("{here}: keyword not enforced"));
            continue;
        }
        match keyword.as_str() {
            "format"
                if !value
                    .as_str()
                    .is_some_and(|f| SUPPORTED_FORMATS.contains(&f)) =>
            {
                found.push(format!("{here}: format {value} not enforced"));
            }
            "pattern"
                if !value
                    .as_str()
                    .is_some_and(|p| SUPPORTED_PATTERNS.contains(&p)) =>
            {
                found.push(format!("{here}: pattern {value} not enforced"));
            }
            "additionalProperties" if !value.is_boolean() => {
                found.push(format!("{here}: only true/false are enforced"));
            }
            "$ref" if !value.as_str().is_some_and(|r| r.starts_with("#/")) => {
                found.push(format!("{here}: only local references are followed"));
            }
            "properties" | "$defs" => {
                if let Some(map) = value.as_object() {
                    for (name, sub) in map {
                        collect_unsupported(sub, &format!("{here}/{name}"), found);
                    }
                }
            }
            "items" => collect_unsupported(value, &here, found),
            "anyOf" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    collect_unsupported(sub, &format!("{here}/{i}"), found);
                }
            }
            _ => {}
        }
    }
}

struct Walker<'s> {
    root: &'s Value,
    tolerance: &'s Tolerance,
    out: Vec<Violation>,
}

impl Walker<'_> {
    fn walk(&mut self, schema: &Value, value: &Value, path: &mut JsonPath) {
        let Some(keywords) = schema.as_object() else {
            if schema == &Value::Bool(false) {
                self.out.push(Violation::at_value(
                    DiagnosticCode::UnknownProperty,
                    path.clone(),
                    "no value is allowed here",
                ));
            }
            return;
        };
        if let Some(target) = keywords.get("$ref").map(|_| resolve(self.root, schema))
            && !std::ptr::eq(target, schema)
        {
            self.walk(target, value, path);
        }
        if let Some(Value::Array(branches)) = keywords.get("anyOf") {
            self.any_of(branches, value, path);
        }
        if keywords.contains_key("type") {
            let allowed = types(self.root, schema);
            if !allowed.iter().any(|t| type_matches(t, value)) {
                self.out.push(Violation::at_value(
                    DiagnosticCode::TypeMismatch,
                    path.clone(),
                    format!(
                        "expected {}, found {}",
                        self.expected(schema, true),
                        describe_value(value)
                    ),
                ));
                return;
            }
        }
        if let Some(Value::Array(options)) = keywords.get("enum")
            && !options.contains(value)
        {
            self.out.push(Violation::at_value(
                DiagnosticCode::InvalidEnumValue,
                path.clone(),
                enum_message(options, value),
            ));
            return;
        }
        match value {
            Value::Number(_) => self.range(schema, keywords, value, path),
            Value::String(s) => self.pattern(keywords, s, path),
            Value::Object(object) => self.object(keywords, object, path),
            Value::Array(items) => {
                if let Some(item_schema) = keywords.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        path.push(Segment::Index(i));
                        self.walk(item_schema, item, path);
                        path.pop();
                    }
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }

    /// Passes when one branch passes. Otherwise reports the branch meant for this type of value
    /// (the non-null side of a nullable field, typically), or a type mismatch naming all branches.
    fn any_of(&mut self, branches: &[Value], value: &Value, path: &mut JsonPath) {
        let mut matching_type = None;
        for branch in branches {
            let mut sub = Walker {
                root: self.root,
                tolerance: self.tolerance,
                out: Vec::new(),
            };
            sub.walk(branch, value, path);
            if sub.out.is_empty() {
                return;
            }
            // A wrong value for the field itself (not deeper inside it): name every branch, so a
            // nullable enum says "… or null" instead of hiding the null branch.
            if let [only] = sub.out.as_mut_slice()
                && &only.path == path
                && matches!(
                    only.code,
                    DiagnosticCode::InvalidEnumValue | DiagnosticCode::TypeMismatch
                )
            {
                let expected: Vec<String> =
                    branches.iter().map(|b| self.expected(b, true)).collect();
                only.message = format!(
                    "expected {}, found {}{}",
                    expected.join(" or "),
                    describe_value(value),
                    case_hint(&self.enum_values(branch), value)
                );
            }
            let typed = types(self.root, branch);
            if matching_type.is_none()
                && (typed.is_empty() || typed.iter().any(|t| type_matches(t, value)))
            {
                matching_type = Some(sub.out);
            }
        }
        match matching_type {
            Some(violations) => self.out.extend(violations),
            None => {
                let expected: Vec<String> =
                    branches.iter().map(|b| self.expected(b, true)).collect();
                self.out.push(Violation::at_value(
                    DiagnosticCode::TypeMismatch,
                    path.clone(),
                    format!(
                        "expected {}, found {}",
                        expected.join(" or "),
                        describe_value(value)
                    ),
                ));
            }
        }
    }

    fn range(
        &mut self,
        schema: &Value,
        keywords: &Map<String, Value>,
        value: &Value,
        path: &JsonPath,
    ) {
        let Some(n) = value.as_f64() else { return };
        let mut low = keywords.get("minimum").and_then(Value::as_f64);
        let mut high = keywords.get("maximum").and_then(Value::as_f64);
        if keywords.get("format").and_then(Value::as_str) == Some("uint32") {
            low = Some(low.map_or(0.0, |l| l.max(0.0)));
            high = Some(high.map_or(f64::from(u32::MAX), |h| h.min(f64::from(u32::MAX))));
        }
        let too_low = low.is_some_and(|l| n < l);
        let too_high = high.is_some_and(|h| n > h);
        if !(too_low || too_high) {
            return;
        }
        let integer = types(self.root, schema).contains(&"integer");
        let wanted = match (low, high) {
            (Some(l), Some(h)) if integer && l == 1.0 && h == f64::from(u32::MAX) => {
                "a positive integer (at most 4294967295)".to_owned()
            }
            (Some(l), Some(h)) => format!(
                "{} from {} to {}",
                if integer { "an integer" } else { "a number" },
                number(l),
                number(h)
            ),
            (Some(l), None) => format!("a number of at least {}", number(l)),
            (None, Some(h)) => format!("a number of at most {}", number(h)),
            (None, None) => "a number in range".to_owned(),
        };
        self.out.push(Violation::at_value(
            DiagnosticCode::OutOfRange,
            path.clone(),
            format!("expected {wanted}, found {}", describe_value(value)),
        ));
    }

    fn pattern(&mut self, keywords: &Map<String, Value>, s: &str, path: &JsonPath) {
        if keywords.get("pattern").and_then(Value::as_str) == Some("\\S")
            && s.chars().all(char::is_whitespace)
        {
            let about = keywords
                .get("description")
                .and_then(Value::as_str)
                .map(|d| format!(" ({})", short_description(d)))
                .unwrap_or_default();
            let found = if s.is_empty() {
                "an empty string"
            } else {
                "a string of only whitespace"
            };
            self.out.push(Violation::at_value(
                DiagnosticCode::EmptyString,
                path.clone(),
                format!("expected a non-empty string{about}, found {found}"),
            ));
        }
    }

    fn object(
        &mut self,
        keywords: &Map<String, Value>,
        object: &Map<String, Value>,
        path: &mut JsonPath,
    ) {
        let properties = keywords.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = keywords
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();

        for name in &required {
            if !object.contains_key(*name) {
                let about = properties
                    .and_then(|p| p.get(*name))
                    .map(|s| self.property_summary(s))
                    .unwrap_or_default();
                self.out.push(Violation::missing(
                    path.clone().key(*name),
                    format!("missing required property \"{name}\"{about}"),
                ));
            }
        }

        if keywords.get("additionalProperties") == Some(&Value::Bool(false)) {
            let known = |k: &str| properties.is_some_and(|p| p.contains_key(k));
            for key in object.keys().filter(|k| !known(k)) {
                self.out.push(Violation::at_key(
                    DiagnosticCode::UnknownProperty,
                    path.clone().key(key.clone()),
                    self.unknown_message(key, &required, properties, path),
                ));
            }
        }

        if let Some(properties) = properties {
            for (name, sub) in properties {
                if let Some(v) = object.get(name) {
                    path.push(Segment::Key(name.clone()));
                    self.walk(sub, v, path);
                    path.pop();
                }
            }
        }
    }

    fn unknown_message(
        &self,
        key: &str,
        required: &[&str],
        properties: Option<&Map<String, Value>>,
        path: &JsonPath,
    ) -> String {
        // Required first, in declaration order (the order the schema lists them), then the rest.
        let mut allowed: Vec<&str> = required.to_vec();
        for name in properties.into_iter().flat_map(|p| p.keys()) {
            if !allowed.contains(&name.as_str()) {
                allowed.push(name);
            }
        }
        let mut message = if allowed.is_empty() {
            format!("unknown property \"{key}\"; this object allows no properties")
        } else {
            format!(
                "unknown property \"{key}\"; allowed properties: {}",
                allowed.join(", ")
            )
        };
        let aliases: Vec<String> = self
            .tolerance
            .aliases_within(&path.pattern())
            .map(|a| format!("{} for {}", a.alias, a.canonical))
            .collect();
        if !aliases.is_empty() {
            message.push_str(&format!(" (also accepted: {})", aliases.join(", ")));
        }
        let folded = fold(key);
        if let Some(close) = allowed.iter().find(|a| fold(a) == folded) {
            message.push_str(&format!("; did you mean \"{close}\"?"));
        }
        message
    }

    /// ` (string: why this pull request does or does not need review)`.
    fn property_summary(&self, schema: &Value) -> String {
        let kind = self.expected(schema, false);
        let description = schema
            .get("description")
            .or_else(|| resolve(self.root, schema).get("description"))
            .and_then(Value::as_str)
            .map(short_description);
        match description {
            Some(d) => format!(" ({kind}: {d})"),
            None => format!(" ({kind})"),
        }
    }

    /// The `enum` of a schema (after `$ref`), empty when it has none.
    fn enum_values(&self, schema: &Value) -> Vec<Value> {
        resolve(self.root, schema)
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// What a schema accepts, in words: `a boolean`, `a positive integer or null`,
    /// `one of "low", "medium", "high"`.
    fn expected(&self, schema: &Value, article: bool) -> String {
        if let Some(Value::Array(branches)) = schema.get("anyOf") {
            let parts: Vec<String> = branches.iter().map(|b| self.expected(b, article)).collect();
            return parts.join(" or ");
        }
        let resolved = resolve(self.root, schema);
        if let Some(Value::Array(options)) = resolved.get("enum") {
            let mut words = format!("one of {}", quoted_list(options));
            if types(self.root, resolved).contains(&"null") {
                words.push_str(" or null");
            }
            return words;
        }
        let names = types(self.root, resolved);
        if names.is_empty() {
            return if article { "a value" } else { "any value" }.to_owned();
        }
        let words: Vec<String> = names
            .iter()
            .map(|name| type_words(resolved, name, article))
            .collect();
        words.join(" or ")
    }
}

fn type_words(schema: &Value, name: &str, article: bool) -> String {
    let positive = schema.get("minimum").and_then(Value::as_f64) == Some(1.0);
    let non_empty = schema.get("pattern").and_then(Value::as_str) == Some("\\S");
    let (with, without) = match name {
        "null" => ("null", "null"),
        "boolean" => ("a boolean", "boolean"),
        "integer" if positive => ("a positive integer", "positive integer"),
        "integer" => ("an integer", "integer"),
        "number" => ("a number", "number"),
        "string" if non_empty => ("a non-empty string", "non-empty string"),
        "string" => ("a string", "string"),
        "array" => ("an array", "array"),
        "object" => ("an object", "object"),
        other => (other, other),
    };
    if article { with } else { without }.to_owned()
}

fn enum_message(options: &[Value], value: &Value) -> String {
    format!(
        "expected one of {}, found {}{}",
        quoted_list(options),
        describe_value(value),
        case_hint(options, value)
    )
}

/// `; values are exact and case-sensitive: write "major"` when only the case (or surrounding
/// whitespace) is wrong.
fn case_hint(options: &[Value], value: &Value) -> String {
    let Some(s) = value.as_str() else {
        return String::new();
    };
    let wanted = s.trim().to_lowercase();
    options
        .iter()
        .filter_map(Value::as_str)
        .find(|o| o.to_lowercase() == wanted)
        .map(|exact| format!("; values are exact and case-sensitive: write \"{exact}\""))
        .unwrap_or_default()
}

fn quoted_list(options: &[Value]) -> String {
    let parts: Vec<String> = options
        .iter()
        .map(|o| match o {
            Value::String(s) => format!("\"{s}\""),
            other => other.to_string(),
        })
        .collect();
    parts.join(", ")
}

/// A description as a clause: its first sentence, lower-cased first letter, no final period.
pub(crate) fn short_description(description: &str) -> String {
    let first = description
        .split("\n\n")
        .next()
        .unwrap_or("")
        .replace('\n', " ");
    // A sentence ends at ". " before a capital letter ("e.g. x" does not end one).
    let end = first
        .match_indices(". ")
        .find(|(i, _)| first[i + 2..].starts_with(char::is_uppercase))
        .map_or(first.len(), |(i, _)| i);
    let first = first[..end].trim().trim_end_matches('.');
    // Lower-case the first letter unless the first word is an acronym ("PR", "JSON").
    let word = first.split_whitespace().next().unwrap_or("");
    let acronym = word.chars().count() > 1 && word.chars().all(|c| !c.is_lowercase());
    let mut chars = first.chars();
    match chars.next() {
        Some(a) if a.is_uppercase() && !acronym => a.to_lowercase().chain(chars).collect(),
        _ => first.to_owned(),
    }
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// `startLine`, `start-line` and `Start_Line` fold to the same name, for "did you mean".
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}
