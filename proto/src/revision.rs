//! The one syntax rule for a revision a person types (a SHA, a branch, a tag, `HEAD`, `origin/main`,
//! `feature~1`): the API refuses what breaks it with a 400, and the git source refuses it again
//! before any process runs, so both always agree.
//!
//! A revision is a *name* followed by an optional *suffix* of `~n`/`^n` steps (`n` optional).
//! The name uses letters, digits, `.`, `_`, `-`, `+` and `/`, and follows git's rules for ref
//! names (no `//`, no component starting with `.` or ending in `.lock`, no trailing `/` or `.`).
//! Everything git would read as an option (a leading `-`), as several commits (`a..b`), as this
//! server's own history (`@{…}`, a bare `@`), as a path inside a commit (`:`), or as a pattern
//! (`*`, `?`, `[`) is refused, as are whitespace, control characters, `\` and other peeling
//! syntax (`^{commit}`).

use std::fmt;

/// The longest revision accepted, in bytes.
pub const MAX_BYTES: usize = 255;

/// A revision that passed [`Revision::parse`]: its name and its `~`/`^` suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revision<'a> {
    text: &'a str,
    name: &'a str,
    suffix: &'a str,
}

impl<'a> Revision<'a> {
    /// Checks `text` against the rule in the module documentation.
    pub fn parse(text: &'a str) -> Result<Revision<'a>, InvalidRevision> {
        let refuse = |reason: &'static str| InvalidRevision::new(text, reason);
        if text.is_empty() {
            return Err(refuse("is empty"));
        }
        if text.len() > MAX_BYTES {
            return Err(refuse("is longer than 255 bytes"));
        }
        if text.starts_with('-') {
            return Err(refuse("starts with `-`, which git would read as an option"));
        }
        if text.chars().any(char::is_control) {
            return Err(refuse("contains control characters"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(refuse("contains whitespace"));
        }
        if text.contains("..") {
            return Err(refuse("is a range (`..`), not one commit"));
        }
        if text.contains('@') {
            return Err(refuse(
                "contains `@` (`@` and `@{…}` name this server's copy, not the repository)",
            ));
        }
        if text.contains(':') {
            return Err(refuse("contains `:` (a path inside a commit or a refspec)"));
        }
        if text.contains('\\') {
            return Err(refuse("contains `\\`"));
        }
        if text.contains(['*', '?', '[']) {
            return Err(refuse("contains a pattern character (`*`, `?` or `[`)"));
        }
        let name_end = text.find(['~', '^']).unwrap_or(text.len());
        let (name, suffix) = text.split_at(name_end);
        if !name.bytes().all(is_name_byte) {
            return Err(refuse(
                "contains a character other than letters, digits, `.`, `_`, `-`, `+`, `/` and a `~n`/`^n` suffix",
            ));
        }
        if name.is_empty() {
            return Err(refuse("has no name before its `~`/`^` suffix"));
        }
        if let Some(reason) = ref_name_problem(name) {
            return Err(refuse(reason));
        }
        if !is_ancestry_suffix(suffix) {
            return Err(refuse(
                "has a suffix other than `~n` and `^n` steps (`^{…}` and `^!` are not accepted)",
            ));
        }
        Ok(Revision { text, name, suffix })
    }

    /// The revision as typed.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// What comes before the suffix: `feature` in `feature~1`.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The `~n`/`^n` steps after the name, possibly empty: `~1` in `feature~1`.
    pub fn suffix(&self) -> &'a str {
        self.suffix
    }

    /// Whether the name is `HEAD`: the repository's default branch, not any branch of that name.
    pub fn names_head(&self) -> bool {
        self.name == "HEAD"
    }

    /// Whether the name could be a (possibly abbreviated) commit id: 4 to 64 hex digits.
    pub fn names_sha(&self) -> bool {
        (4..=64).contains(&self.name.len()) && self.name.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// Whether the revision is a full commit id (40 hex digits, or 64 in SHA-256 repositories)
    /// with no suffix: it names the same commit forever.
    pub fn is_full_sha(&self) -> bool {
        self.suffix.is_empty() && is_full_sha(self.name)
    }
}

/// 40 hex digits (SHA-1 repositories) or 64 (SHA-256 repositories).
pub fn is_full_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why a typed revision was refused; its text names the revision and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRevision {
    /// The revision, shortened and with control characters escaped, fit to show.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl InvalidRevision {
    fn new(text: &str, reason: &'static str) -> InvalidRevision {
        InvalidRevision {
            shown: shown(text),
            reason,
        }
    }
}

impl fmt::Display for InvalidRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "revision `{}` {}; name a commit SHA, a branch or a tag, optionally followed by `~n` or `^n` (such as `HEAD~1`)",
            self.shown, self.reason
        )
    }
}

