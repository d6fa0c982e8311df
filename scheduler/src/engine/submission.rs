//! Submissions validated into new task records, without I/O: required fields, the pipeline name,
//! per-task overrides checked against their limits, texts checked against what one broker
//! message carries ([`TextLimits`], a 413), and the configured defaults filled in. Every
//! rejection names the field and the fix. (The repository's allowlist check resolves host names,
//! so the facade runs it, before anything is stored.)

use std::time::Duration;

use rand::RngExt;
use verdict_proto::Language;
use verdict_proto::publication::{ItemKind, ItemRef, parse_item_url};
use verdict_proto::revision::Revision;
use verdict_proto::wire::{EventType, Priority, RepositoryRef};

use super::{CodeHostSettings, SchedulerSettings};
use crate::service::ServiceError;
use verdict_api::document::TaskState;
use verdict_api::submission::{
    GitHubSource, IssueAnalysisSubmission, IssueInput, ReviewSubmission, ScanSubmission,
    SubmissionOptions,
};
use verdict_policy::pipeline::{self, Draft, PipelineSettings};
use verdict_policy::task::{PipelineKind, TaskInputs, TaskRecord};

/// How large each text of a submission may be (decision 117). Every stage request carries the
/// task's texts inline beside its own material (the diffstat, a summary, findings, the changed
/// paths), so together they stay near a third of `broker.message_max_bytes`: a title or an
/// issue title 1/64 of it, a description or an issue body 1/4, an issue's labels and the
/// categories 1/64 each. A text is measured as a message writes it (JSON, escapes included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextLimits {
    pub message_max_bytes: usize,
    /// A review's or an issue's title.
    pub title: usize,
    /// A review's description or an issue's body.
    pub body: usize,
    /// An issue's labels together, and the categories together.
    pub list: usize,
}

impl TextLimits {
    pub fn new(message_max_bytes: usize) -> TextLimits {
        TextLimits {
            message_max_bytes,
            title: message_max_bytes / 64,
            body: message_max_bytes / 4,
            list: message_max_bytes / 64,
        }
    }

    /// A 413 naming `field`, its size and its limit when `value` is larger than `limit`
    /// (`share` says which part of the message limit that is).
    fn check(
        &self,
        field: &str,
        value: &impl serde::Serialize,
        limit: usize,
        share: &str,
    ) -> Result<(), ServiceError> {
        let size = encoded_len(value);
        if size <= limit {
            return Ok(());
        }
        Err(ServiceError::TooLarge(format!(
            "{field} is {size} bytes, above its limit of {limit} bytes ({share} of broker.message_max_bytes = {}, so that every stage request of the task fits one broker message); shorten it",
            self.message_max_bytes
        )))
    }
}

/// The bytes `value` takes in a message: its JSON, without a string's quotes.
fn encoded_len(value: &impl serde::Serialize) -> usize {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => serde_json::to_string(&s).map_or(0, |j| j.len() - 2),
        Ok(other) => other.to_string().len(),
        Err(_) => 0,
    }
}

/// The configured defaults a submission may override.
#[derive(Debug, Clone)]
pub(super) struct TaskDefaults {
    /// Copied into every task (a configuration snapshot).
    pipeline: PipelineSettings,
    language: Language,
    review_timeout: Duration,
    code_host: Option<CodeHostSettings>,
    limits: TextLimits,
}

/// What a submission decides before the options and defaults are applied.
struct Shape {
    pipeline: PipelineKind,
    repository: Option<RepositoryRef>,
    inputs: TaskInputs,
    /// The priority unless the options name one.
    priority: Priority,
    github: Option<GitHubSource>,
}

impl TaskDefaults {
    pub(super) fn new(settings: &SchedulerSettings) -> TaskDefaults {
        TaskDefaults {
            pipeline: settings.pipeline.clone(),
            language: settings.language,
            review_timeout: settings.review_timeout,
            code_host: settings.code_host.clone(),
            limits: TextLimits::new(settings.message_max_bytes),
        }
    }

