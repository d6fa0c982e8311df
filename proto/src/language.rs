//! The output language (SPEC P6): one normalisation shared by prompts, contracts and degraded texts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The two languages verdict writes natural-language fields in. Tags, enumerations and JSON keys
/// are never localised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Language {
    #[serde(rename = "en")]
    En,
    /// The fallback for anything that is not recognisably English (SPEC P6).
    #[default]
    #[serde(rename = "zh-CN")]
    ZhCn,
}

impl Language {
    /// Normalises a configured value: `en`, `en-US`, `en_GB`, `English` → `en`; `zh`, `zh-CN`,
    /// `zh_Hans`, `Chinese` → `zh-CN`; anything else (empty, `fr`, typos) → `zh-CN`, as P6 says.
    pub fn normalise(configured: &str) -> Language {
        Self::recognise(configured).unwrap_or(Language::ZhCn)
    }

    /// Like [`Language::normalise`], but says whether the value was recognised, so callers can
    /// warn about a fallback instead of hiding it.
    pub fn recognise(configured: &str) -> Option<Language> {
        let v = configured.trim().to_ascii_lowercase();
        let primary = v.split(['-', '_']).next().unwrap_or("");
        match primary {
            "en" | "english" => Some(Language::En),
            "zh" | "chinese" | "cn" => Some(Language::ZhCn),
            _ => None,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Language::En => "en",
            Language::ZhCn => "zh-CN",
        }
    }

    /// Picks the text for this language; keeps bilingual tables readable at the call site.
    pub fn pick<'a>(self, en: &'a str, zh: &'a str) -> &'a str {
        match self {
            Language::En => en,
            Language::ZhCn => zh,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_follows_p6() {
        for en in ["en", "EN", "en-US", "en_GB", "English", " en "] {
            assert_eq!(Language::normalise(en), Language::En, "{en}");
        }
        for zh in ["zh", "zh-CN", "zh_cn", "zh-Hans", "Chinese"] {
            assert_eq!(Language::normalise(zh), Language::ZhCn, "{zh}");
        }
        for other in ["", "fr", "de-DE", "eng?", "ja"] {
            assert_eq!(Language::normalise(other), Language::ZhCn, "{other}");
            assert_eq!(Language::recognise(other), None, "{other}");
        }
    }

    #[test]
    fn serde_uses_canonical_codes() {
        assert_eq!(serde_json::to_string(&Language::ZhCn).unwrap(), "\"zh-CN\"");
        assert_eq!(serde_json::to_string(&Language::En).unwrap(), "\"en\"");
    }
}
