//! Structured outputs: a stage's output contract turned into the decoding constraint a provider
//! can enforce — a JSON Schema reduced to the subset each server accepts, or a GBNF grammar of a
//! tagged envelope — so a model that can only emit valid structure needs no paid repair round.
//!
//! Everything here is derived from the contracts themselves (the generated schemas, the
//! envelopes' field tables): a constraint cannot describe another format than the one parsed.

use serde_json::{Map, Value};

use crate::chat::OutputConstraint;
use crate::contracts::{
    JsonContract, ReviewerReport, Summary, Triage, ValidatorReport, VerdictKind,
};
use crate::diff::CommentableLines;
use crate::envelope::grammar::{self, EnvelopeBounds};
use crate::names::string_enum;
use crate::{ProtocolFamily, ProtocolId};

/// How a provider is asked to hold answers to the contract (`structured_output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StructuredOutput {
    /// What the provider kind is known to support, discovered from the server where it says.
    Auto,
    /// OpenAI-compatible `response_format` with a strict JSON Schema: JSON contracts only.
    JsonSchema,
    /// A grammar-capable server (llama.cpp): a GBNF grammar for the tagged envelopes, and its
    /// `response_format` JSON Schema for the JSON contracts.
    Grammar,
    /// Anthropic: a forced tool call whose input schema is the contract (JSON contracts only).
    Tool,
    /// No constraint: repair rounds are the only defence.
    Off,
}

string_enum!(StructuredOutput {
    Auto => "auto",
    JsonSchema => "json_schema",
    Grammar => "grammar",
    Tool => "tool",
    Off => "off",
});

/// The JSON Schema subset a server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaDialect {
    /// OpenAI strict mode: every property required, no `format`, no string length keywords.
    OpenAiStrict,
    /// llama.cpp's schema-to-grammar converter: no unanchored `pattern` (HTTP 400), no `format`;
    /// length bounds are enforced and keep a small model from running on.
    LlamaCpp,
    /// Anthropic's tool `input_schema`: plain JSON Schema.
    Anthropic,
}

/// Upper bounds a constraint adds where the contract has none, so a small model cannot run on
/// until the token limit (`structured_max_items`, `structured_max_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Items of one array (findings, files, verdicts) or blocks of one envelope list.
    pub max_items: u32,
    /// Characters of one string; for an envelope, of one line of text.
    pub max_length: u32,
    /// Lines of one envelope text field.
    pub max_lines: u32,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_items: 20,
            max_length: 2000,
            max_lines: 40,
        }
    }
}

/// The tokens one list item (a finding, a file, a verdict) is allowed when the answer's item
/// bound is fitted to its output limit: its tags or keys and a few short sentences. Measured on
/// SmolLM2 writing the review envelope's findings in Chinese: about 145 tokens each.
pub const TOKENS_PER_ITEM: u32 = 192;

/// The tokens an answer's frame takes besides its items (the envelope's or object's own fields).
pub const TOKENS_PER_FRAME: u32 = 160;

/// The shortest string a fitted bound still allows, in characters.
const MIN_FITTED_LENGTH: u32 = 64;

impl Bounds {
    /// These bounds fitted to an answer of `output_tokens` (decision 182): no more items than
    /// it has room for at [`TOKENS_PER_ITEM`] each after [`TOKENS_PER_FRAME`] (at least one),
    /// and no string or envelope field longer than the whole limit in characters (English
    /// takes about a token per four characters; Chinese can take more than one per character,
    /// which is why the item allowance is generous). A small model that
    /// fills every list or runs on in one field then still ends inside the limit far more
    /// often, where under unfitted bounds it is cut off mid-answer, and every repair round that
    /// keeps its conclusions is cut off again.
    pub fn fitted_to_output(self, output_tokens: u32) -> Bounds {
        let items = output_tokens.saturating_sub(TOKENS_PER_FRAME) / TOKENS_PER_ITEM;
        let max_length = self.max_length.min(output_tokens.max(MIN_FITTED_LENGTH));
        let line = max_length.clamp(1, MAX_LINE_CHARS);
        Bounds {
            max_items: self.max_items.min(items.max(1)),
            max_length,
            max_lines: self.max_lines.min((output_tokens / line).max(1)),
        }
    }
}

