//! Secret redaction and safe previews: model output and provider errors are shown to operators
//! (outcomes, events, transcripts) only after passing through here (SPEC E4, O4, R3).

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Replaces credential-shaped substrings: bearer tokens, provider and cloud keys (OpenAI `sk-`,
/// Anthropic `sk-ant-`, GitHub `ghp_`/`gho_`/`ghs_`/`github_pat_`, Slack `xox?-`, AWS `AKIA`),
/// `key=value` / `"key": "value"` pairs whose key names a secret, and PEM private-key blocks.
/// Deliberately over-eager: a false positive costs a few characters of preview, a miss leaks a
/// credential.
pub fn redact(text: &str) -> String {
    // Each pass runs only where its triggers occur: most text (diffs, prompts, answers) has
    // none, and a transcript's redaction was a sixth of a worker's CPU when every pass rebuilt
    // every line (decision 172).
    let mut out = Cow::Borrowed(text);
    if memchr::memmem::find(out.as_bytes(), PEM_BEGIN.as_bytes()).is_some() {
        out = Cow::Owned(redact_pem_blocks(&out));
    }
    if may_match(&TOKEN_TRIGGERS, &out) {
        out = Cow::Owned(redact_prefixed_tokens(&out));
    }
    if may_match(&KEY_TRIGGERS, &out) {
        out = Cow::Owned(redact_key_values(&out));
    }
    out.into_owned()
}

/// The start of a PEM block; without it [`redact_pem_blocks`] changes nothing.
const PEM_BEGIN: &str = "-----BEGIN ";

/// What a word must start with, or follow, to be redacted by [`redact_prefixed_tokens`], matched
/// ignoring ASCII case: a superset of what it redacts, so text without any is left as it is.
static TOKEN_TRIGGERS: LazyLock<Option<AhoCorasick>> =
    LazyLock::new(|| triggers(TOKEN_PREFIXES.iter().chain(AUTH_SCHEMES.iter())));

/// The secret key names [`redact_line`] looks for, matched ignoring ASCII case as it does.
static KEY_TRIGGERS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| triggers(SECRET_KEYS.iter()));

fn triggers<'a>(patterns: impl Iterator<Item = &'a &'static str>) -> Option<AhoCorasick> {
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(patterns)
        .ok()
}

/// Whether `text` holds a trigger; `true` when the automaton could not be built, so a pass is
/// only ever skipped when it provably changes nothing.
fn may_match(triggers: &Option<AhoCorasick>, text: &str) -> bool {
    triggers.as_ref().is_none_or(|t| t.is_match(text))
}

/// Hides the credentials of every `scheme://userinfo@host` URL in `text`: `user:password@`
/// becomes `user:[REDACTED]@` (the user name helps an operator and is not a secret), and a
/// userinfo without a password becomes `[REDACTED]@`, because HTTPS git remotes put tokens there
/// (`https://ghp_…@github.com`). scp-like remotes (`git@host:path`) have no `://` and name a
/// user, not a secret: they are left alone.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        out.push_str(&rest[..authority_start]);
        let tail = &rest[authority_start..];
        let authority_len = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_len];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                if let Some((user, _)) = authority[..userinfo_end].split_once(':') {
                    out.push_str(user);
                    out.push(':');
                }
                out.push_str(REDACTED);
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_len..];
    }
    out.push_str(rest);
    out
}

/// A single-line-safe preview for humans: secrets redacted, control characters (except newline
/// and tab) replaced by spaces, at most `max_chars` characters with an ellipsis when cut.
pub fn safe_preview(text: &str, max_chars: usize) -> String {
    let redacted = redact(text);
    let mut out = String::with_capacity(redacted.len().min(max_chars * 4));
    for (n, c) in redacted.chars().enumerate() {
        if n == max_chars {
            out.push('…');
            break;
        }
        out.push(if c.is_control() && c != '\n' && c != '\t' {
            ' '
        } else {
            c
        });
    }
    out
}