impl std::error::Error for InvalidRevision {}

/// At most 80 characters of `text`, control characters escaped so the message stays one line.
fn shown(text: &str) -> String {
    const MAX_CHARS: usize = 80;
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == MAX_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'/')
}

/// Git's rules for ref names (`git check-ref-format`) that the character set leaves open.
fn ref_name_problem(name: &str) -> Option<&'static str> {
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Some("is not a ref name git allows (an empty `/`-separated component)");
    }
    if name.ends_with('.') {
        return Some("is not a ref name git allows (it ends with `.`)");
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Some("is not a ref name git allows (a component starts with `.`)");
        }
        if component.ends_with(".lock") {
            return Some("is not a ref name git allows (a component ends with `.lock`)");
        }
    }
    None
}

/// `~`, `^`, each optionally followed by digits, any number of times.
fn is_ancestry_suffix(suffix: &str) -> bool {
    let mut bytes = suffix.bytes().peekable();
    while let Some(b) = bytes.next() {
        if !matches!(b, b'~' | b'^') {
            return false;
        }
        while bytes.next_if(u8::is_ascii_digit).is_some() {}
    }
    true
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Accepted revisions: (as typed, name, suffix).
    const ACCEPTED: &[(&str, &str, &str)] = &[
        ("main", "main", ""),
        ("HEAD", "HEAD", ""),
        ("HEAD~2", "HEAD", "~2"),
        ("HEAD^", "HEAD", "^"),
        ("HEAD^2~3^", "HEAD", "^2~3^"),
        ("feature~1", "feature", "~1"),
        ("main~", "main", "~"),
        ("origin/main", "origin/main", ""),
        ("refs/pull/12/head", "refs/pull/12/head", ""),
        ("feature/coupons", "feature/coupons", ""),
        ("release/1.2", "release/1.2", ""),
        ("v1.0.0-rc_1", "v1.0.0-rc_1", ""),
        ("v1.0.0+build.5", "v1.0.0+build.5", ""),
        ("0123abc", "0123abc", ""),
        ("0123abc~1", "0123abc", "~1"),
        (
            "0123456789abcdef0123456789abcdef01234567",
            "0123456789abcdef0123456789abcdef01234567",
            "",
        ),
    ];

    /// Refused revisions: (as typed, a word the message must contain).
    const REFUSED: &[(&str, &str)] = &[
        ("", "empty"),
        ("-x", "option"),
        ("--upload-pack=touch /tmp/x", "option"),
        ("--output=x", "option"),
        ("a..b", "range"),
        ("a...b", "range"),
        ("main@{1}", "`@`"),
        ("@", "`@`"),
        ("@{-1}", "`@`"),
        ("main:secret.txt", "`:`"),
        (":/fix", "`:`"),
        ("a b", "whitespace"),
        ("main\n", "control"),
        ("main\t", "control"),
        ("a\u{7f}", "control"),
        ("a\\b", "`\\`"),
        ("feat*", "pattern"),
        ("feat?", "pattern"),
        ("feat[1]", "pattern"),
        ("v1.0^{commit}", "suffix"),
        ("HEAD^!", "suffix"),
        ("HEAD^-", "suffix"),
        ("main~1x", "suffix"),
        ("~1", "no name"),
        ("^", "no name"),
        ("/main", "ref name"),
        ("main/", "ref name"),
        ("a//b", "ref name"),
        ("main.", "ref name"),
        (".hidden", "ref name"),
        ("a/.b", "ref name"),
        ("main.lock", "ref name"),
        ("déjà", "character"),
        ("a$b", "character"),
        ("a'b", "character"),
    ];

    #[test]
    fn the_table_is_decided_as_written() {
        for &(text, name, suffix) in ACCEPTED {
            let revision =
                Revision::parse(text).unwrap_or_else(|e| panic!("{text:?} refused: {e}"));
            assert_eq!(
                (revision.name(), revision.suffix()),
                (name, suffix),
                "{text}"
            );
            assert_eq!(revision.as_str(), text);
        }
        for &(text, word) in REFUSED {
            let err = Revision::parse(text).expect_err(text);
            let message = err.to_string();
            assert!(message.contains(word), "{text:?}: {message}");
            assert!(message.contains("name a commit SHA"), "{message}");
        }
        let long = "a".repeat(MAX_BYTES + 1);
        assert!(Revision::parse(&long[..MAX_BYTES]).is_ok());
        let err = Revision::parse(&long).unwrap_err();
        assert!(err.to_string().contains("longer than 255"), "{err}");
        assert!(err.shown.ends_with('…') && err.shown.chars().count() == 81);
    }

    #[test]
    fn refusals_name_the_revision_on_one_line() {
        let err = Revision::parse("main\nrm -rf /").unwrap_err();
        assert_eq!(err.shown, "main\\nrm -rf /");
        assert!(!err.to_string().contains('\n'));
        let err = Revision::parse("--upload-pack=x").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("revision `--upload-pack=x` starts with `-`"),
            "{err}"
        );
    }

    #[test]
    fn heads_and_shas_are_recognised() {
        fn parse(text: &str) -> Revision<'_> {
            Revision::parse(text).unwrap()
        }
        assert!(parse("HEAD~1").names_head());
        assert!(!parse("HEADS").names_head());
        assert!(!parse("refs/heads/HEAD").names_head());
        assert!(parse("abcd").names_sha());
        assert!(!parse("abc").names_sha());
        assert!(!parse("main").names_sha());
        assert!(parse(&"a".repeat(40)).is_full_sha());
        assert!(parse(&"0".repeat(64)).is_full_sha());
        assert!(!parse(&format!("{}~1", "a".repeat(40))).is_full_sha());
        assert!(!parse(&"a".repeat(41)).is_full_sha());
    }

    proptest! {
        #[test]
        fn option_like_ranges_and_whitespace_are_always_refused(
            before in "[ -~]{0,20}",
            after in "[ -~]{0,20}",
            space in prop::sample::select(vec![" ", "\t", "\n", "\r", "\u{a0}", "\u{2003}"]),
        ) {
            let option_like = format!("-{after}");
            prop_assert!(Revision::parse(&option_like).is_err());
            let range = format!("{before}..{after}");
            prop_assert!(Revision::parse(&range).is_err());
            let spaced = format!("{before}{space}{after}");
            prop_assert!(Revision::parse(&spaced).is_err());
        }

        #[test]
        fn every_commit_id_is_accepted(
            sha in "[0-9a-fA-F]{40}|[0-9a-f]{64}",
            steps in "([~^][0-9]{0,2}){0,3}",
        ) {
            let revision = Revision::parse(&sha).unwrap();
            prop_assert!(revision.is_full_sha() && revision.names_sha());
            let walked = format!("{sha}{steps}");
            let revision = Revision::parse(&walked).unwrap();
            prop_assert_eq!(revision.name(), sha.as_str());
            prop_assert_eq!(revision.suffix(), steps.as_str());
        }

        #[test]
        fn whatever_is_accepted_is_safe_to_hand_to_git(
            text in "[a-f0-9HEAD./_+~^@:{}*?\\\\ \t-]{0,16}|\\PC{0,40}",
        ) {
            if let Ok(revision) = Revision::parse(&text) {
                prop_assert!(!text.starts_with('-'));
                prop_assert!(!text.contains("..") && !text.contains(':') && !text.contains('@'));
                prop_assert!(text.bytes().all(|b| is_name_byte(b) || matches!(b, b'~' | b'^')));
                prop_assert_eq!(format!("{}{}", revision.name(), revision.suffix()), text);
            }
        }
    }
}
