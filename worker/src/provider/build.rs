//! Turns one provider's settings into a ready [`Provider`], checking them first, so a wrong
//! base URL, an empty `exec` command or a zero timeout fails at start-up with an error naming the
//! provider and the setting to fix, not on the first review.

use std::sync::Arc;
use std::time::Duration;

use super::anthropic::AnthropicProvider;
use super::exec::ExecProvider;
use super::openai::OpenAiProvider;
use super::{Provider, ProviderKind, ProviderSettings};

/// Settings that cannot make a working provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderBuildError {
    #[error("provider `{provider}`: {key} {problem}; fix providers.{provider}.{key}")]
    Setting {
        provider: String,
        key: &'static str,
        problem: String,
    },
    #[error(
        "provider `{provider}`: cannot build the HTTP client: {reason}; HTTPS needs the system CA certificates (install ca-certificates)"
    )]
    HttpClient { provider: String, reason: String },
}

impl ProviderBuildError {
    pub(crate) fn setting(
        provider: &str,
        key: &'static str,
        problem: impl Into<String>,
    ) -> ProviderBuildError {
        ProviderBuildError::Setting {
            provider: provider.to_owned(),
            key,
            problem: problem.into(),
        }
    }
}

/// Validates `settings` and builds the provider of its kind.
///
/// Checks: HTTP kinds need an `http`/`https` base URL with a host and no query, and positive
/// `timeout` and `connect_timeout`; `exec` needs a non-empty `command` whose program is not
/// blank, and a positive `timeout`.
pub fn build(settings: ProviderSettings) -> Result<Arc<dyn Provider>, ProviderBuildError> {
    validate(&settings)?;
    Ok(match settings.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(settings)?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(settings)?),
        ProviderKind::Exec => Arc::new(ExecProvider::new(settings)?),
    })
}

/// The checks [`build`] runs; the constructors run the ones for their own kind too, so a
/// provider built directly is just as checked.
pub(crate) fn validate(settings: &ProviderSettings) -> Result<(), ProviderBuildError> {
    let positive = |key: &'static str, d: Duration| {
        if d.is_zero() {
            Err(ProviderBuildError::setting(
                &settings.name,
                key,
                "must be greater than zero",
            ))
        } else {
            Ok(())
        }
    };
    positive("timeout", settings.timeout)?;
    match settings.kind {
        ProviderKind::Openai | ProviderKind::Anthropic => {
            positive("connect_timeout", settings.connect_timeout)?;
            super::http::endpoint(&settings.base_url, "x").map_err(|reason| {
                ProviderBuildError::setting(
                    &settings.name,
                    "base_url",
                    format!(
                        "`{}` is not a usable http(s) base URL ({reason}), e.g. https://api.openai.com",
                        display_url(&settings.base_url)
                    ),
                )
            })?;
        }
        ProviderKind::Exec => match settings.command.first() {
            Some(program) if !program.trim().is_empty() => {}
            _ => {
                return Err(ProviderBuildError::setting(
                    &settings.name,
                    "command",
                    "must name the program to run (and its arguments), e.g. [\"my-agent\", \"--print\"]",
                ));
            }
        },
    }
    if let Some(t) = settings.temperature
        && !t.is_finite()
    {
        return Err(ProviderBuildError::setting(
            &settings.name,
            "temperature",
            "must be a finite number",
        ));
    }
    if settings.max_tokens == Some(0) {
        return Err(ProviderBuildError::setting(
            &settings.name,
            "max_tokens",
            "must be greater than zero",
        ));
    }
    Ok(())
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

/// Settings that pass [`validate`], for unit tests of every provider module.
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
    fn errors_name_the_provider_and_the_setting() {
        let mut s = settings(ProviderKind::Openai);
        s.base_url = "https://user:hunter22@gw.example/?x=1".into();
        let e = problem(s);
        assert!(
            e.starts_with("provider `p`: base_url `https://gw.example/?x=1` is not a usable"),
            "{e}"
        );
        assert!(e.ends_with("fix providers.p.base_url"), "{e}");
        assert!(!e.contains("hunter22"), "{e}");

        let mut s = settings(ProviderKind::Anthropic);
        s.base_url = "localhost:8080".into();
        assert!(problem(s).contains("base_url"));

        let mut s = settings(ProviderKind::Anthropic);
        s.connect_timeout = Duration::ZERO;
        assert_eq!(
            problem(s),
            "provider `p`: connect_timeout must be greater than zero; fix providers.p.connect_timeout"
        );

        let mut s = settings(ProviderKind::Exec);
        s.command = vec![];
        assert!(problem(s).contains("fix providers.p.command"));
        let mut s = settings(ProviderKind::Exec);
        s.command = vec![" ".into()];
        assert!(problem(s).contains("command must name the program"));
        let mut s = settings(ProviderKind::Exec);
        s.timeout = Duration::ZERO;
        assert!(problem(s).contains("providers.p.timeout"));
        // exec ignores the HTTP settings.
        let mut s = settings(ProviderKind::Exec);
        s.base_url = String::new();
        s.connect_timeout = Duration::ZERO;
        assert!(build(s).is_ok());

        let mut s = settings(ProviderKind::Openai);
        s.max_tokens = Some(0);
        assert!(problem(s).contains("providers.p.max_tokens"));
        let mut s = settings(ProviderKind::Openai);
        s.temperature = Some(f32::NAN);
        assert!(problem(s).contains("providers.p.temperature"));
    }
}
