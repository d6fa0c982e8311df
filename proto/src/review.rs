//! P1 — the review envelope `<SAKURA_REVIEW>`: the main review's one answer, and its score caps.

use serde::{Deserialize, Serialize};

use crate::diagnostic::Collector;
use crate::envelope::{
    self, ContractText, Domain, EnvelopeSpec, Field, Node, Path, Writer, int_in, list_items,
    location, names, one_of, required_text, scalar, text, version,
};
use crate::names::string_enum;
use crate::{Diagnostics, Language};

/// The review's recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Approve,
    RequestChanges,
    Comment,
}

pub use crate::severity::Severity;

string_enum!(Decision {
    Approve => "approve",
    RequestChanges => "request_changes",
    Comment => "comment",
});

/// A parsed, valid review envelope. `score` is already capped (P1 rule 7); `model_score` is what
/// the model wrote, kept so the cap is visible rather than silent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub version: u8,
    /// 1–10 after the severity caps.
    pub score: u8,
    /// 1–10 as written by the model.
    pub model_score: u8,
    /// True when a critical or major finding lowered the score.
    pub score_capped: bool,
    pub decision: Decision,
    pub decision_reason: String,
    /// Markdown.
    pub summary: String,
    pub findings: Vec<Finding>,
}

/// One finding. `file: None` means a general finding; then both lines are `None` too, otherwise
/// both are set with `start_line <= end_line` (P1 rule 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    pub file: Option<String>,
    pub start_line: Option<u32>,
    pub end_line: Option<u32>,
    pub title: String,
    pub description: String,
    /// An actionable fix (often code, indentation kept); `None` for `NONE`.
    pub suggestion: Option<String>,
}

