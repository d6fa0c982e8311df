//! The organisation report (issue 10): a batch's scan task documents turned into one JSON model
//! people and tools read — per repository its state, score, findings by severity and category,
//! coverage (files scanned, skipped by reason), tokens and cost when known, and every finding
//! with a link to its file and lines on the code host — and a self-contained HTML page of it
//! ([`html`]). No I/O: the caller fetches the documents and writes the files.
//!
//! # Layout
//! - `mod.rs`: the model ([`OrgReport`]) and [`build`].
//! - `html.rs`: [`html`], the page rendered with minijinja from `report.html` (autoescaped:
//!   findings are untrusted model output).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use verdict_proto::outcome::FailureKind;

use verdict_api::document::{SkipReason, TaskDocument, TaskState};

mod html;

pub use html::{ReportError, html};

/// The severities, most severe first: every report lists all four, zeros included.
pub const SEVERITIES: [&str; 4] = ["critical", "major", "minor", "suggestion"];

/// The P3 categories: every report lists all five, zeros included.
pub const CATEGORIES: [&str; 5] = [
    "security",
    "performance",
    "reliability",
    "maintainability",
    "architecture",
];

/// One repository of the batch: its scan task's document and the repository's URL (the one
/// the batch named, which the document may show redacted).
#[derive(Debug, Clone)]
pub struct Member {
    pub url: String,
    pub document: TaskDocument,
    /// The task's estimated cost in US dollars, when a price table gave one.
    pub cost_usd: Option<f64>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrgReport {
    pub organisation: String,
    /// RFC 3339, UTC.
    pub generated_at: String,
    pub totals: Totals,
    /// Repositories not scanned because the organisation's budget was reached (SPEC X5): the
    /// report is partial when this is not 0.
    #[serde(default)]
    pub over_budget: usize,
    /// The budget's refusal, as the first such repository's task gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_note: Option<String>,
    pub repositories: Vec<RepositoryReport>,
}

/// Sums over the repositories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub repositories: usize,
    /// Repositories per task state (`completed`, `degraded`, `incomplete`, …).
    pub by_state: BTreeMap<String, usize>,
    pub findings: usize,
    pub by_severity: BTreeMap<String, usize>,
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One repository's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepositoryReport {
    /// `owner/repo` when the URL has that shape, else the URL.
    pub name: String,
    pub url: String,
    pub task_id: String,
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The scan's overall score (1–100); `None` when there is none (degraded, not finished).
    pub score: Option<u64>,
    pub degraded: bool,
    pub findings_total: usize,
    pub by_severity: BTreeMap<String, usize>,
    pub by_category: BTreeMap<String, usize>,
    pub coverage: CoverageReport,
    /// Input and output tokens of every stage.
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub findings: Vec<ReportFinding>,
}

/// What part of the repository was scanned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoverageReport {
    pub files_total: usize,
    pub files_scanned: usize,
    pub files_skipped: usize,
    /// Skipped files per reason (every reason listed, zeros included); `other` for reasons a
    /// document gives only in words.
    pub skipped_by_reason: BTreeMap<String, usize>,
    /// Every skipped file with its reason.
    pub skipped: Vec<SkippedFile>,
    pub shards_failed: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    pub path: String,
    pub kind: String,
    pub reason: String,
}

/// One finding as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportFinding {
    pub severity: String,
    pub category: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u64>,
    /// The file and lines on the code host, when the repository is an `https://` one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// The report of `members` (in the order given) for `organisation`, generated at
/// `generated_unix_ms`.
pub fn build(organisation: &str, members: &[Member], generated_unix_ms: u64) -> OrgReport {
    let repositories: Vec<RepositoryReport> = members.iter().map(repository).collect();
    let mut by_state = BTreeMap::new();
    let mut by_severity: BTreeMap<String, usize> =
        SEVERITIES.iter().map(|s| ((*s).to_owned(), 0)).collect();
    for r in &repositories {
        *by_state.entry(r.state.as_str().to_owned()).or_insert(0) += 1;
        for (severity, n) in &r.by_severity {
            *by_severity.entry(severity.clone()).or_insert(0) += n;
        }
    }
    let costs: Vec<f64> = repositories.iter().filter_map(|r| r.cost_usd).collect();
    let totals = Totals {
        repositories: repositories.len(),
        by_state,
        findings: repositories.iter().map(|r| r.findings_total).sum(),
        by_severity,
        tokens: repositories.iter().map(|r| r.tokens).sum(),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
    };
    let refused_by_budget: Vec<&TaskDocument> = members
        .iter()
        .map(|m| &m.document)
        .filter(|d| d.failure_kind == Some(FailureKind::BudgetExceeded))
        .collect();
    OrgReport {
        organisation: organisation.to_owned(),
        generated_at: rfc3339(generated_unix_ms),
        totals,
        over_budget: refused_by_budget.len(),
        budget_note: refused_by_budget.first().and_then(|d| d.reason.clone()),
        repositories,
    }
}

