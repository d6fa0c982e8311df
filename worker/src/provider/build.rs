//! Turns one provider's settings into a ready [`Provider`], checking them first, so a wrong
//! base URL, an empty `exec` command or a zero timeout fails at start-up with an error naming the
//! provider and the setting to fix, not on the first review.
//!
//! [`ProviderSettings::validate`] is the one place a provider's values are checked: [`build`],
//! each provider's constructor and the configuration (which maps the error onto its own key and
//! environment variable) all call it.

use std::sync::Arc;
use std::time::Duration;

use super::anthropic::AnthropicProvider;
use super::exec::ExecProvider;
use super::openai::OpenAiProvider;
use super::{Provider, ProviderKind, ProviderSettings};

/// Settings that cannot make a working provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderBuildError {
    /// A setting's value is unusable.
    #[error(
        "provider `{provider}`: providers.{provider}.{key}{} {problem}",
        value.as_deref().map(|v| format!(" = {v}")).unwrap_or_default()
    )]
    Setting {
        provider: String,
        /// The setting's key in `[providers.<name>]` of the configuration file, e.g.
        /// `timeout_seconds`, so a caller can point at what the operator wrote.
        key: &'static str,
        /// The value, fit for a log (credentials removed), when showing it helps.
        value: Option<String>,
        /// What is wrong and how to fix it.
        problem: String,
    },
    #[error(
        "provider `{provider}`: cannot build the HTTP client: {reason}; HTTPS needs the system CA certificates (install ca-certificates)"
    )]
    HttpClient { provider: String, reason: String },
}

impl ProviderBuildError {
    fn setting(
        settings: &ProviderSettings,
        key: &'static str,
        value: Option<String>,
        problem: impl Into<String>,
    ) -> ProviderBuildError {
        ProviderBuildError::Setting {
            provider: settings.name.clone(),
            key,
            value,
            problem: problem.into(),
        }
    }

    /// `base_url` cannot be turned into an endpoint ([`super::http::endpoint`]).
    pub(crate) fn base_url(settings: &ProviderSettings, reason: &str) -> ProviderBuildError {
        ProviderBuildError::setting(
            settings,
            "base_url",
            Some(format!("`{}`", display_url(&settings.base_url))),
            format!(
                "is not a usable http(s) base URL ({reason}); write one such as https://api.openai.com"
            ),
        )
    }
}

/// Validates `settings` and builds the provider of its kind.
pub fn build(settings: ProviderSettings) -> Result<Arc<dyn Provider>, ProviderBuildError> {
    settings.validate()?;
    Ok(match settings.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(settings)?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(settings)?),
        ProviderKind::Exec => Arc::new(ExecProvider::new(settings)?),
    })
}

/// The sampling temperatures every supported API accepts.
const TEMPERATURE_RANGE: std::ops::RangeInclusive<f32> = 0.0..=2.0;

