//! The shape of a tagged envelope as data, so one engine parses, renders and explains P1–P3.

/// One field of an envelope: its tag, what it holds and the placeholder the contract shows.
#[derive(Debug)]
pub(crate) struct Field {
    pub tag: &'static str,
    pub kind: Kind,
    /// What the contract skeleton shows as the value, per language (`en`, `zh-CN`).
    pub hint: (&'static str, &'static str),
}

#[derive(Debug)]
pub(crate) enum Kind {
    /// One line: `<TAG>value</TAG>`; the value contains no `<` or `>`, and is one of `Domain`.
    Scalar(Domain),
    /// Block form (tag lines around content lines) or single-line form.
    Text,
    /// Fields in this order, each exactly once.
    Record(&'static [Field]),
    /// Zero or more blocks of the one item field.
    List(&'static Field),
}

/// The values a scalar field accepts: what the protocol's parser checks, as data, so the decoding
/// grammar ([`super::grammar`]) can allow exactly those values. A property test generates
/// envelopes from the grammar and parses them, so a domain cannot drift from its parser.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Domain {
    /// Exactly this value (`VERSION`).
    Exactly(&'static str),
    /// A decimal integer in `min..=max`.
    Int(u32, u32),
    /// A positive decimal integer (up to `u32::MAX`) or `NONE`.
    PositiveOrNone,
    /// A repository-relative path or `NONE`.
    PathOrNone,
    /// One of a closed set of lowercase names.
    OneOf(fn() -> Vec<&'static str>),
    /// A number from 0 to 1 in plain decimal notation.
    Fraction,
    /// A non-empty value without whitespace (a login).
    Word,
    /// Any non-empty single-line value.
    Line,
}

/// The wire names of `T`, for [`Domain::OneOf`].
pub(crate) fn names<T: crate::names::WireName>() -> Vec<&'static str> {
    T::ALL.iter().map(|t| t.as_str()).collect()
}

/// A whole protocol: the root tag and its fields in order.
#[derive(Debug)]
pub(crate) struct EnvelopeSpec {
    pub root: &'static str,
    pub fields: &'static [Field],
}

impl Field {
    pub(crate) const fn scalar(
        tag: &'static str,
        domain: Domain,
        hint: (&'static str, &'static str),
    ) -> Field {
        Field {
            tag,
            kind: Kind::Scalar(domain),
            hint,
        }
    }

    pub(crate) const fn text(tag: &'static str, hint: (&'static str, &'static str)) -> Field {
        Field {
            tag,
            kind: Kind::Text,
            hint,
        }
    }

    pub(crate) const fn record(tag: &'static str, fields: &'static [Field]) -> Field {
        Field {
            tag,
            kind: Kind::Record(fields),
            hint: ("", ""),
        }
    }

    pub(crate) const fn list(tag: &'static str, item: &'static Field) -> Field {
        Field {
            tag,
            kind: Kind::List(item),
            hint: ("", ""),
        }
    }

    /// The fields a block of this field may contain, in order (`None` for scalar and text).
    pub(crate) fn children(&self) -> Option<&'static [Field]> {
        match &self.kind {
            Kind::Record(fields) => Some(fields),
            Kind::List(item) => Some(std::slice::from_ref(*item)),
            Kind::Scalar(_) | Kind::Text => None,
        }
    }
}

impl EnvelopeSpec {
    /// Every tag of the protocol with the field that defines it (root excluded). Within one
    /// protocol a tag always has the same kind, so the first definition is enough.
    pub(crate) fn tags(&self) -> Vec<&'static Field> {
        fn walk(fields: &'static [Field], out: &mut Vec<&'static Field>) {
            for f in fields {
                if !out.iter().any(|o| o.tag == f.tag) {
                    out.push(f);
                }
                if let Some(children) = f.children() {
                    walk(children, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.fields, &mut out);
        out
    }

    /// The field order of a record, as the diagnostics spell it out.
    pub(crate) fn order_list(fields: &[Field]) -> String {
        fields.iter().map(|f| f.tag).collect::<Vec<_>>().join(", ")
    }
}