fn redact_pem_blocks(text: &str) -> String {
    const BEGIN: &str = PEM_BEGIN;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let header_end = rest[start..].find("-----\n").map(|i| start + i);
        let is_private = rest[start..]
            .lines()
            .next()
            .is_some_and(|l| l.contains("PRIVATE KEY"));
        match (header_end, is_private) {
            (Some(_), true) => {
                out.push_str(&rest[..start]);
                out.push_str(REDACTED);
                let tail = &rest[start..];
                let end = tail
                    .find("-----END ")
                    .and_then(|e| tail[e + 9..].find("-----").map(|f| e + 9 + f + 5))
                    .unwrap_or(tail.len());
                rest = &tail[end..];
            }
            _ => {
                out.push_str(&rest[..start + BEGIN.len()]);
                rest = &rest[start + BEGIN.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

const TOKEN_PREFIXES: [&str; 11] = [
    "sk-ant-",
    "sk-proj-",
    "sk-",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "AKIA",
];

/// The words after which the next word is a credential (`Authorization: Bearer …`).
const AUTH_SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '+' | '=')
}

/// Redacts words that start with a known token prefix and are long enough to be real, and the
/// word after `Bearer` / `Basic` / `token`.
fn redact_prefixed_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last_word = "";
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        let rest = &text[i..];
        let word_len = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        if word_len == 0 {
            out.push(c);
            i += c.len_utf8();
            if c != ' ' {
                last_word = "";
            }
            continue;
        }
        let word = &rest[..word_len];
        let prefixed = TOKEN_PREFIXES
            .iter()
            .any(|p| word.starts_with(p) && word.len() >= p.len() + 12);
        let after_scheme = AUTH_SCHEMES
            .iter()
            .any(|s| last_word.eq_ignore_ascii_case(s))
            && word.len() >= 8;
        out.push_str(if prefixed || after_scheme {
            REDACTED
        } else {
            word
        });
        last_word = word;
        i += word_len;
    }
    out
}

/// Identifier suffixes that name a secret. Matched at the end of an identifier only, so
/// `OPENAI_API_KEY` and `access_token` match but `max_tokens` does not.
const SECRET_KEYS: [&str; 11] = [
    "api_key",
    "apikey",
    "api-key",
    "secret",
    "secret_key",
    "password",
    "passwd",
    "token",
    "authorization",
    "private_key",
    "access_key",
];

/// Redacts the value in `key=value`, `key: value` and `"key": "value"` where the key names a
/// secret (case-insensitive).
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if may_match(&KEY_TRIGGERS, line) {
            out.push_str(&redact_line(line));
        } else {
            out.push_str(line);
        }
    }
    out
}