/// What a stage's inputs say the answer may name, read by the worker from the inputs the
/// pipeline gives (see [`crate::wire::input_name`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    /// The stage's diff: an envelope's finding locations narrow to its commentable lines, a JSON
    /// contract's paths to its files.
    pub lines: Option<&'a CommentableLines>,
    /// The candidate findings' ids a validator is given, in order.
    pub finding_ids: &'a [String],
}

/// The constraint for `protocol` under a resolved `mode` (never [`StructuredOutput::Auto`]),
/// or `None` when the mode cannot express this protocol. `scope` narrows what the answer may
/// name to the stage's inputs: an envelope's finding locations to the diff's commentable
/// lines, a JSON contract's paths to the changed files (and a summary's `files` to each changed
/// file exactly once, where the dialect can say so), a validator's ids to the candidates'.
pub fn constraint(
    protocol: ProtocolId,
    mode: StructuredOutput,
    bounds: Bounds,
    scope: Scope<'_>,
) -> Option<OutputConstraint> {
    let lines = scope.lines;
    let json = |dialect| {
        decoding_schema(protocol, dialect, bounds).map(|mut schema| {
            if let Some(lines) = lines {
                narrow(protocol, dialect, &mut schema, lines);
            }
            if protocol == ProtocolId::Validator {
                narrow_ids(dialect, &mut schema, scope.finding_ids);
            }
            OutputConstraint::JsonSchema {
                name: schema_name(protocol),
                schema,
            }
        })
    };
    match (mode, protocol.family()) {
        (StructuredOutput::Auto | StructuredOutput::Off, _) => None,
        (StructuredOutput::JsonSchema, ProtocolFamily::Json) => json(SchemaDialect::OpenAiStrict),
        (StructuredOutput::Grammar, ProtocolFamily::Json) => json(SchemaDialect::LlamaCpp),
        (StructuredOutput::Tool, ProtocolFamily::Json) => json(SchemaDialect::Anthropic),
        (StructuredOutput::Grammar, ProtocolFamily::Envelope) => {
            envelope_grammar(protocol, bounds, lines).map(|gbnf| OutputConstraint::Grammar { gbnf })
        }
        // A schema or a tool cannot express a tagged envelope, and P5's `<output>` block wraps
        // JSON in free text: those answers stay unconstrained.
        (_, ProtocolFamily::Envelope | ProtocolFamily::OutputTag) => None,
    }
}

/// The name a JSON constraint carries (`json_schema.name`, the forced tool's name):
/// `verdict_<protocol>`, within OpenAI's `^[a-zA-Z0-9_-]{1,64}$`.
pub fn schema_name(protocol: ProtocolId) -> String {
    format!("verdict_{}", protocol.as_str().replace('-', "_"))
}

/// The GBNF grammar of an envelope protocol (P1–P3), `None` for the others.
pub fn envelope_grammar(
    protocol: ProtocolId,
    bounds: Bounds,
    lines: Option<&CommentableLines>,
) -> Option<String> {
    envelope_spec(protocol)
        .map(|spec| grammar::grammar(spec, envelope_bounds(bounds), lines).to_gbnf())
}

/// The longest line of an envelope text field, in characters, whatever `max_length` says.
const MAX_LINE_CHARS: u32 = 400;

fn envelope_bounds(bounds: Bounds) -> EnvelopeBounds {
    EnvelopeBounds {
        max_items: bounds.max_items,
        max_lines: bounds.max_lines,
        max_line_chars: bounds.max_length.clamp(1, MAX_LINE_CHARS),
    }
}

fn envelope_spec(protocol: ProtocolId) -> Option<&'static crate::envelope::EnvelopeSpec> {
    match protocol {
        ProtocolId::Review => Some(&crate::review::SPEC),
        ProtocolId::IssueAnalysis => Some(&crate::issue_analysis::SPEC),
        ProtocolId::Scan => Some(&crate::scan::SPEC),
        _ => None,
    }
}

