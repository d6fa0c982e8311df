//! Closed sets of lowercase names (severities, decisions, priorities…) spelled one way everywhere:
//! in envelopes, JSON contracts, canonical output and contract texts.

/// A unit enum with one exact wire name per variant.
pub trait WireName: Copy + 'static {
    /// Every value, in the order contracts list them.
    const ALL: &'static [Self];
    /// The exact wire spelling.
    fn as_str(self) -> &'static str;
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

        impl $crate::names::WireName for $ty {
            const ALL: &'static [$ty] = &[$($ty::$variant),+];
            fn as_str(self) -> &'static str {
                $ty::as_str(self)
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

#[cfg(test)]
// The macro writes `pub` items for the crate's public enums; this one is the test's own.
#[allow(unreachable_pub)]
mod tests {
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
