//! Decoding grammars as data: built once from a protocol's field table, rendered as GBNF for
//! grammar-capable servers (llama.cpp's `grammar` field), and sampled for property tests, so the
//! text a server is held to and the strings the tests check are one grammar.
//!
//! Only the GBNF subset llama.cpp documents is rendered: `name ::= expr` rules, double-quoted
//! literals, character classes, `( … )` groups, `|` alternatives and `{m,n}` repetition.

use std::fmt::Write as _;

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// This exact text.
    Literal(String),
    /// One character in (or, when `negated`, not in) these inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// Each in turn.
    Seq(Vec<Expr>),
    /// Exactly one of these.
    Alt(Vec<Expr>),
    /// `min..=max` repetitions.
    Repeat(Box<Expr>, u32, u32),
    /// The rule of this name.
    Rule(String),
}

impl Expr {
    pub fn lit(text: impl Into<String>) -> Expr {
        Expr::Literal(text.into())
    }

    /// Any character but these.
    pub fn none_of(chars: &str) -> Expr {
        Expr::Class {
            negated: true,
            ranges: chars.chars().map(|c| (c, c)).collect(),
        }
    }

    pub fn range(from: char, to: char) -> Expr {
        Expr::Class {
            negated: false,
            ranges: vec![(from, to)],
        }
    }

    pub fn repeat(self, min: u32, max: u32) -> Expr {
        Expr::Repeat(Box::new(self), min, max)
    }

    pub fn optional(self) -> Expr {
        self.repeat(0, 1)
    }

    pub fn rule(name: impl Into<String>) -> Expr {
        Expr::Rule(name.into())
    }
}

/// A root expression and the named rules it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    root: Expr,
    rules: Vec<(String, Expr)>,
}

impl Default for Grammar {
    fn default() -> Grammar {
        Grammar {
            root: Expr::Seq(Vec::new()),
            rules: Vec::new(),
        }
    }
}

/// A rule name GBNF accepts: lowercase letters, digits and dashes (`root` is reserved).
fn rule_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    if name == "root" {
        "root-rule".to_owned()
    } else {
        name
    }
}

impl Grammar {
    /// Defines the rule `name` (the first definition of a name wins: rules are shared by every
    /// place that uses them) and returns a reference to it.
    pub fn define(&mut self, name: &str, expr: Expr) -> Expr {
        let name = rule_name(name);
        if !self.rules.iter().any(|(n, _)| *n == name) {
            self.rules.push((name.clone(), expr));
        }
        Expr::Rule(name)
    }

    /// Whether a rule of this name is defined already.
    pub fn has(&self, name: &str) -> bool {
        let name = rule_name(name);
        self.rules.iter().any(|(n, _)| *n == name)
    }

    pub fn set_root(&mut self, root: Expr) {
        self.root = root;
    }

    fn get(&self, name: &str) -> Option<&Expr> {
        self.rules.iter().find(|(n, _)| n == name).map(|(_, e)| e)
    }

    /// The GBNF text: `root ::= …` first, then one line per rule in the order defined.
    pub fn to_gbnf(&self) -> String {
        let mut out = format!("root ::= {}\n", render(&self.root));
        for (name, expr) in &self.rules {
            let _ = writeln!(out, "{name} ::= {}", render(expr));
        }
        out
    }

    /// A string the grammar generates, chosen by `rng`: what a server held to this grammar could
    /// answer. Repetitions are drawn uniformly within their bounds.
    pub fn sample(&self, rng: &mut SplitMix64) -> String {
        let mut out = String::new();
        self.sample_into(&self.root, rng, &mut out);
        out
    }

    fn sample_into(&self, expr: &Expr, rng: &mut SplitMix64, out: &mut String) {
        match expr {
            Expr::Literal(text) => out.push_str(text),
            Expr::Class { negated, ranges } => out.push(sample_char(*negated, ranges, rng)),
            Expr::Seq(items) => {
                for item in items {
                    self.sample_into(item, rng, out);
                }
            }
            Expr::Alt(options) => {
                if !options.is_empty() {
                    let i = rng.below(options.len() as u64) as usize;
                    self.sample_into(&options[i], rng, out);
                }
            }
            Expr::Repeat(inner, min, max) => {
                let n = *min as u64 + rng.below(u64::from(max - min) + 1);
                for _ in 0..n {
                    self.sample_into(inner, rng, out);
                }
            }
            Expr::Rule(name) => {
                if let Some(body) = self.get(name) {
                    self.sample_into(body, rng, out);
                }
            }
        }
    }
}

