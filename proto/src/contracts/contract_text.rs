//! The P4 contract as a prompt shows it: the rules, the generated JSON Schema and one example.
//!
//! The same text goes into the stage's system message and, unchanged, into the isolated repair
//! prompt (SPEC E3), so the model is always held to exactly what it was shown. Prose is in the
//! configured language (P6); keys, enumerated values and the schema itself never are.

use serde_json::Value;

use crate::Language;

use super::JsonContract;

/// The full contract text of `T` in `language`.
pub fn render<T: JsonContract>(language: Language) -> String {
    let schema = schema_json(T::schema());
    let example = serde_json::to_string_pretty(&T::example(language)).unwrap_or_default();
    let name = T::PROTOCOL.as_str();
    let mut out = String::new();
    match language {
        Language::En => {
            out.push_str(&format!("# Output contract: {name} (one JSON object)\n\n"));
            out.push_str(
                "Reply with exactly one JSON object that conforms to the JSON Schema below.\n\n",
            );
            out.push_str("Rules:\n");
            for rule in COMMON_EN.iter().chain(T::rules(language)) {
                out.push_str("- ");
                out.push_str(rule);
                out.push('\n');
            }
            out.push_str("\nJSON Schema:\n```json\n");
            out.push_str(&schema);
            out.push_str(
                "\n```\n\nExample of the shape (the values only illustrate it):\n```json\n",
            );
        }
        Language::ZhCn => {
            out.push_str(&format!("# 输出约定：{name}（一个 JSON 对象）\n\n"));
            out.push_str("只回复一个符合下方 JSON Schema 的 JSON 对象。\n\n");
            out.push_str("规则：\n");
            for rule in COMMON_ZH.iter().chain(T::rules(language)) {
                out.push_str("- ");
                out.push_str(rule);
                out.push('\n');
            }
            out.push_str("\nJSON Schema：\n```json\n");
            out.push_str(&schema);
            out.push_str("\n```\n\n结构示例（取值仅作示意）：\n```json\n");
        }
    }
    out.push_str(&example);
    out.push_str("\n```\n");
    out
}

const COMMON_EN: &[&str] = &[
    "Send the object and nothing else: either the plain object, or the object inside one ```json fence. No text before or after it: no heading, no explanation, no second object.",
    "Include every property listed in \"required\". Where the schema allows null and there is no value, write null. Add no other properties.",
    "Write enumerated values exactly as listed, in lowercase. JSON keys and enumerated values are never translated.",
    "Text values must not be empty. Write natural-language text in English.",
];

const COMMON_ZH: &[&str] = &[
    "只输出这个对象，不要输出其他任何内容：可以直接输出对象，也可以把对象放在一个 ```json 代码块里。对象前后不能有任何文字：不要标题、不要解释、不要第二个对象。",
    "\"required\" 中列出的每个属性都必须出现。schema 允许 null 且没有取值时，写 null。不要添加其他属性。",
    "枚举值必须与列出的值完全一致（小写）。JSON 键名和枚举值一律不翻译。",
    "文本值不能为空。自然语言内容用简体中文书写。",
];

/// A schema as pretty JSON in reading order: `$schema`, `title`, `description`, `type`, then the
/// constraints, properties in declaration order (the order of `required`), `$defs` last.
/// `serde_json::Map` sorts keys, which would put `$defs` first and `confidence` before
/// `severity`; models read the contract top-down, so the order is part of the text.
pub fn schema_json(schema: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, schema, 0, Shape::Schema);
    out
}

/// What a JSON value is inside a schema, which decides its key order.
#[derive(Clone, Copy)]
enum Shape<'a> {
    Schema,
    /// A `properties` map, ordered by its sibling `required` list.
    Properties(&'a [Value]),
    /// A `$defs` map: names sorted.
    Definitions,
    /// Anything else (enum values, defaults): keys sorted.
    Plain,
}

const KEY_ORDER: &[&str] = &[
    "$schema",
    "title",
    "description",
    "$ref",
    "type",
    "enum",
    "format",
    "minimum",
    "maximum",
    "pattern",
    "anyOf",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "$defs",
];