fn redact_line(line: &str) -> String {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `line`.
    let lower = line.to_ascii_lowercase();
    let b = line.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    let mut out = String::with_capacity(line.len());
    let (mut copied, mut from) = (0, 0);
    while let Some(key_end) = SECRET_KEYS
        .iter()
        .filter_map(|k| lower[from..].find(k).map(|p| from + p + k.len()))
        .min()
    {
        from = key_end;
        if key_end < b.len() && ident(b[key_end]) {
            continue;
        }
        let mut k = key_end;
        while k < b.len() && matches!(b[k], b'"' | b'\'' | b' ' | b'\t') {
            k += 1;
        }
        if k >= b.len() || !matches!(b[k], b'=' | b':') {
            continue;
        }
        k += 1;
        while k < b.len() && matches!(b[k], b'"' | b'\'' | b' ' | b'\t') {
            k += 1;
        }
        let start = k;
        while k < b.len()
            && !matches!(
                b[k],
                b'"' | b'\'' | b',' | b'}' | b';' | b' ' | b'\t' | b'\r' | b'\n'
            )
        {
            k += 1;
        }
        if k > start && !line[start..].starts_with(REDACTED) {
            out.push_str(&line[copied..start]);
            out.push_str(REDACTED);
            copied = k;
        }
        from = k.max(from);
    }
    out.push_str(&line[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [`redact`] without its prefilters: every pass over every line.
    fn redact_every_pass(text: &str) -> String {
        let out = redact_prefixed_tokens(&redact_pem_blocks(text));
        out.split_inclusive('\n').map(redact_line).collect()
    }

    /// Text made of the fragments the passes react to, in any order and case.
    fn risky_text() -> impl Strategy<Value = String> {
        let fragments = vec![
            "sk-",
            "sk-ant-",
            "ghp_",
            "AKIA",
            "xoxb-",
            "Bearer ",
            "basic ",
            "TOKEN",
            "token",
            "Api_Key",
            "password",
            "max_tokens",
            "=",
            ": ",
            "\"",
            "'",
            " ",
            "\t",
            "\n",
            ",",
            "-----BEGIN ",
            "RSA PRIVATE KEY-----\n",
            "CERTIFICATE-----\n",
            "-----END ",
            "-----",
            "abcdefghijklmnop",
            "0123456789",
            "x",
            "é",
            "[REDACTED]",
            "{",
            "}",
        ];
        prop::collection::vec(prop::sample::select(fragments), 0..48).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn skipping_passes_without_triggers_changes_nothing(text in risky_text()) {
            prop_assert_eq!(redact(&text), redact_every_pass(&text));
        }

        #[test]
        fn arbitrary_text_redacts_as_every_pass_does(text in any::<String>()) {
            prop_assert_eq!(redact(&text), redact_every_pass(&text));
        }
    }

    #[test]
    fn redacts_known_token_shapes() {
        let text = "key sk-proj-abcdefghijklmnop1234 and ghp_0123456789abcdefABCDEF and AKIAIOSFODNN7EXAMPLE";
        let r = redact(text);
        assert!(!r.contains("abcdefghijklmnop"), "{r}");
        assert!(!r.contains("0123456789abcdef"), "{r}");
        assert!(!r.contains("IOSFODNN7"), "{r}");
        assert!(r.starts_with("key [REDACTED] and"), "{r}");
    }

    #[test]
    fn short_prefixes_in_words_are_kept() {
        assert_eq!(
            redact("task-runner uses sk-1 and risk-free"),
            "task-runner uses sk-1 and risk-free"
        );
    }

    #[test]
    fn redacts_bearer_and_key_values() {
        let r = redact(
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload\nOPENAI_API_KEY=abc123secret\n{\"api_key\": \"zzz-top\", \"model\": \"m\"}",
        );
        assert!(!r.contains("eyJhbGci"), "{r}");
        assert!(!r.contains("abc123secret"), "{r}");
        assert!(!r.contains("zzz-top"), "{r}");
        assert!(r.contains("\"model\": \"m\""), "{r}");
    }

    #[test]
    fn usage_counters_are_not_secrets() {
        let usage = "{\"max_tokens\": 512, \"usage\": {\"input_tokens\": 120}}";
        assert_eq!(redact(usage), usage);
    }

    #[test]
    fn redacts_private_key_blocks() {
        let r = redact(
            "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nafter",
        );
        assert_eq!(r, "before\n[REDACTED]\nafter");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        assert_eq!(redact(cert), cert);
    }

    #[test]
    fn url_credentials_are_hidden_user_names_kept() {
        assert_eq!(
            redact_urls(
                "fetch https://bot:s3cret@git.example.com/a.git failed; amqp://guest:guest@mq:5672/%2f"
            ),
            "fetch https://bot:[REDACTED]@git.example.com/a.git failed; amqp://guest:[REDACTED]@mq:5672/%2f"
        );
        assert_eq!(
            redact_urls("https://ghp_token@github.com/o/r"),
            "https://[REDACTED]@github.com/o/r"
        );
        assert_eq!(
            redact_urls("git@github.com:o/r.git and https://host/x"),
            "git@github.com:o/r.git and https://host/x"
        );
    }

    #[test]
    fn preview_strips_controls_and_truncates() {
        assert_eq!(safe_preview("a\u{7}b\u{1b}[31mc", 100), "a b [31mc");
        assert_eq!(safe_preview("abcdef", 3), "abc…");
        assert_eq!(safe_preview("line\nnext\tTab", 100), "line\nnext\tTab");
    }
}