impl ProviderSettings {
    /// Checks every value a provider of this kind uses: a non-blank `model` and a positive
    /// `timeout`; for HTTP kinds an `http`/`https` base URL with a host and no query, a positive
    /// `connect_timeout`, `max_tokens` ≥ 1 and `temperature` in 0–2; for `exec` a `command`
    /// whose program is not blank and non-blank flags. Settings of the other kind are ignored.
    pub fn validate(&self) -> Result<(), ProviderBuildError> {
        let error =
            |key, value, problem: &str| Err(ProviderBuildError::setting(self, key, value, problem));
        let at_least_one_second = |key, d: Duration| {
            if d.is_zero() {
                error(
                    key,
                    Some(d.as_secs().to_string()),
                    "is too small; set it to 1 or more",
                )
            } else {
                Ok(())
            }
        };
        if self.model.trim().is_empty() {
            return error(
                "model",
                Some(format!("{:?}", self.model)),
                "must not be empty; set it to the model to call",
            );
        }
        at_least_one_second("timeout_seconds", self.timeout)?;
        match self.kind {
            ProviderKind::Openai | ProviderKind::Anthropic => {
                at_least_one_second("connect_timeout_seconds", self.connect_timeout)?;
                super::http::endpoint(&self.base_url, "x")
                    .map_err(|reason| ProviderBuildError::base_url(self, &reason))?;
                if self.max_tokens == Some(0) {
                    return error(
                        "max_tokens",
                        Some("0".to_owned()),
                        "is too small; set it to 1 or more",
                    );
                }
                if let Some(t) = self.temperature
                    && !TEMPERATURE_RANGE.contains(&t)
                {
                    return error(
                        "temperature",
                        Some(t.to_string()),
                        "is out of range 0–2; set it between 0 and 2",
                    );
                }
            }
            ProviderKind::Exec => {
                if self.command.first().is_none_or(|p| p.trim().is_empty()) {
                    return error(
                        "command",
                        None,
                        "must name the program to run and its arguments, e.g. [\"my-agent\", \"--print\"]",
                    );
                }
                for (key, flag) in [
                    ("no_tools_flag", &self.no_tools_flag),
                    ("tools_flag", &self.tools_flag),
                ] {
                    if let Some(flag) = flag
                        && flag.trim().is_empty()
                    {
                        return error(
                            key,
                            Some(format!("{flag:?}")),
                            "must not be empty; set it to the agent CLI's flag or remove it",
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// A base URL fit for an error message: user info (`user:password@`) removed, other
/// credential-shaped text redacted.
pub(crate) fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_password(None);
            let _ = u.set_username("");
            verdict_proto::redact::redact(u.as_str())
        }
        Err(_) => verdict_proto::redact::redact(url),
    }
}

/// Settings that pass [`ProviderSettings::validate`], for unit tests of every provider module.
#[cfg(test)]
pub(crate) fn test_settings(kind: ProviderKind) -> ProviderSettings {
    ProviderSettings {
        name: "p".into(),
        kind,
        base_url: "http://127.0.0.1:9".into(),
        api_key: None,
        model: "m".into(),
        timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
        max_tokens: None,
        temperature: None,
        command: vec!["/bin/true".into()],
        no_tools_flag: None,
        tools_flag: None,
        structured_output: crate::provider::StructuredOutput::Off,
        structured_bounds: Default::default(),
        context_window: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(kind: ProviderKind) -> ProviderSettings {
        test_settings(kind)
    }

    fn problem(s: ProviderSettings) -> String {
        build(s).expect_err("should be refused").to_string()
    }

    #[test]
    fn builds_each_kind() {
        for kind in [
            ProviderKind::Openai,
            ProviderKind::Anthropic,
            ProviderKind::Exec,
        ] {
            let p = build(settings(kind)).unwrap();
            assert_eq!((p.kind(), p.name(), p.default_model()), (kind, "p", "m"));
        }
    }

    #[test]
    fn errors_name_the_provider_the_setting_and_the_fix() {
        let mut s = settings(ProviderKind::Openai);
        s.base_url = "https://user:hunter22@gw.example/?x=1".into();
        let e = problem(s);
        assert!(
            e.starts_with(
                "provider `p`: providers.p.base_url = `https://gw.example/?x=1` is not a usable http(s) base URL"
            ),
            "{e}"
        );
        assert!(
            e.ends_with("write one such as https://api.openai.com"),
            "{e}"
        );
        assert!(!e.contains("hunter22"), "{e}");

        let mut s = settings(ProviderKind::Anthropic);
        s.connect_timeout = Duration::ZERO;
        assert_eq!(
            problem(s),
            "provider `p`: providers.p.connect_timeout_seconds = 0 is too small; set it to 1 or more"
        );

        type Change = fn(&mut ProviderSettings);
        let cases: &[(ProviderKind, Change, &str)] = &[
            (
                ProviderKind::Anthropic,
                |s| s.base_url = "localhost:8080".into(),
                "providers.p.base_url = `localhost:8080` is not a usable",
            ),
            (
                ProviderKind::Openai,
                |s| s.model = " ".into(),
                "providers.p.model = \" \" must not be empty; set it to the model to call",
            ),
            (
                ProviderKind::Exec,
                |s| s.command = vec![],
                "providers.p.command must name the program to run",
            ),
            (
                ProviderKind::Exec,
                |s| s.command = vec![" ".into(), "-p".into()],
                "providers.p.command must name the program to run",
            ),
            (
                ProviderKind::Exec,
                |s| s.timeout = Duration::ZERO,
                "providers.p.timeout_seconds = 0 is too small; set it to 1 or more",
            ),
            (
                ProviderKind::Exec,
                |s| s.no_tools_flag = Some(String::new()),
                "providers.p.no_tools_flag = \"\" must not be empty",
            ),
            (
                ProviderKind::Exec,
                |s| s.tools_flag = Some(" ".into()),
                "providers.p.tools_flag = \" \" must not be empty",
            ),
            (
                ProviderKind::Openai,
                |s| s.max_tokens = Some(0),
                "providers.p.max_tokens = 0 is too small; set it to 1 or more",
            ),
            (
                ProviderKind::Openai,
                |s| s.temperature = Some(2.5),
                "providers.p.temperature = 2.5 is out of range 0–2; set it between 0 and 2",
            ),
            (
                ProviderKind::Anthropic,
                |s| s.temperature = Some(f32::NAN),
                "providers.p.temperature = NaN is out of range 0–2",
            ),
        ];
        for (kind, change, expected) in cases {
            let mut s = settings(*kind);
            change(&mut s);
            let e = problem(s);
            assert!(
                e.starts_with(&format!("provider `p`: {expected}")),
                "{e}\n  want {expected}"
            );
        }

        // exec ignores the HTTP settings.
        let mut s = settings(ProviderKind::Exec);
        s.base_url = String::new();
        s.connect_timeout = Duration::ZERO;
        s.temperature = Some(9.0);
        assert!(build(s).is_ok());
        // Each constructor checks as `build` does.
        let mut s = settings(ProviderKind::Openai);
        s.timeout = Duration::ZERO;
        assert!(OpenAiProvider::new(s).is_err());
    }
}