fn render(expr: &Expr) -> String {
    match expr {
        Expr::Literal(text) => quote(text),
        Expr::Class { negated, ranges } => {
            let mut s = String::from(if *negated { "[^" } else { "[" });
            for &(a, b) in ranges {
                s.push_str(&class_char(a));
                if a != b {
                    s.push('-');
                    s.push_str(&class_char(b));
                }
            }
            s.push(']');
            s
        }
        Expr::Seq(items) if items.is_empty() => "\"\"".to_owned(),
        Expr::Seq(items) => items.iter().map(group).collect::<Vec<_>>().join(" "),
        Expr::Alt(options) => options.iter().map(group).collect::<Vec<_>>().join(" | "),
        Expr::Repeat(inner, min, max) => {
            let inner = group(inner);
            match (min, max) {
                (0, 1) => format!("{inner}?"),
                (m, n) if m == n => format!("{inner}{{{m}}}"),
                (m, n) => format!("{inner}{{{m},{n}}}"),
            }
        }
        Expr::Rule(name) => name.clone(),
    }
}

/// Sequences and alternatives inside another expression are parenthesised.
fn group(expr: &Expr) -> String {
    match expr {
        Expr::Seq(items) if items.len() > 1 => format!("({})", render(expr)),
        Expr::Alt(options) if options.len() > 1 => format!("({})", render(expr)),
        _ => render(expr),
    }
}

fn quote(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn class_char(c: char) -> String {
    match c {
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        '\\' | ']' | '[' => format!("\\{c}"),
        // llama.cpp's parser knows no `\-` or `\^`; a hex escape is read the same everywhere.
        '-' | '^' => format!("\\x{:02X}", c as u32),
        c => c.to_string(),
    }
}

/// Characters a sample may draw from a negated class: ASCII printables and whitespace plus a few
/// multi-byte ones, so tests meet what a model writes (indentation, tabs, `<` mid-line, CJK).
const SAMPLE_ALPHABET: &[char] = &[
    ' ', '\t', 'a', 'b', 'z', 'A', 'Q', 'Z', '0', '1', '9', '.', ',', ':', ';', '-', '_', '/',
    '\\', '(', ')', '[', ']', '{', '}', '`', '\'', '"', '#', '*', '|', '=', '+', '!', '?', '<',
    '>', '&', '%', '$', '@', '~', '^', 'é', '中', '文', '→', '\r', '\n',
];

fn sample_char(negated: bool, ranges: &[(char, char)], rng: &mut SplitMix64) -> char {
    let inside = |c: char| ranges.iter().any(|&(a, b)| a <= c && c <= b);
    if negated {
        let allowed: Vec<char> = SAMPLE_ALPHABET
            .iter()
            .copied()
            .filter(|&c| !inside(c))
            .collect();
        return allowed
            .get(rng.below(allowed.len().max(1) as u64) as usize)
            .copied()
            .unwrap_or('x');
    }
    let total: u64 = ranges
        .iter()
        .map(|&(a, b)| u64::from(b as u32 - a as u32) + 1)
        .sum();
    let mut pick = rng.below(total.max(1));
    for &(a, b) in ranges {
        let width = u64::from(b as u32 - a as u32) + 1;
        if pick < width {
            return char::from_u32(a as u32 + pick as u32).unwrap_or(a);
        }
        pick -= width;
    }
    'x'
}

/// A small deterministic generator for samples (SplitMix64): property tests drive it from a
/// seed, so a failing case is reproduced from its seed alone.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_subset_llama_cpp_reads() {
        let mut g = Grammar::default();
        let line = g.define(
            "LINE",
            Expr::Seq(vec![
                Expr::none_of("<\n"),
                Expr::none_of("\n").repeat(0, 20),
            ]),
        );
        g.set_root(Expr::Seq(vec![
            Expr::lit("<A>\n"),
            Expr::Seq(vec![line, Expr::lit("\n")]).repeat(1, 3),
            Expr::Alt(vec![Expr::lit("x\"y"), Expr::range('0', '9')]),
            Expr::lit("!").optional(),
        ]));
        assert_eq!(
            g.to_gbnf(),
            "root ::= \"<A>\\n\" (line \"\\n\"){1,3} (\"x\\\"y\" | [0-9]) \"!\"?\nline ::= [^<\\n] [^\\n]{0,20}\n"
        );
    }

    #[test]
    fn samples_stay_inside_their_classes_and_bounds() {
        let mut g = Grammar::default();
        g.set_root(Expr::Seq(vec![
            Expr::range('1', '9'),
            Expr::none_of("<>\n").repeat(2, 4),
        ]));
        let mut rng = SplitMix64::new(7);
        for _ in 0..200 {
            let s = g.sample(&mut rng);
            let chars: Vec<char> = s.chars().collect();
            assert!(('1'..='9').contains(&chars[0]), "{s:?}");
            assert!((3..=5).contains(&chars.len()), "{s:?}");
            assert!(chars[1..].iter().all(|c| !"<>\n".contains(*c)), "{s:?}");
        }
    }
}