    /// The item a pull-request or issue URL names, on the configured code host.
    fn item(&self, field: &str, url: &str, kind: ItemKind) -> Result<ItemRef, ServiceError> {
        let parsed = parse_item_url(url, kind)
            .map_err(|e| ServiceError::Invalid(format!("{field}: {e}")))?;
        let Some(host) = &self.code_host else {
            return Err(ServiceError::Invalid(format!(
                "{field}: this scheduler has no GitHub configured; set [github] in its configuration (docs/github.md), or give the repository and revisions instead"
            )));
        };
        if !parsed.host.eq_ignore_ascii_case(&host.web_host) {
            return Err(ServiceError::Invalid(format!(
                "{field}: `{}` is not on the configured GitHub host `{}`; use a URL on that host, or set [github] web_url",
                parsed.host, host.web_host
            )));
        }
        Ok(parsed.item)
    }

    /// Where a submission's result is posted: a URL's item, or a webhook's source.
    fn source(
        &self,
        given: Option<GitHubSource>,
        url: Option<(&str, &str, ItemKind)>,
        publish: bool,
    ) -> Result<Option<GitHubSource>, ServiceError> {
        match (given, url) {
            (Some(_), Some((field, _, _))) => Err(ServiceError::Invalid(format!(
                "give either {field} or github, not both"
            ))),
            (Some(source), None) => Ok(Some(source)),
            (None, Some((field, url, kind))) => Ok(Some(GitHubSource {
                item: self.item(field, url, kind)?,
                head_sha: None,
                publish,
            })),
            (None, None) if publish => Err(ServiceError::Invalid(
                "publish needs a pull request or issue to publish to; give pull_request (reviews) or issue_url (issue analyses)".to_owned(),
            )),
            (None, None) => Ok(None),
        }
    }

    /// A review task (S1 or S2) submitted at `now`: a change named by repository and revisions,
    /// or a pull request named by its URL (read from the code host at intake).
    pub(super) fn review(&self, s: ReviewSubmission, now: u64) -> Result<TaskRecord, ServiceError> {
        let url = s
            .pull_request
            .as_deref()
            .map(|u| ("pull_request", u, ItemKind::PullRequest));
        let github = self.source(s.github, url, s.publish)?;
        let repository = if s.pull_request.is_some() {
            if !(s.repository.is_empty() && s.base.is_empty() && s.head.is_empty()) {
                return Err(ServiceError::Invalid(
                    "give either pull_request, or repository, base and head — not both: the pull request names its repository and revisions".to_owned(),
                ));
            }
            None
        } else {
            required("repository", &s.repository)?;
            required("base", &s.base)?;
            required("head", &s.head)?;
            revision("base", &s.base)?;
            revision("head", &s.head)?;
            Some(RepositoryRef {
                url: s.repository,
                commit: s.head,
                base: Some(s.base),
            })
        };
        let limits = &self.limits;
        limits.check("title", &s.title, limits.title, "1/64")?;
        limits.check("body", &s.body, limits.body, "1/4")?;
        let pipeline = match s.pipeline.as_deref() {
            None | Some("multi") => PipelineKind::Multi,
            Some("single") => PipelineKind::Single,
            Some(other) => {
                return Err(ServiceError::Invalid(format!(
                    "pipeline `{other}` is unknown; use `multi` (staged review) or `single` (one agentic review)"
                )));
            }
        };
        let shape = Shape {
            pipeline,
            repository,
            inputs: TaskInputs {
                title: s.title,
                body: s.body,
                ..TaskInputs::default()
            },
            priority: Priority::Interactive,
            github,
        };
        self.record(shape, &s.options, now)
    }

