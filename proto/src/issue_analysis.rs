//! P2 — the issue-analysis envelope `<SAKURA_ISSUE_ANALYSIS>`: triage of a new issue.

use serde::{Deserialize, Serialize};

use crate::diagnostic::Collector;
use crate::envelope::{
    self, ContractText, Domain, EnvelopeSpec, Field, Node, Path, Writer, int_in, list_items, names,
    one_of, required_text, scalar, text, version,
};
use crate::names::string_enum;
use crate::{Diagnostics, Language};

/// How urgent an issue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    Critical,
    High,
    Medium,
    Low,
}

string_enum!(Priority {
    Critical => "critical",
    High => "high",
    Medium => "medium",
    Low => "low",
});

/// A parsed, valid issue analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssueAnalysis {
    pub version: u8,
    pub category: String,
    pub priority: Priority,
    pub summary: String,
    pub feasibility: String,
    pub suggested_labels: Vec<LabelSuggestion>,
    pub suggested_assignees: Vec<AssigneeSuggestion>,
    pub suggested_milestone: Option<String>,
    /// Issue number this one duplicates.
    pub duplicate_of: Option<u64>,
    pub suggested_title: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelSuggestion {
    pub name: String,
    /// 0–1.
    pub confidence: f64,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssigneeSuggestion {
    pub username: String,
    /// 0–1.
    pub confidence: f64,
    pub reason: String,
}

static LABEL_FIELDS: [Field; 3] = [
    Field::scalar("NAME", Domain::Line, ("label name", "标签名")),
    Field::scalar(
        "CONFIDENCE",
        Domain::Fraction,
        ("number from 0 to 1", "0 到 1 之间的数"),
    ),
    Field::text("REASON", ("why this label fits", "为什么适用该标签")),
];
static LABEL: Field = Field::record("LABEL", &LABEL_FIELDS);
static ASSIGNEE_FIELDS: [Field; 3] = [
    Field::scalar("USERNAME", Domain::Word, ("login", "用户名")),
    Field::scalar(
        "CONFIDENCE",
        Domain::Fraction,
        ("number from 0 to 1", "0 到 1 之间的数"),
    ),
    Field::text("REASON", ("why this person", "为什么指派给此人")),
];
static ASSIGNEE: Field = Field::record("ASSIGNEE", &ASSIGNEE_FIELDS);
static ROOT_FIELDS: [Field; 10] = [
    Field::scalar("VERSION", Domain::Exactly("1"), ("1", "1")),
    Field::scalar("CATEGORY", Domain::Line, ("category", "类别")),
    Field::scalar(
        "PRIORITY",
        Domain::OneOf(names::<Priority>),
        ("critical|high|medium|low", "critical|high|medium|low"),
    ),
    Field::text("SUMMARY", ("what the issue is about", "议题内容概述")),
    Field::text(
        "FEASIBILITY",
        (
            "how it could be addressed, and how hard",
            "可行性与实现难度",
        ),
    ),
    Field::list("SUGGESTED_LABELS", &LABEL),
    Field::list("SUGGESTED_ASSIGNEES", &ASSIGNEE),
    Field::text("SUGGESTED_MILESTONE", ("milestone|NONE", "里程碑|NONE")),
    Field::scalar(
        "DUPLICATE_OF",
        Domain::PositiveOrNone,
        ("issue number|NONE", "议题编号|NONE"),
    ),
    Field::text(
        "SUGGESTED_TITLE",
        ("clearer title|NONE", "更清晰的标题|NONE"),
    ),
];
pub(crate) static SPEC: EnvelopeSpec = EnvelopeSpec {
    root: "SAKURA_ISSUE_ANALYSIS",
    fields: &ROOT_FIELDS,
};

static RULES: ContractText = ContractText {
    title: ("issue analysis", "议题分析"),
    rules: &[
        (
            "CATEGORY is a single line; when categories are configured it must be one of them, written exactly. PRIORITY is critical, high, medium or low (lowercase).",
            "CATEGORY 写在一行内；如果配置了类别列表，必须与其中之一完全一致。PRIORITY 取 critical、high、medium 或 low（小写）。",
        ),
        (
            "SUGGESTED_LABELS holds zero or more <LABEL> blocks and SUGGESTED_ASSIGNEES zero or more <ASSIGNEE> blocks. NAME and USERNAME are not empty; CONFIDENCE is a number from 0 to 1, such as 0.8.",
            "SUGGESTED_LABELS 包含零个或多个 <LABEL> 块，SUGGESTED_ASSIGNEES 包含零个或多个 <ASSIGNEE> 块。NAME 和 USERNAME 不得为空；CONFIDENCE 是 0 到 1 之间的数，例如 0.8。",
        ),
        (
            "SUGGESTED_MILESTONE and SUGGESTED_TITLE are a text or NONE. DUPLICATE_OF is the number of the issue this one duplicates (a positive integer) or NONE.",
            "SUGGESTED_MILESTONE 和 SUGGESTED_TITLE 为文本或 NONE。DUPLICATE_OF 是被重复的议题编号（正整数）或 NONE。",
        ),
    ],
};

/// Parses a response as one P2 envelope; `categories`, when configured, is the allowed set.
pub fn parse(response: &str, categories: Option<&[String]>) -> Result<IssueAnalysis, Diagnostics> {
    envelope::parse(&SPEC, response, |nodes, root, c| {
        build(nodes, root, c, categories)
    })
}

/// The P2 contract text for prompts.
pub fn contract_text(language: Language) -> String {
    envelope::contract_text(&SPEC, &RULES, language)
}

/// The P2 contract text with the configured category set spelled out, as prompts show it when
/// categories are configured.
pub fn contract_text_with_categories(language: Language, categories: &[String]) -> String {
    let mut text = contract_text(language);
    let list = categories.join(", ");
    text.push_str(&match language {
        Language::En => format!("CATEGORY must be exactly one of: {list}.\n"),
        Language::ZhCn => format!("CATEGORY 必须是以下之一（原样书写）：{list}。\n"),
    });
    text
}

fn build(
    nodes: &[Node<'_, '_>],
    root: &Path<'_>,
    c: &mut Collector,
    categories: Option<&[String]>,
) -> Option<IssueAnalysis> {
    let version = scalar(nodes, "VERSION", root, c, version);
    let category = scalar(nodes, "CATEGORY", root, c, |v| category(v, categories));
    let priority = scalar(nodes, "PRIORITY", root, c, |v| {
        one_of::<Priority>("PRIORITY", v)
    });
    let summary = required_text(nodes, "SUMMARY", root, c);
    let feasibility = required_text(nodes, "FEASIBILITY", root, c);
    let labels = list_items(nodes, root, c, "SUGGESTED_LABELS", "LABEL", |f, at, c| {
        suggestion(f, at, c, "NAME", |v| non_empty_single("NAME", v))
    });
    let assignees = list_items(
        nodes,
        root,
        c,
        "SUGGESTED_ASSIGNEES",
        "ASSIGNEE",
        |f, at, c| suggestion(f, at, c, "USERNAME", username),
    );
    let milestone = text(nodes, "SUGGESTED_MILESTONE", root, c, true);
    let duplicate_of = scalar(nodes, "DUPLICATE_OF", root, c, |v| {
        if v == "NONE" {
            Ok(None)
        } else {
            int_in("DUPLICATE_OF", v, 1, u64::from(u32::MAX))
                .map(Some)
                .map_err(|_| format!("DUPLICATE_OF must be an issue number (a positive integer) or NONE, found \"{}\"", envelope::preview(v)))
        }
    });
    let title = text(nodes, "SUGGESTED_TITLE", root, c, true);
    Some(IssueAnalysis {
        version: version?,
        category: category?,
        priority: priority?,
        summary: summary?,
        feasibility: feasibility?,
        suggested_labels: labels?
            .into_iter()
            .map(|(name, confidence, reason)| LabelSuggestion {
                name,
                confidence,
                reason,
            })
            .collect(),
        suggested_assignees: assignees?
            .into_iter()
            .map(|(username, confidence, reason)| AssigneeSuggestion {
                username,
                confidence,
                reason,
            })
            .collect(),
        suggested_milestone: milestone?,
        duplicate_of: duplicate_of?,
        suggested_title: title?,
    })
}

fn category(v: &str, categories: Option<&[String]>) -> Result<String, String> {
    let name = non_empty_single("CATEGORY", v)?;
    match categories {
        Some(allowed) if !allowed.iter().any(|a| a == &name) => Err(format!(
            "CATEGORY must be one of the configured categories ({}), found \"{}\"",
            allowed.join(", "),
            envelope::preview(&name)
        )),
        _ => Ok(name),
    }
}

fn non_empty_single(tag: &str, v: &str) -> Result<String, String> {
    if v.is_empty() {
        Err(format!("{tag} must not be empty"))
    } else {
        Ok(v.to_owned())
    }
}

fn username(v: &str) -> Result<String, String> {
    let name = non_empty_single("USERNAME", v)?;
    if name.chars().any(char::is_whitespace) {
        return Err(format!(
            "USERNAME must be one login without spaces, found \"{}\"",
            envelope::preview(&name)
        ));
    }
    Ok(name)
}

/// A number from 0 to 1 written in plain decimal notation (`0`, `1`, `0.75`, `.5`).
fn confidence(v: &str) -> Result<f64, String> {
    let plain = !v.is_empty()
        && v.len() <= 20
        && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && v.bytes().filter(|&b| b == b'.').count() <= 1
        && v.bytes().any(|b| b.is_ascii_digit());
    match v.parse::<f64>() {
        Ok(n) if plain && (0.0..=1.0).contains(&n) => Ok(n),
        _ => Err(format!(
            "CONFIDENCE must be a number from 0 to 1 such as 0.8, found \"{}\"",
            envelope::preview(v)
        )),
    }
}

/// The NAME/USERNAME, CONFIDENCE and REASON of one `<LABEL>` or `<ASSIGNEE>` block.
fn suggestion(
    fields: &[Node<'_, '_>],
    at: &Path<'_>,
    c: &mut Collector,
    name_tag: &'static str,
    name: impl Fn(&str) -> Result<String, String>,
) -> Option<(String, f64, String)> {
    let n = scalar(fields, name_tag, at, c, name);
    let conf = scalar(fields, "CONFIDENCE", at, c, confidence);
    let reason = required_text(fields, "REASON", at, c);
    Some((n?, conf?, reason?))
}

impl IssueAnalysis {
    /// The safe result when the envelope is still invalid after repair (SPEC 2a): category
    /// `other`, priority `medium`, feasibility "cannot be assessed", no suggestions. The caller
    /// marks it as a protocol failure.
    pub fn degraded(language: Language) -> IssueAnalysis {
        IssueAnalysis {
            version: 1,
            category: "other".to_owned(),
            priority: Priority::Medium,
            summary: language
                .pick(
                    "The analysis could not be completed: the model's answer did not follow the required format.",
                    "分析未能完成：模型的回答不符合要求的格式。",
                )
                .to_owned(),
            feasibility: language.pick("cannot be assessed", "无法评估").to_owned(),
            suggested_labels: Vec::new(),
            suggested_assignees: Vec::new(),
            suggested_milestone: None,
            duplicate_of: None,
            suggested_title: None,
        }
    }

    /// Writes this analysis as a canonical envelope.
    pub fn to_envelope(&self) -> String {
        let root = SPEC.root;
        let mut w = Writer::new(root);
        w.scalar("VERSION", &self.version.to_string());
        w.scalar("CATEGORY", &self.category);
        w.scalar("PRIORITY", self.priority.as_str());
        w.text("SUMMARY", Some(&self.summary));
        w.text("FEASIBILITY", Some(&self.feasibility));
        w.open("SUGGESTED_LABELS");
        for l in &self.suggested_labels {
            w.open("LABEL");
            w.scalar("NAME", &l.name);
            w.scalar("CONFIDENCE", &l.confidence.to_string());
            w.text("REASON", Some(&l.reason));
            w.close("LABEL");
        }
        w.close("SUGGESTED_LABELS");
        w.open("SUGGESTED_ASSIGNEES");
        for a in &self.suggested_assignees {
            w.open("ASSIGNEE");
            w.scalar("USERNAME", &a.username);
            w.scalar("CONFIDENCE", &a.confidence.to_string());
            w.text("REASON", Some(&a.reason));
            w.close("ASSIGNEE");
        }
        w.close("SUGGESTED_ASSIGNEES");
        w.text("SUGGESTED_MILESTONE", self.suggested_milestone.as_deref());
        w.scalar(
            "DUPLICATE_OF",
            &self
                .duplicate_of
                .map_or_else(|| "NONE".to_owned(), |n| n.to_string()),
        );
        w.text("SUGGESTED_TITLE", self.suggested_title.as_deref());
        w.finish(root)
    }
}