/// The keys of a map inside a schema in reading order (see [`schema_json`]).
fn ordered_keys<'m>(map: &'m serde_json::Map<String, Value>, shape: Shape<'_>) -> Vec<&'m String> {
    let mut keys: Vec<&String> = map.keys().collect();
    match shape {
        Shape::Schema => keys.sort_by_key(|k| {
            KEY_ORDER
                .iter()
                .position(|o| o == k)
                .unwrap_or(KEY_ORDER.len())
        }),
        Shape::Properties(required) => keys.sort_by_key(|k| {
            required
                .iter()
                .position(|r| r.as_str() == Some(k.as_str()))
                .unwrap_or(required.len())
        }),
        Shape::Definitions | Shape::Plain => {}
    }
    keys
}

/// What the value under `key` of a `shape` map is.
fn child_shape<'m>(
    map: &'m serde_json::Map<String, Value>,
    shape: Shape<'_>,
    key: &str,
) -> Shape<'m> {
    match (shape, key) {
        (Shape::Schema, "properties") => Shape::Properties(
            map.get("required")
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice),
        ),
        (Shape::Schema, "$defs") => Shape::Definitions,
        (Shape::Schema, "items" | "anyOf" | "oneOf" | "allOf" | "prefixItems")
        | (Shape::Properties(_) | Shape::Definitions, _) => Shape::Schema,
        _ => Shape::Plain,
    }
}

/// What the items of an array in a `shape` position are.
fn item_shape(shape: Shape<'_>) -> Shape<'static> {
    match shape {
        Shape::Schema => Shape::Schema,
        _ => Shape::Plain,
    }
}

/// A schema that serialises in reading order, properties in declaration order. A decoding
/// constraint is sent so: grammar-based servers (llama.cpp) make the model write properties in
/// the order the schema lists them, and a sorted map would have it write `confidence` before
/// `severity`, a verdict's `severity` before the `verdict` it depends on.
#[derive(Debug, Clone, Copy)]
pub struct InReadingOrder<'a>(pub &'a Value);

impl serde::Serialize for InReadingOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Shaped(self.0, Shape::Schema).serialize(serializer)
    }
}

struct Shaped<'a>(&'a Value, Shape<'a>);

impl serde::Serialize for Shaped<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        let Shaped(value, shape) = *self;
        match value {
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for key in ordered_keys(map, shape) {
                    out.serialize_entry(
                        key,
                        &Shaped(&map[key.as_str()], child_shape(map, shape, key)),
                    )?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Shaped(item, item_shape(shape)))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

fn write_value(out: &mut String, value: &Value, indent: usize, shape: Shape<'_>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let keys = ordered_keys(map, shape);
            out.push_str("{\n");
            for (i, key) in keys.iter().enumerate() {
                push_indent(out, indent + 1);
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push_str(": ");
                write_value(
                    out,
                    &map[key.as_str()],
                    indent + 1,
                    child_shape(map, shape, key),
                );
                if i + 1 < keys.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            push_indent(out, indent);
            out.push('}');
        }
        Value::Array(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                push_indent(out, indent + 1);
                write_value(out, item, indent + 1, item_shape(shape));
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            push_indent(out, indent);
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn push_indent(out: &mut String, levels: usize) {
    for _ in 0..levels {
        out.push_str("  ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_text_is_the_same_json_in_reading_order() {
        let schema = super::super::ReviewerReport::schema();
        let text = schema_json(schema);
        assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), schema);
        let severity = text.find("\"severity\": {").unwrap();
        let confidence = text.find("\"confidence\": {").unwrap();
        assert!(severity < confidence, "{text}");
        assert!(text.find("\"$schema\"").unwrap() < text.find("\"$defs\"").unwrap());
    }

    #[test]
    fn a_schema_in_reading_order_serialises_to_the_same_json_with_properties_as_declared() {
        let schema = super::super::ValidatorReport::schema();
        let text = serde_json::to_string(&InReadingOrder(schema)).unwrap();
        assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), schema);
        let at = |key: &str| text.find(&format!("\"{key}\":{{")).unwrap();
        assert!(
            at("id") < at("verdict") && at("verdict") < at("severity"),
            "{text}"
        );
        assert!(at("severity") < at("reason"), "{text}");
    }
}