fn repository(member: &Member) -> RepositoryReport {
    let doc = &member.document;
    let result = doc.result.as_ref();
    let commit = doc.repository.as_ref().and_then(|r| r.commit.clone());
    let score = result
        .and_then(|v| v.get("overall_score").or_else(|| v.get("score")))
        .and_then(Value::as_u64);
    let degraded = result
        .and_then(|v| v.get("degraded"))
        .and_then(Value::as_bool)
        .unwrap_or(doc.state == TaskState::Degraded);
    let findings: Vec<ReportFinding> = result
        .and_then(|v| v.get("findings"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|f| finding(f, &member.url, commit.as_deref()))
                .collect()
        })
        .unwrap_or_default();
    let mut by_severity: BTreeMap<String, usize> =
        SEVERITIES.iter().map(|s| ((*s).to_owned(), 0)).collect();
    let mut by_category: BTreeMap<String, usize> =
        CATEGORIES.iter().map(|c| ((*c).to_owned(), 0)).collect();
    for f in &findings {
        *by_severity.entry(f.severity.clone()).or_insert(0) += 1;
        *by_category.entry(f.category.clone()).or_insert(0) += 1;
    }
    let mut skipped_by_reason: BTreeMap<String, usize> = SkipReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), 0))
        .collect();
    let skipped: Vec<SkippedFile> = doc
        .coverage
        .files_not_reviewed
        .iter()
        .map(|n| SkippedFile {
            path: n.path.clone(),
            kind: n.kind.map_or("other", SkipReason::as_str).to_owned(),
            reason: n.reason.clone(),
        })
        .collect();
    for s in &skipped {
        *skipped_by_reason.entry(s.kind.clone()).or_insert(0) += 1;
    }
    let coverage = CoverageReport {
        files_total: doc.coverage.files_total,
        files_scanned: doc.coverage.files_reviewed.len(),
        files_skipped: skipped.len(),
        skipped_by_reason,
        skipped,
        shards_failed: doc.coverage.shards_failed.len(),
    };
    RepositoryReport {
        name: repository_name(&member.url),
        url: member.url.clone(),
        task_id: doc.id.clone(),
        state: doc.state,
        reason: doc.reason.clone(),
        commit,
        score,
        degraded,
        findings_total: findings.len(),
        by_severity,
        by_category,
        coverage,
        tokens: doc.usage.input_tokens + doc.usage.output_tokens,
        cost_usd: member.cost_usd,
        findings,
    }
}

fn finding(f: &Value, url: &str, commit: Option<&str>) -> ReportFinding {
    let text = |key: &str| f.get(key).and_then(Value::as_str).map(str::to_owned);
    let file = text("file");
    let start_line = f.get("start_line").and_then(Value::as_u64);
    let end_line = f.get("end_line").and_then(Value::as_u64).or(start_line);
    let link = match (file.as_deref(), commit) {
        (Some(path), Some(commit)) => file_link(url, commit, path, start_line, end_line),
        _ => None,
    };
    ReportFinding {
        severity: text("severity").unwrap_or_else(|| "suggestion".to_owned()),
        category: text("category").unwrap_or_else(|| "maintainability".to_owned()),
        title: text("title").unwrap_or_default(),
        file,
        start_line,
        end_line,
        link,
    }
}

/// `owner/repo` of an `https://host/owner/repo(.git)` URL, else the URL as given.
pub fn repository_name(url: &str) -> String {
    if let Some((_, path)) = host_and_path(url) {
        return path;
    }
    // Another git URL (`git@host:owner/repo.git`, `ssh://…`) or a path the scheduler reads:
    // its last two segments name it as people do.
    let trimmed = url.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix(".git").unwrap_or(trimmed);
    let segments: Vec<&str> = trimmed
        .split(['/', ':'])
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        [.., owner, repo] => format!("{owner}/{repo}"),
        _ => url.to_owned(),
    }
}

/// The host and `owner/repo` of an `https://` repository URL (credentials dropped).
fn host_and_path(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = rest.split_once('/')?;
    let host = authority.rsplit('@').next()?;
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let mut parts = path.split('/');
    let (owner, repo) = (parts.next()?, parts.next()?);
    if host.is_empty() || owner.is_empty() || repo.is_empty() || parts.next().is_some() {
        return None;
    }
    Some((host.to_owned(), format!("{owner}/{repo}")))
}

/// `https://{host}/{owner}/{repo}/blob/{commit}/{path}#L{start}-L{end}`, the host taken from the
/// repository's URL; `None` for repositories that are not `https://host/owner/repo`.
pub fn file_link(
    url: &str,
    commit: &str,
    path: &str,
    start: Option<u64>,
    end: Option<u64>,
) -> Option<String> {
    let (host, repo) = host_and_path(url)?;
    let path: String = path
        .split('/')
        .map(percent_encode)
        .collect::<Vec<_>>()
        .join("/");
    let fragment = match (start, end) {
        (Some(s), Some(e)) => format!("#L{s}-L{e}"),
        (Some(s), None) => format!("#L{s}"),
        _ => String::new(),
    };
    Some(format!(
        "https://{host}/{repo}/blob/{commit}/{path}{fragment}"
    ))
}

/// A path segment with everything but unreserved characters percent-encoded.
fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `2026-12-01T22:39:16Z` for a Unix time in milliseconds (proleptic Gregorian calendar).
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
