//! P3 — the repository-scan envelope `<SAKURA_SCAN>`: a whole-repository health report.

use serde::{Deserialize, Serialize};

use crate::diagnostic::Collector;
use crate::envelope::{
    self, ContractText, Domain, EnvelopeSpec, Field, Node, Path, Writer, int_in, list_items,
    location, names, one_of, required_text, scalar, text, version,
};
use crate::names::string_enum;
use crate::review::{Severity, write_location};
use crate::{Diagnostics, Language};

/// What a scan finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanCategory {
    Security,
    Performance,
    Reliability,
    Maintainability,
    Architecture,
}

string_enum!(ScanCategory {
    Security => "security",
    Performance => "performance",
    Reliability => "reliability",
    Maintainability => "maintainability",
    Architecture => "architecture",
});

/// A parsed, valid scan report. No score cap applies (SPEC 2a).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanReport {
    pub version: u8,
    /// 1–100.
    pub overall_score: u8,
    pub summary: String,
    pub findings: Vec<ScanFinding>,
}

/// One scan finding; the location follows P1 rule 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanFinding {
    pub severity: Severity,
    pub category: ScanCategory,
    pub file: Option<String>,
    pub start_line: Option<u32>,
    pub end_line: Option<u32>,
    pub title: String,
    pub description: String,
    pub suggestion: Option<String>,
    /// 0–100.
    pub confidence: u8,
}

static FINDING_FIELDS: [Field; 9] = [
    Field::scalar(
        "SEVERITY",
        Domain::OneOf(names::<Severity>),
        (
            "critical|major|minor|suggestion",
            "critical|major|minor|suggestion",
        ),
    ),
    Field::scalar(
        "CATEGORY",
        Domain::OneOf(names::<ScanCategory>),
        (
            "security|performance|reliability|maintainability|architecture",
            "security|performance|reliability|maintainability|architecture",
        ),
    ),
    Field::scalar(
        "FILE",
        Domain::PathOrNone,
        ("repository/path|NONE", "仓库内相对路径|NONE"),
    ),
    Field::scalar(
        "START_LINE",
        Domain::PositiveOrNone,
        ("positive integer|NONE", "正整数|NONE"),
    ),
    Field::scalar(
        "END_LINE",
        Domain::PositiveOrNone,
        ("positive integer|NONE", "正整数|NONE"),
    ),
    Field::text("TITLE", ("short title", "简短标题")),
    Field::text("DESCRIPTION", ("evidence and impact", "证据与影响")),
    Field::text(
        "SUGGESTION",
        ("actionable fix|NONE", "可执行的修复建议|NONE"),
    ),
    Field::scalar("CONFIDENCE", Domain::Int(0, 100), ("0-100", "0-100")),
];
static FINDING: Field = Field::record("FINDING", &FINDING_FIELDS);
static ROOT_FIELDS: [Field; 4] = [
    Field::scalar("VERSION", Domain::Exactly("1"), ("1", "1")),
    Field::scalar("OVERALL_SCORE", Domain::Int(1, 100), ("1-100", "1-100")),
    Field::text(
        "SUMMARY",
        (
            "Markdown summary of the repository's health",
            "Markdown 格式的仓库健康状况总结",
        ),
    ),
    Field::list("FINDINGS", &FINDING),
];
pub(crate) static SPEC: EnvelopeSpec = EnvelopeSpec {
    root: "SAKURA_SCAN",
    fields: &ROOT_FIELDS,
};