    /// An issue analysis task (S3) submitted at `now`: the issue given, or named by its URL (read
    /// from the code host at intake, with its repository unless one is given).
    pub(super) fn issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
        now: u64,
    ) -> Result<TaskRecord, ServiceError> {
        let url = s
            .issue_url
            .as_deref()
            .map(|u| ("issue_url", u, ItemKind::Issue));
        let github = self.source(s.github, url, s.publish)?;
        if s.issue_url.is_some() {
            if s.issue != IssueInput::default() {
                return Err(ServiceError::Invalid(
                    "give either issue_url or issue, not both: the issue is read from its URL"
                        .to_owned(),
                ));
            }
        } else {
            required("issue.title", &s.issue.title)?;
        }
        let limits = &self.limits;
        limits.check("issue.title", &s.issue.title, limits.title, "1/64")?;
        limits.check("issue.body", &s.issue.body, limits.body, "1/4")?;
        limits.check("issue.labels", &s.issue.labels, limits.list, "1/64")?;
        limits.check("categories", &s.categories, limits.list, "1/64")?;
        let repository = match (s.repository, s.revision) {
            (None, None) => None,
            (None, Some(given)) => {
                return Err(ServiceError::Invalid(format!(
                    "revision `{}` was given without a repository; give repository too, or leave revision out",
                    verdict_proto::redact::safe_preview(&given, 80)
                )));
            }
            (Some(url), given) => {
                required("repository", &url)?;
                // No revision: the repository's default branch, which its HEAD names.
                let commit = given.unwrap_or_else(|| "HEAD".to_owned());
                revision("revision", &commit)?;
                Some(RepositoryRef {
                    url,
                    commit,
                    base: None,
                })
            }
        };
        let shape = Shape {
            pipeline: PipelineKind::IssueAnalysis,
            repository,
            inputs: TaskInputs {
                issue: Some(s.issue),
                ..TaskInputs::default()
            },
            priority: Priority::Interactive,
            github,
        };
        let mut task = self.record(shape, &s.options, now)?;
        if let Some(c) = s.categories {
            if c.is_empty() || c.iter().any(|x| x.trim().is_empty()) {
                return Err(ServiceError::Invalid(
                    "categories must be non-empty names".into(),
                ));
            }
            task.settings.issue_categories = Some(c);
        }
        Ok(task)
    }

    /// A repository scan task (S4) submitted at `now`.
    pub(super) fn scan(&self, s: ScanSubmission, now: u64) -> Result<TaskRecord, ServiceError> {
        required("repository", &s.repository)?;
        required("revision", &s.revision)?;
        revision("revision", &s.revision)?;
        let shape = Shape {
            pipeline: PipelineKind::Scan,
            repository: Some(RepositoryRef {
                url: s.repository,
                commit: s.revision,
                base: None,
            }),
            inputs: TaskInputs::default(),
            priority: Priority::Bulk,
            github: None,
        };
        self.record(shape, &s.options, now)
    }

    /// A new queued record of `shape` with `options` applied over the defaults.
    fn record(
        &self,
        shape: Shape,
        options: &SubmissionOptions,
        now: u64,
    ) -> Result<TaskRecord, ServiceError> {
        let language = match options.language.as_deref() {
            Some(l) => Language::normalise(l),
            None => self.language,
        };
        let timeout = options
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(self.review_timeout);
        if timeout.is_zero() {
            return Err(ServiceError::Invalid(
                "options.timeout_seconds must be greater than 0".into(),
            ));
        }
        let mut settings = self.pipeline.clone();
        if let Some(n) = options.reviewers {
            if n == 0 || usize::from(n) > pipeline::MAX_REVIEWERS {
                return Err(ServiceError::Invalid(format!(
                    "options.reviewers must be between 1 and {}",
                    pipeline::MAX_REVIEWERS
                )));
            }
            settings.reviewers = n;
        }
        if let Some(key) = &options.idempotency_key
            && (key.trim().is_empty() || key.len() > 256)
        {
            return Err(ServiceError::Invalid(
                "options.idempotency_key must be 1 to 256 characters".into(),
            ));
        }
        Ok(TaskRecord {
            id: options
                .idempotency_key
                .as_deref()
                .map_or_else(new_id, id_for_key),
            pipeline: shape.pipeline,
            state: TaskState::Queued,
            reason: None,
            failure_kind: None,
            language,
            priority: options.priority.unwrap_or(shape.priority),
            repository: shape.repository,
            revisions: None,
            inputs: shape.inputs,
            settings,
            stages: Vec::new(),
            result: None,
            coverage: Default::default(),
            created_unix_ms: now,
            intake_started_unix_ms: None,
            intake_owner: None,
            started_unix_ms: None,
            finished_unix_ms: None,
            deadline_unix_ms: now
                .saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            triage_fallback: false,
            github: shape.github,
            trace: Default::default(),
            publication: None,
            budget: None,
            organisation: options.organisation.clone(),
        })
    }
}