/// The JSON contract's schema in `dialect`, `None` for protocols that are not P4.
pub fn decoding_schema(
    protocol: ProtocolId,
    dialect: SchemaDialect,
    bounds: Bounds,
) -> Option<Value> {
    let schema = match protocol {
        ProtocolId::Triage => Triage::schema(),
        ProtocolId::Summary => Summary::schema(),
        ProtocolId::Reviewer => ReviewerReport::schema(),
        ProtocolId::Validator => ValidatorReport::schema(),
        _ => return None,
    };
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut reduced = reduce(schema, &defs, dialect, bounds, 0);
    split_by_rules(protocol, &mut reduced);
    Some(reduced)
}

/// The contracts' cross-field rules as alternatives a decoder can enforce: a model that has
/// written `"verdict": "rejected"` can then only write `"severity": null`, and one that has
/// written `"file": null` only null lines and quote. The order of properties is the order of
/// writing, so the deciding field always comes first.
fn split_by_rules(protocol: ProtocolId, schema: &mut Value) {
    let (pointer, split): (&str, fn(&Value) -> Vec<Value>) = match protocol {
        ProtocolId::Validator => ("/properties/verdicts/items", split_verdict),
        ProtocolId::Reviewer => ("/properties/findings/items", split_finding),
        _ => return,
    };
    if let Some(item) = schema.pointer_mut(pointer) {
        let variants = split(item);
        if !variants.is_empty() {
            *item = serde_json::json!({ "anyOf": variants });
        }
    }
}

/// A confirmed verdict (any severity or null) or a rejected one (severity null).
fn split_verdict(item: &Value) -> Vec<Value> {
    let variant = |verdict: &str, severity: Option<Value>| {
        let mut v = item.clone();
        set_property(&mut v, "verdict", enum_of(&[verdict]));
        if let Some(severity) = severity {
            set_property(&mut v, "severity", severity);
        }
        v
    };
    vec![
        variant(VerdictKind::Confirmed.as_str(), None),
        variant(VerdictKind::Rejected.as_str(), Some(null_schema())),
    ]
}

/// A finding at a file (its path and both lines, a quote or null) or about the change as a
/// whole (file, lines and quote null).
fn split_finding(item: &Value) -> Vec<Value> {
    let mut at_file = item.clone();
    for key in ["file", "start_line", "end_line"] {
        if let Some(node) = item.pointer(&format!("/properties/{key}")) {
            set_property(&mut at_file, key, non_null(node));
        }
    }
    let mut whole_change = item.clone();
    for key in ["file", "start_line", "end_line", "quote"] {
        set_property(&mut whole_change, key, null_schema());
    }
    vec![at_file, whole_change]
}

fn set_property(object: &mut Value, key: &str, schema: Value) {
    if let Some(slot) = object.pointer_mut(&format!("/properties/{key}")) {
        *slot = schema;
    }
}

fn enum_of(values: &[&str]) -> Value {
    serde_json::json!({ "type": "string", "enum": values })
}

fn null_schema() -> Value {
    serde_json::json!({ "type": "null" })
}

/// `node` without its null alternative: a nullable type (`["integer", "null"]`) as the type
/// alone, or the option of an `anyOf` that is not `{"type": "null"}` with the node's
/// description kept.
fn non_null(node: &Value) -> Value {
    if let Some(Value::Array(types)) = node.get("type") {
        let kept: Vec<&Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .collect();
        let mut out = node.clone();
        if let (Some(map), [only]) = (out.as_object_mut(), kept.as_slice()) {
            map.insert("type".to_owned(), (*only).clone());
        }
        return out;
    }
    let Some(options) = node.get("anyOf").and_then(Value::as_array) else {
        return node.clone();
    };
    let mut kept: Vec<&Value> = options.iter().filter(|o| **o != null_schema()).collect();
    match (kept.len(), kept.pop()) {
        (1, Some(only)) => {
            let mut out = only.clone();
            if let (Some(map), Some(d)) = (out.as_object_mut(), node.get("description")) {
                map.entry("description").or_insert(d.clone());
            }
            out
        }
        _ => node.clone(),
    }
}

