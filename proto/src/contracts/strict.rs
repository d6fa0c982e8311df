//! serde adapters that make typed parsing accept exactly what the schema accepts.
//!
//! serde_json's derived `Deserialize` is more lenient than JSON Schema: it builds a struct from an
//! *array* of its fields (`[true, "why"]`), a unit enum from a one-key *object*
//! (`{"critical": null}`), and an `Option` field from nothing at all. The fast path would then
//! accept responses the schema walker rejects. These adapters close each gap, so "valid" means
//! the same on both paths (a test runs both over every case).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Parses `text` as one `T` that must be written as a JSON object, with only whitespace after it.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = (&mut de).deserialize_map(ObjectVisitor::<T>(PhantomData))?;
    de.end()?;
    Ok(value)
}

/// Converts a value that must be an object into `T`, with the same strictness as [`from_str`].
pub(crate) fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    value.deserialize_map(ObjectVisitor::<T>(PhantomData))
}

/// `deserialize_with` for `Vec<T>` fields whose elements are objects.
pub(crate) fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Elements<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Elements<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of objects")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            while let Some(element) = seq.next_element_seed(ObjectSeed::<T>(PhantomData))? {
                out.push(element);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_seq(Elements(PhantomData))
}

struct ObjectSeed<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for ObjectSeed<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_map(ObjectVisitor(PhantomData))
    }
}

/// Accepts only a JSON object and hands its entries to `T`'s derived implementation.
struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

/// Schema-only stand-in for an `Option<T>` field that must be present (`null` when there is no
/// value): `#[schemars(with = "NullOr<T>")]` plus `#[serde(deserialize_with = "Option::deserialize")]`.
/// schemars would otherwise leave an `Option` field out of `required`, and serde would accept it
/// missing.
#[derive(Debug)]
pub(crate) struct NullOr<T>(PhantomData<T>);

impl<T: JsonSchema> JsonSchema for NullOr<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        <Option<T>>::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        <Option<T>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: bool,
        #[serde(deserialize_with = "objects")]
        items: Vec<Item>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        b: u8,
    }

    #[test]
    fn structs_only_from_objects() {
        assert!(from_str::<Pair>(r#"{"a": true, "items": [{"b": 1}]}"#).is_ok());
        // serde's derive alone accepts a struct written as an array.
        assert!(serde_json::from_str::<Item>("[1]").is_ok());
        assert!(from_str::<Pair>(r#"[true, []]"#).is_err());
        assert!(from_str::<Pair>(r#"{"a": true, "items": [[1]]}"#).is_err());
        assert!(from_str::<Pair>(r#"{"a": true, "items": []} x"#).is_err());
        let v: Value = serde_json::json!({"a": false, "items": []});
        assert!(from_value::<Pair>(v).is_ok());
    }
}