/// The event that opens every task's stream.
pub(super) fn queued_event(task: &TaskRecord) -> Draft {
    Draft {
        kind: EventType::TaskQueued,
        stage_id: None,
        message: task
            .language
            .pick("Task queued.", "任务已排队。")
            .to_owned(),
        data: serde_json::json!({"pipeline": task.pipeline.as_str()}),
    }
}

/// The task id an idempotency key always names: UUID text (version 5 layout) over SHA-256 of the
/// key, so the same key makes the same id in every scheduler replica.
pub(super) fn id_for_key(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("verdict-task:{key}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    uuid_text(b, 0x50)
}

/// A random task id (UUID v4 text form).
pub fn new_id() -> String {
    uuid_text(rand::rng().random(), 0x40)
}

/// Whether `id` is one an idempotency key names ([`id_for_key`]): its UUID version, the 15th
/// character, is 5 (a random one's is 4).
pub(super) fn named_by_key(id: &str) -> bool {
    id.as_bytes().get(14) == Some(&b'5')
}

/// `b` as UUID text with the given version nibble (0x40, 0x50) and the RFC 4122 variant.
fn uuid_text(mut b: [u8; 16], version: u8) -> String {
    b[6] = (b[6] & 0x0f) | version;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The syntax every revision must have (the git source applies the same rule); whether it
/// exists is only known at intake.
fn revision(field: &str, value: &str) -> Result<(), ServiceError> {
    match Revision::parse(value) {
        Ok(_) => Ok(()),
        Err(e) => Err(ServiceError::Invalid(format!("{field}: {e}"))),
    }
}

fn required(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.trim().is_empty() {
        Err(ServiceError::Invalid(format!(
            "{field} is required and must not be empty"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_api::submission::IssueInput;

    const NOW: u64 = 1_700_000_000_000;

    fn defaults() -> TaskDefaults {
        TaskDefaults {
            pipeline: PipelineSettings {
                triage: true,
                reviewers: 2,
                max_diff_bytes_per_reviewer: 10_000,
                max_diff_bytes: 100_000,
                stages: Default::default(),
                issue_categories: Some(vec!["bug".to_owned()]),
                ignore_paths: Vec::new(),
                scan: Default::default(),
            },
            language: Language::En,
            review_timeout: Duration::from_secs(600),
            code_host: Some(crate::engine::fixture::code_host_settings()),
            limits: TextLimits::new(1 << 20),
        }
    }

    fn refusal(result: Result<TaskRecord, ServiceError>) -> String {
        match result {
            Err(ServiceError::Invalid(message)) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_pull_request_url_names_what_intake_reads_and_where_to_publish() {
        let s = ReviewSubmission {
            pull_request: Some("https://github.com/acme/shop/pull/7/files".to_owned()),
            publish: true,
            ..ReviewSubmission::default()
        };
        let task = defaults().review(s, NOW).unwrap();
        assert_eq!(
            task.repository, None,
            "read from the pull request at intake"
        );
        let github = task.github.unwrap();
        assert_eq!(
            (github.item.repo.to_string(), github.item.number),
            ("acme/shop".to_owned(), 7)
        );
        assert!(github.publish);
        assert_eq!(github.head_sha, None);
    }

    #[test]
    fn pull_request_and_issue_urls_are_checked_before_anything_is_stored() {
        let pr = |url: &str| ReviewSubmission {
            pull_request: Some(url.to_owned()),
            ..ReviewSubmission::default()
        };
        let d = defaults();
        assert!(
            refusal(d.review(pr("https://ghe.example.com/a/b/pull/1"), NOW))
                .contains("not on the configured GitHub host `github.com`")
        );
        assert!(
            refusal(d.review(pr("https://github.com/a/b/issues/1"), NOW))
                .contains("OWNER/REPO/pull/NUMBER")
        );
        let mut both = pr("https://github.com/a/b/pull/1");
        both.repository = "https://github.com/a/b.git".to_owned();
        assert!(refusal(d.review(both, NOW)).contains("not both"));
        let publish_nowhere = ReviewSubmission {
            publish: true,
            ..review()
        };
        assert!(refusal(d.review(publish_nowhere, NOW)).contains("publish needs"));
        let mut no_host = defaults();
        no_host.code_host = None;
        assert!(
            refusal(no_host.review(pr("https://github.com/a/b/pull/1"), NOW))
                .contains("no GitHub configured")
        );
        let issue = IssueAnalysisSubmission {
            issue_url: Some("https://github.com/a/b/issues/4".to_owned()),
            publish: true,
            ..IssueAnalysisSubmission::default()
        };
        let task = d.issue_analysis(issue.clone(), NOW).unwrap();
        assert_eq!(task.github.unwrap().item.number, 4);
        let with_issue = IssueAnalysisSubmission {
            issue: IssueInput {
                title: "t".to_owned(),
                ..IssueInput::default()
            },
            ..issue
        };
        assert!(refusal(d.issue_analysis(with_issue, NOW)).contains("not both"));
    }

    fn review() -> ReviewSubmission {
        ReviewSubmission {
            repository: "https://example.test/shop.git".to_owned(),
            base: "main".to_owned(),
            head: "feature".to_owned(),
            pipeline: None,
            title: Some("Coupons".to_owned()),
            body: None,
            options: SubmissionOptions::default(),
            ..Default::default()
        }
    }

    fn invalid(message: &str) -> Result<TaskRecord, ServiceError> {
        Err(ServiceError::Invalid(message.to_owned()))
    }

    #[test]
    fn a_review_gets_the_defaults_and_a_deadline() {
        let task = defaults().review(review(), NOW).unwrap();
        assert_eq!(task.pipeline, PipelineKind::Multi);
        assert_eq!(task.state, TaskState::Queued);
        assert_eq!(task.priority, Priority::Interactive);
        assert_eq!(task.language, Language::En);
        assert_eq!(task.settings, defaults().pipeline);
        assert_eq!(task.deadline_unix_ms, NOW + 600_000);
        let repo = task.repository.unwrap();
        assert_eq!(
            (repo.commit.as_str(), repo.base.as_deref()),
            ("feature", Some("main"))
        );
        assert_eq!(task.inputs.title.as_deref(), Some("Coupons"));
    }

    #[test]
    fn options_override_the_defaults_within_their_limits() {
        let mut s = review();
        s.pipeline = Some("single".to_owned());
        s.options = SubmissionOptions {
            language: Some("zh".to_owned()),
            priority: Some(Priority::Bulk),
            timeout_seconds: Some(5),
            reviewers: Some(16),
            idempotency_key: None,
            organisation: None,
            past_backlog: false,
        };
        let task = defaults().review(s, NOW).unwrap();
        assert_eq!(task.pipeline, PipelineKind::Single);
        assert_eq!(task.language, Language::ZhCn);
        assert_eq!(task.priority, Priority::Bulk);
        assert_eq!(task.deadline_unix_ms, NOW + 5_000);
        assert_eq!(task.settings.reviewers, 16);

        for reviewers in [0, 17] {
            let mut s = review();
            s.options.reviewers = Some(reviewers);
            assert_eq!(
                defaults().review(s, NOW),
                invalid("options.reviewers must be between 1 and 16")
            );
        }
        let mut s = review();
        s.options.timeout_seconds = Some(0);
        assert_eq!(
            defaults().review(s, NOW),
            invalid("options.timeout_seconds must be greater than 0")
        );
    }

    #[test]
    fn a_review_names_what_is_missing_or_unknown() {
        let mut s = review();
        s.base = " ".to_owned();
        assert_eq!(
            defaults().review(s, NOW),
            invalid("base is required and must not be empty")
        );
        let mut s = review();
        s.pipeline = Some("quick".to_owned());
        assert_eq!(
            defaults().review(s, NOW),
            invalid(
                "pipeline `quick` is unknown; use `multi` (staged review) or `single` (one agentic review)"
            )
        );
    }

    #[test]
    fn an_issue_analysis_needs_a_revision_with_a_repository_and_named_categories() {
        let submission =
            |repository: Option<&str>, revision: Option<&str>| IssueAnalysisSubmission {
                repository: repository.map(str::to_owned),
                revision: revision.map(str::to_owned),
                issue: IssueInput {
                    number: Some(7),
                    title: "Crash on empty cart".to_owned(),
                    body: String::new(),
                    labels: vec![],
                },
                categories: None,
                options: SubmissionOptions::default(),
                ..Default::default()
            };
        let task = defaults()
            .issue_analysis(submission(None, None), NOW)
            .unwrap();
        assert_eq!(task.repository, None);
        assert_eq!(task.settings.issue_categories, Some(vec!["bug".to_owned()]));
        let task = defaults()
            .issue_analysis(submission(Some("https://example.test/shop.git"), None), NOW)
            .unwrap();
        assert_eq!(
            task.repository.unwrap().commit,
            "HEAD",
            "the default branch"
        );
        assert_eq!(
            defaults().issue_analysis(submission(None, Some("v2")), NOW),
            invalid(
                "revision `v2` was given without a repository; give repository too, or leave revision out"
            )
        );
        let err = defaults()
            .issue_analysis(
                submission(Some("https://example.test/shop.git"), Some("a..b")),
                NOW,
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("revision: revision `a..b` is a range"),
            "{err}"
        );
        let mut s = submission(Some("https://example.test/shop.git"), Some("v2"));
        s.categories = Some(vec!["bug".to_owned(), "feature".to_owned()]);
        let task = defaults().issue_analysis(s, NOW).unwrap();
        assert_eq!(task.repository.unwrap().commit, "v2");
        assert_eq!(
            task.settings.issue_categories,
            Some(vec!["bug".to_owned(), "feature".to_owned()])
        );
        let mut s = submission(None, None);
        s.categories = Some(vec!["bug".to_owned(), " ".to_owned()]);
        assert_eq!(
            defaults().issue_analysis(s, NOW),
            invalid("categories must be non-empty names")
        );
    }

    #[test]
    fn revisions_people_type_are_taken_and_option_like_ones_refused() {
        for head in [
            "HEAD",
            "HEAD~2",
            "HEAD^",
            "origin/main",
            "feature~1",
            "v1.0",
            "0123abc",
        ] {
            let mut s = review();
            s.head = head.to_owned();
            let task = defaults().review(s, NOW).unwrap();
            assert_eq!(task.repository.unwrap().commit, head);
        }
        for (field, value) in [
            ("head", "--upload-pack=touch /tmp/x"),
            ("base", "-x"),
            ("head", "main..feature"),
            ("base", "main@{1}"),
            ("head", "feat*"),
        ] {
            let mut s = review();
            match field {
                "head" => s.head = value.to_owned(),
                _ => s.base = value.to_owned(),
            }
            let err = defaults().review(s, NOW).unwrap_err();
            let ServiceError::Invalid(message) = err else {
                panic!("{err:?}")
            };
            assert!(
                message.starts_with(&format!("{field}: revision `{value}` ")),
                "{message}"
            );
        }
        let s = ScanSubmission {
            repository: "https://example.test/shop.git".to_owned(),
            revision: "--output=/tmp/x".to_owned(),
            options: SubmissionOptions::default(),
        };
        let err = defaults().scan(s, NOW).unwrap_err();
        assert!(
            err.to_string()
                .contains("revision `--output=/tmp/x` starts with `-`"),
            "{err}"
        );
    }

    #[test]
    fn a_scan_is_bulk_work() {
        let s = ScanSubmission {
            repository: "https://example.test/shop.git".to_owned(),
            revision: "v1".to_owned(),
            options: SubmissionOptions::default(),
        };
        let task = defaults().scan(s.clone(), NOW).unwrap();
        assert_eq!(task.pipeline, PipelineKind::Scan);
        assert_eq!(task.priority, Priority::Bulk);
        let mut s = s;
        s.revision = String::new();
        assert_eq!(
            defaults().scan(s, NOW),
            invalid("revision is required and must not be empty")
        );
    }

    #[test]
    fn texts_larger_than_a_message_carries_are_refused_naming_field_size_and_limit() {
        let too_large = |result: Result<TaskRecord, ServiceError>| match result {
            Err(ServiceError::TooLarge(message)) => message,
            other => panic!("not refused as too large: {other:?}"),
        };
        // Issue 8, item 4: a 1 MiB title.
        let mut s = review();
        s.title = Some("t".repeat(1 << 20));
        assert_eq!(
            too_large(defaults().review(s, NOW)),
            "title is 1048576 bytes, above its limit of 16384 bytes (1/64 of broker.message_max_bytes = 1048576, so that every stage request of the task fits one broker message); shorten it"
        );
        let mut s = review();
        s.body = Some("\u{0}".repeat(50_000));
        let message = too_large(defaults().review(s, NOW));
        assert!(
            message.starts_with("body is 300000 bytes, above its limit of 262144 bytes (1/4"),
            "escapes count as a message writes them: {message}"
        );
        let mut s = review();
        s.title = Some("t".repeat(16_384));
        s.body = Some("b".repeat(262_144));
        assert!(defaults().review(s, NOW).is_ok(), "at the limits");

        let issue = |issue: IssueInput, categories: Option<Vec<String>>| IssueAnalysisSubmission {
            issue,
            categories,
            ..IssueAnalysisSubmission::default()
        };
        let titled = |title: String| IssueInput {
            title,
            ..IssueInput::default()
        };
        let message =
            too_large(defaults().issue_analysis(issue(titled("i".repeat(20_000)), None), NOW));
        assert!(
            message.starts_with("issue.title is 20000 bytes"),
            "{message}"
        );
        let body = IssueInput {
            body: "b".repeat(300_000),
            ..titled("t".to_owned())
        };
        let message = too_large(defaults().issue_analysis(issue(body, None), NOW));
        assert!(
            message.starts_with("issue.body is 300000 bytes"),
            "{message}"
        );
        let labels = IssueInput {
            labels: vec!["l".repeat(1000); 20],
            ..titled("t".to_owned())
        };
        let message = too_large(defaults().issue_analysis(issue(labels, None), NOW));
        assert!(message.starts_with("issue.labels is "), "{message}");
        let categories = Some(vec!["c".repeat(20_000)]);
        let message =
            too_large(defaults().issue_analysis(issue(titled("t".to_owned()), categories), NOW));
        assert!(message.starts_with("categories is "), "{message}");
    }

    #[test]
    fn task_ids_are_distinct_uuid_v4_text() {
        let id = new_id();
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(new_id(), id);
    }

    #[test]
    fn an_id_tells_whether_an_idempotency_key_named_it() {
        assert!(named_by_key(&id_for_key("chaos-1")));
        assert_eq!(id_for_key("chaos-1"), id_for_key("chaos-1"));
        assert!(!named_by_key(&new_id()));
        assert!(!named_by_key("t-1"));
    }
}