static RULES: ContractText = ContractText {
    title: ("repository scan", "仓库扫描"),
    rules: &[
        (
            "OVERALL_SCORE is an integer from 1 (critical state) to 100 (excellent). SEVERITY is critical, major, minor or suggestion; CATEGORY is security, performance, reliability, maintainability or architecture (lowercase). CONFIDENCE is an integer from 0 to 100.",
            "OVERALL_SCORE 是 1（状况危急）到 100（非常好）之间的整数。SEVERITY 取 critical、major、minor 或 suggestion；CATEGORY 取 security、performance、reliability、maintainability 或 architecture（小写）。CONFIDENCE 是 0 到 100 之间的整数。",
        ),
        (
            "FILE is a repository-relative path (such as src/lib.rs) or NONE. FILE NONE requires START_LINE and END_LINE to be NONE; a finding on a file needs both as positive integers, START_LINE not greater than END_LINE.",
            "FILE 是仓库内的相对路径（例如 src/lib.rs）或 NONE。FILE 为 NONE 时，START_LINE 和 END_LINE 也必须为 NONE；针对文件的问题必须给出两个正整数行号，且 START_LINE 不大于 END_LINE。",
        ),
        (
            "SUGGESTION is an actionable fix (code keeps its indentation) or NONE.",
            "SUGGESTION 是可执行的修复建议（代码保留缩进）或 NONE。",
        ),
    ],
};

/// Parses a response as one P3 envelope.
pub fn parse(response: &str) -> Result<ScanReport, Diagnostics> {
    envelope::parse(&SPEC, response, build)
}

/// The P3 contract text for prompts.
pub fn contract_text(language: Language) -> String {
    envelope::contract_text(&SPEC, &RULES, language)
}

fn build(nodes: &[Node<'_, '_>], root: &Path<'_>, c: &mut Collector) -> Option<ScanReport> {
    let version = scalar(nodes, "VERSION", root, c, version);
    let score = scalar(nodes, "OVERALL_SCORE", root, c, |v| {
        int_in("OVERALL_SCORE", v, 1, 100)
    });
    let summary = required_text(nodes, "SUMMARY", root, c);
    let findings = list_items(nodes, root, c, "FINDINGS", "FINDING", finding);
    Some(ScanReport {
        version: version?,
        overall_score: score? as u8,
        summary: summary?,
        findings: findings?,
    })
}

fn finding(nodes: &[Node<'_, '_>], path: &Path<'_>, c: &mut Collector) -> Option<ScanFinding> {
    let severity = scalar(nodes, "SEVERITY", path, c, |v| {
        one_of::<Severity>("SEVERITY", v)
    });
    let category = scalar(nodes, "CATEGORY", path, c, |v| {
        one_of::<ScanCategory>("CATEGORY", v)
    });
    let location = location(nodes, path, c);
    let title = required_text(nodes, "TITLE", path, c);
    let description = required_text(nodes, "DESCRIPTION", path, c);
    let suggestion = text(nodes, "SUGGESTION", path, c, true);
    let confidence = scalar(nodes, "CONFIDENCE", path, c, |v| {
        int_in("CONFIDENCE", v, 0, 100)
    });
    let location = location?;
    Some(ScanFinding {
        severity: severity?,
        category: category?,
        file: location.file,
        start_line: location.start_line,
        end_line: location.end_line,
        title: title?,
        description: description?,
        suggestion: suggestion?,
        confidence: confidence? as u8,
    })
}

impl ScanReport {
    /// Writes this report as a canonical envelope.
    pub fn to_envelope(&self) -> String {
        let root = SPEC.root;
        let mut w = Writer::new(root);
        w.scalar("VERSION", &self.version.to_string());
        w.scalar("OVERALL_SCORE", &self.overall_score.to_string());
        w.text("SUMMARY", Some(&self.summary));
        w.open("FINDINGS");
        for f in &self.findings {
            w.open("FINDING");
            w.scalar("SEVERITY", f.severity.as_str());
            w.scalar("CATEGORY", f.category.as_str());
            write_location(&mut w, f.file.as_deref(), f.start_line, f.end_line);
            w.text("TITLE", Some(&f.title));
            w.text("DESCRIPTION", Some(&f.description));
            w.text("SUGGESTION", f.suggestion.as_deref());
            w.scalar("CONFIDENCE", &f.confidence.to_string());
            w.close("FINDING");
        }
        w.close("FINDINGS");
        w.finish(root)
    }
}