/// The alternatives of an item split by [`split_by_rules`], or the item itself.
fn variants_mut(item: &mut Value) -> Vec<&mut Value> {
    if item.get("anyOf").is_some() {
        match item.get_mut("anyOf").and_then(Value::as_array_mut) {
            Some(options) => options.iter_mut().collect(),
            None => Vec::new(),
        }
    } else {
        vec![item]
    }
}

/// Makes an array schema a tuple of exactly `prefix`: llama.cpp refuses `items: false`, and
/// allows more items after `prefixItems` unless `maxItems` says otherwise.
fn into_tuple(array: &mut Value, prefix: Vec<Value>) {
    let n = prefix.len();
    if let Some(map) = array.as_object_mut() {
        map.remove("items");
        map.insert("prefixItems".to_owned(), Value::Array(prefix));
        map.insert("minItems".to_owned(), Value::from(n));
        map.insert("maxItems".to_owned(), Value::from(n));
    }
}

/// Narrows a validator's schema to the candidates it is given: their ids only, at most one
/// verdict each; on llama.cpp, one verdict per id in the given order (a tuple, as a summary's
/// files).
fn narrow_ids(dialect: SchemaDialect, schema: &mut Value, ids: &[String]) {
    if ids.is_empty() || ids.len() > MAX_NARROWED_FILES {
        return;
    }
    let Some(verdicts) = schema.pointer_mut("/properties/verdicts") else {
        return;
    };
    let n = ids.len();
    if dialect == SchemaDialect::LlamaCpp {
        let Some(item) = verdicts.get("items").cloned() else {
            return;
        };
        let prefix: Vec<Value> = ids
            .iter()
            .map(|id| {
                let mut one = item.clone();
                for variant in variants_mut(&mut one) {
                    set_property(variant, "id", serde_json::json!({ "const": id }));
                }
                one
            })
            .collect();
        into_tuple(verdicts, prefix);
    } else {
        let allowed = serde_json::json!({ "type": "string", "enum": ids });
        if let Some(item) = verdicts.get_mut("items") {
            for variant in variants_mut(item) {
                set_property(variant, "id", allowed.clone());
            }
        }
        if let Some(map) = verdicts.as_object_mut() {
            map.insert("maxItems".to_owned(), Value::from(n));
        }
    }
}

/// More changed files than this and a schema is not narrowed to them: the enumeration would
/// outgrow what it saves.
const MAX_NARROWED_FILES: usize = 64;

/// Narrows a reduced schema to the change: paths become the changed files. llama.cpp also
/// takes `prefixItems` (a tuple), so there a summary lists every changed file exactly once, in diff order
/// (the contract's "each path once", which no keyword of the other dialects can say).
fn narrow(
    protocol: ProtocolId,
    dialect: SchemaDialect,
    schema: &mut Value,
    lines: &CommentableLines,
) {
    let paths: Vec<Value> = lines
        .files
        .iter()
        .map(|f| Value::from(f.path.clone()))
        .collect();
    if paths.is_empty() || paths.len() > MAX_NARROWED_FILES {
        return;
    }
    let n = paths.len();
    let one_of = |nullable: bool| {
        let mut options = paths.clone();
        if nullable {
            options.push(Value::Null);
        }
        serde_json::json!({ "enum": options })
    };
    match protocol {
        ProtocolId::Summary => {
            let Some(files) = schema.pointer_mut("/properties/files") else {
                return;
            };
            let Some(item) = files.get("items").cloned() else {
                return;
            };
            if dialect == SchemaDialect::LlamaCpp {
                let prefix: Vec<Value> = paths
                    .iter()
                    .map(|p| {
                        let mut one = item.clone();
                        if let Some(path) = one.pointer_mut("/properties/path") {
                            *path = serde_json::json!({ "const": p });
                        }
                        one
                    })
                    .collect();
                into_tuple(files, prefix);
            } else {
                if let Some(path) = files.pointer_mut("/items/properties/path") {
                    *path = one_of(false);
                }
                if let Some(map) = files.as_object_mut() {
                    map.insert("maxItems".to_owned(), Value::from(n));
                }
            }
        }
        ProtocolId::Reviewer => {
            if let Some(item) = schema.pointer_mut("/properties/findings/items") {
                for variant in variants_mut(item) {
                    // The alternative about the whole change keeps its null file.
                    let nullable = match variant
                        .pointer("/properties/file")
                        .and_then(Value::as_object)
                    {
                        Some(file) if file.get("type").and_then(Value::as_str) == Some("null") => {
                            continue;
                        }
                        Some(file) => has_type(file, "null"),
                        None => continue,
                    };
                    set_property(variant, "file", one_of(nullable));
                }
            }
            if let Some(reviewed) = schema.pointer_mut("/properties/files_reviewed") {
                if let Some(items) = reviewed.get_mut("items") {
                    *items = one_of(false);
                }
                if let Some(map) = reviewed.as_object_mut() {
                    map.insert("maxItems".to_owned(), Value::from(n));
                }
            }
        }
        _ => {}
    }
}

