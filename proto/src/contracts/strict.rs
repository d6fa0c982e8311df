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

/// Implements `Deserialize` (from a JSON string only) and `Serialize` for a unit-only enum, plus
/// `ALL` and `as_str`. The `JsonSchema` derive must use the same names; a test checks it.
macro_rules! string_enum {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in the order the schema lists them.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The exact wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Names;
                impl<'de> ::serde::de::Visitor<'de> for Names {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(stringify!($ty))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        match v {
                            $($name => Ok($ty::$variant),)+
                            _ => Err(E::unknown_variant(v, &[$($name),+])),
                        }
                    }
                }
                d.deserialize_str(Names)
            }
        }
    };
}
pub(crate) use string_enum;

/// Schema-only stand-in for an `Option<T>` field that must be present (`null` when there is no
/// value): `#[schemars(with = "NullOr<T>")]` plus `#[serde(deserialize_with = "Option::deserialize")]`.
/// schemars would otherwise leave an `Option` field out of `required`, and serde would accept it
/// missing.
#[derive(Debug)]
pub struct NullOr<T>(PhantomData<T>);

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

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Level {
        Low,
        High,
    }
    string_enum!(Level { Low => "low", High => "high" });

    #[test]
    fn enums_only_from_strings() {
        assert_eq!(
            serde_json::from_str::<Level>("\"high\"").unwrap(),
            Level::High
        );
        assert!(serde_json::from_str::<Level>(r#"{"high": null}"#).is_err());
        assert!(serde_json::from_str::<Level>("\"High\"").is_err());
        assert_eq!(serde_json::to_string(&Level::Low).unwrap(), "\"low\"");
        assert_eq!(Level::ALL, [Level::Low, Level::High]);
    }
}