static FINDING_FIELDS: [Field; 7] = [
    Field::scalar(
        "SEVERITY",
        Domain::OneOf(names::<Severity>),
        (
            "critical|major|minor|suggestion",
            "critical|major|minor|suggestion",
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
];
static FINDING: Field = Field::record("FINDING", &FINDING_FIELDS);
static ROOT_FIELDS: [Field; 6] = [
    Field::scalar("VERSION", Domain::Exactly("1"), ("1", "1")),
    Field::scalar("SCORE", Domain::Int(1, 10), ("1-10", "1-10")),
    Field::scalar(
        "DECISION",
        Domain::OneOf(names::<Decision>),
        (
            "approve|request_changes|comment",
            "approve|request_changes|comment",
        ),
    ),
    Field::text(
        "DECISION_REASON",
        ("natural-language reason", "自然语言说明的理由"),
    ),
    Field::text("SUMMARY", ("Markdown summary", "Markdown 格式的总结")),
    Field::list("FINDINGS", &FINDING),
];
pub(crate) static SPEC: EnvelopeSpec = EnvelopeSpec {
    root: "SAKURA_REVIEW",
    fields: &ROOT_FIELDS,
};

static RULES: ContractText = ContractText {
    title: ("pull-request review", "拉取请求评审"),
    rules: &[
        (
            "SCORE is an integer from 1 (must not merge) to 10 (ready to merge). DECISION is approve, request_changes or comment. SEVERITY is critical, major, minor or suggestion. These values are lowercase.",
            "SCORE 是 1（不可合并）到 10（可以合并）之间的整数。DECISION 取 approve、request_changes 或 comment。SEVERITY 取 critical、major、minor 或 suggestion。这些取值均为小写。",
        ),
        (
            "Any critical finding caps SCORE at 3; any major finding caps it at 6.",
            "存在 critical 级别的问题时 SCORE 最高为 3；存在 major 级别的问题时最高为 6。",
        ),
        (
            "FILE is a repository-relative path (such as src/lib.rs) or NONE. FILE NONE requires START_LINE and END_LINE to be NONE; a finding on a file needs both as positive integers, START_LINE not greater than END_LINE, pointing at lines of the new version of the file.",
            "FILE 是仓库内的相对路径（例如 src/lib.rs）或 NONE。FILE 为 NONE 时，START_LINE 和 END_LINE 也必须为 NONE；针对文件的问题必须给出两个正整数行号，START_LINE 不大于 END_LINE，行号指向文件新版本中的行。",
        ),
        (
            "SUGGESTION is an actionable fix (code keeps its indentation) or NONE.",
            "SUGGESTION 是可执行的修复建议（代码保留缩进）或 NONE。",
        ),
        (
            "Every actionable item mentioned in SUMMARY must also be a FINDING; file and line references in SUMMARY do not create review comments.",
            "SUMMARY 中提到的每一个需要处理的问题都必须同时作为 FINDING 给出；SUMMARY 中的文件和行号引用不会生成评审评论。",
        ),
    ],
};

/// Parses a response as one P1 envelope.
pub fn parse(response: &str) -> Result<Review, Diagnostics> {
    envelope::parse(&SPEC, response, build)
}

/// The P1 contract text for prompts.
pub fn contract_text(language: Language) -> String {
    envelope::contract_text(&SPEC, &RULES, language)
}

fn build(nodes: &[Node<'_, '_>], root: &Path<'_>, c: &mut Collector) -> Option<Review> {
    let version = scalar(nodes, "VERSION", root, c, version);
    let model_score = scalar(nodes, "SCORE", root, c, |v| int_in("SCORE", v, 1, 10));
    let decision = scalar(nodes, "DECISION", root, c, |v| {
        one_of::<Decision>("DECISION", v)
    });
    let decision_reason = required_text(nodes, "DECISION_REASON", root, c);
    let summary = required_text(nodes, "SUMMARY", root, c);
    let findings = list_items(nodes, root, c, "FINDINGS", "FINDING", finding);

    let findings = findings?;
    let model_score = model_score? as u8;
    let score = findings
        .iter()
        .map(|f| f.severity.score_cap())
        .fold(model_score, u8::min);
    Some(Review {
        version: version?,
        score,
        model_score,
        score_capped: score < model_score,
        decision: decision?,
        decision_reason: decision_reason?,
        summary: summary?,
        findings,
    })
}

fn finding(nodes: &[Node<'_, '_>], path: &Path<'_>, c: &mut Collector) -> Option<Finding> {
    let severity = scalar(nodes, "SEVERITY", path, c, |v| {
        one_of::<Severity>("SEVERITY", v)
    });
    let location = location(nodes, path, c);
    let title = required_text(nodes, "TITLE", path, c);
    let description = required_text(nodes, "DESCRIPTION", path, c);
    let suggestion = text(nodes, "SUGGESTION", path, c, true);
    let location = location?;
    Some(Finding {
        severity: severity?,
        file: location.file,
        start_line: location.start_line,
        end_line: location.end_line,
        title: title?,
        description: description?,
        suggestion: suggestion?,
    })
}

impl Review {
    /// Writes this review as a canonical envelope (with the model's uncapped score, so that
    /// parsing the output gives back this value).
    pub fn to_envelope(&self) -> String {
        let root = SPEC.root;
        let mut w = Writer::new(root);
        w.scalar("VERSION", &self.version.to_string());
        w.scalar("SCORE", &self.model_score.to_string());
        w.scalar("DECISION", self.decision.as_str());
        w.text("DECISION_REASON", Some(&self.decision_reason));
        w.text("SUMMARY", Some(&self.summary));
        w.open("FINDINGS");
        for f in &self.findings {
            w.open("FINDING");
            w.scalar("SEVERITY", f.severity.as_str());
            write_location(&mut w, f.file.as_deref(), f.start_line, f.end_line);
            w.text("TITLE", Some(&f.title));
            w.text("DESCRIPTION", Some(&f.description));
            w.text("SUGGESTION", f.suggestion.as_deref());
            w.close("FINDING");
        }
        w.close("FINDINGS");
        w.finish(root)
    }
}

pub(crate) fn write_location(
    w: &mut Writer,
    file: Option<&str>,
    start: Option<u32>,
    end: Option<u32>,
) {
    let line = |l: Option<u32>| l.map_or_else(|| "NONE".to_owned(), |n| n.to_string());
    w.scalar("FILE", file.unwrap_or("NONE"));
    w.scalar("START_LINE", &line(start));
    w.scalar("END_LINE", &line(end));
}