/// Deeper than any contract nests; a guard against a recursive `$ref`, never reached.
const MAX_DEPTH: usize = 32;

/// One schema node in `dialect`: references inlined (strict servers differ on `$ref` beside
/// other keywords; the contracts are not recursive), unsupported keywords dropped, bounds added.
fn reduce(
    node: &Value,
    defs: &Map<String, Value>,
    dialect: SchemaDialect,
    bounds: Bounds,
    depth: usize,
) -> Value {
    let Value::Object(map) = node else {
        return node.clone();
    };
    if depth > MAX_DEPTH {
        return Value::Object(Map::new());
    }
    let mut out = Map::new();
    if let Some(target) = map
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        && let Value::Object(inlined) = reduce(target, defs, dialect, bounds, depth + 1)
    {
        out.extend(inlined);
    }
    for (key, value) in map {
        match key.as_str() {
            "$ref" | "$defs" | "$schema" | "format" | "title" => {}
            "pattern" => match dialect {
                // The only pattern the contracts use says "not blank"; llama.cpp refuses an
                // unanchored pattern, and minLength 1 is its nearest equivalent there.
                SchemaDialect::LlamaCpp => {
                    out.entry("minLength").or_insert(Value::from(1));
                }
                SchemaDialect::OpenAiStrict | SchemaDialect::Anthropic => {
                    out.insert(key.clone(), value.clone());
                }
            },
            "minLength" | "maxLength" if dialect == SchemaDialect::OpenAiStrict => {}
            "properties" => {
                let props = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), reduce(v, defs, dialect, bounds, depth + 1)))
                            .collect::<Map<_, _>>()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), reduce(value, defs, dialect, bounds, depth + 1));
            }
            "anyOf" | "oneOf" | "allOf" => {
                let options = value
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|v| reduce(v, defs, dialect, bounds, depth + 1))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Array(options));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    add_bounds(&mut out, dialect, bounds);
    Value::Object(out)
}

fn is_unit_interval(map: &Map<String, Value>) -> bool {
    map.get("type").and_then(Value::as_str) == Some("number")
        && map.get("minimum").and_then(Value::as_f64) == Some(0.0)
        && map.get("maximum").and_then(Value::as_f64) == Some(1.0)
}

fn has_type(map: &Map<String, Value>, name: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(ts)) => ts.iter().any(|t| t.as_str() == Some(name)),
        _ => false,
    }
}

fn add_bounds(map: &mut Map<String, Value>, dialect: SchemaDialect, bounds: Bounds) {
    if dialect == SchemaDialect::LlamaCpp && is_unit_interval(map) {
        // llama.cpp enforces `minimum`/`maximum` on integers only: a confidence from 0 to 1
        // becomes one of eleven values it can enforce.
        let steps: Vec<Value> = (0..=10).map(|i| Value::from(f64::from(i) / 10.0)).collect();
        map.remove("minimum");
        map.remove("maximum");
        map.insert("enum".to_owned(), Value::Array(steps));
    }
    if has_type(map, "array") {
        map.entry("maxItems")
            .or_insert(Value::from(bounds.max_items));
    }
    if has_type(map, "string")
        && !map.contains_key("enum")
        && dialect != SchemaDialect::OpenAiStrict
    {
        map.entry("maxLength")
            .or_insert(Value::from(bounds.max_length));
    }
}

#[cfg(test)]
mod tests;
