//! Contract texts for envelopes, generated from the same field table the parser uses, so the
//! prompt can never describe a different format than the one enforced.

use std::fmt::Write as _;

use super::spec::{EnvelopeSpec, Field, Kind};
use crate::Language;

/// The protocol-specific part of a contract, per language (`en`, `zh-CN`).
#[derive(Debug)]
pub(crate) struct ContractText {
    pub title: (&'static str, &'static str),
    pub rules: &'static [(&'static str, &'static str)],
}

/// Lexical rules every envelope shares (P1 rules 1, 3, 5, 6 and P6), as the model reads them.
/// `{scalars}` and `{texts}` are replaced by the protocol's field names.
const SHARED_RULES: [(&str, &str); 6] = [
    (
        "Fields appear in exactly the order shown, each exactly once; inside each repeated block its fields appear once each, in order. No other tags. List blocks may be empty.",
        "字段必须严格按上面的顺序出现，每个字段恰好一次；可重复的块内部的字段也按顺序各出现一次。不得使用其他标签。列表块可以为空。",
    ),
    (
        "Single-line fields ({scalars}) are written on one line, like <VERSION>1</VERSION>; their values contain no < or >.",
        "单行字段（{scalars}）写在一行内，例如 <VERSION>1</VERSION>；其值不得包含 < 或 >。",
    ),
    (
        "Text fields ({texts}) are written as a line with the opening tag, the text on the following lines, and a line with the closing tag. A short text may be written on one line, like <TITLE>Short title</TITLE>.",
        "文本字段（{texts}）的写法：开始标签独占一行，正文写在随后的行中，结束标签独占一行。较短的文本也可以写在一行内，例如 <TITLE>简短标题</TITLE>。",
    ),
    (
        "Inside a text, never write a line that consists only of a tag: tags stand on their own lines only where the structure puts them.",
        "正文中不得出现只包含一个标签的行：标签只能出现在结构规定的位置，并且独占一行。",
    ),
    (
        "Text fields must not be empty. Where NONE is allowed, it means \"no value\".",
        "文本字段不得为空。允许 NONE 的字段用 NONE 表示“无”。",
    ),
    (
        "Write every natural-language text in English. Tags and listed values (enumeration values, NONE) are never translated.",
        "所有自然语言内容使用简体中文撰写。标签和列出的取值（枚举值、NONE）一律保持原样，不得翻译。",
    ),
];

/// The whole contract: skeleton, the shared lexical rules, then the protocol's own rules.
pub(crate) fn contract_text(spec: &EnvelopeSpec, own: &ContractText, lang: Language) -> String {
    let root = spec.root;
    let (scalars, texts) = field_names(spec);
    let sep = lang.pick(", ", "、");
    let (scalars, texts) = (scalars.join(sep), texts.join(sep));
    let mut out = match lang {
        Language::En => format!(
            "Output contract: {} (<{root}>, version 1).\n\nReturn exactly one <{root}> envelope and nothing else: no greeting, no explanation, no Markdown fence. Use exactly this structure:\n\n",
            own.title.0
        ),
        Language::ZhCn => format!(
            "输出契约：{}（<{root}>，版本 1）。\n\n只返回一个 <{root}> 信封，除此之外不要输出任何内容：不要问候、不要解释、不要使用 Markdown 代码块。严格使用以下结构：\n\n",
            own.title.1
        ),
    };
    out.push_str(&skeleton(spec, lang));
    out.push_str(lang.pick("\nRules:\n", "\n规则：\n"));
    for (i, rule) in SHARED_RULES.iter().chain(own.rules).enumerate() {
        let text = lang
            .pick(rule.0, rule.1)
            .replace("{scalars}", &scalars)
            .replace("{texts}", &texts);
        let _ = writeln!(out, "{}. {text}", i + 1);
    }
    out
}

fn skeleton(spec: &EnvelopeSpec, lang: Language) -> String {
    fn walk(fields: &[Field], lang: Language, out: &mut String) {
        for f in fields {
            let hint = lang.pick(f.hint.0, f.hint.1);
            let t = f.tag;
            match &f.kind {
                Kind::Scalar(_) => {
                    let _ = writeln!(out, "<{t}>{hint}</{t}>");
                }
                Kind::Text => {
                    let _ = writeln!(out, "<{t}>\n{hint}\n</{t}>");
                }
                Kind::Record(_) | Kind::List(_) => {
                    let _ = writeln!(out, "<{t}>");
                    walk(f.children().unwrap_or(&[]), lang, out);
                    let _ = writeln!(out, "</{t}>");
                }
            }
        }
    }
    let mut out = format!("<{}>\n", spec.root);
    walk(spec.fields, lang, &mut out);
    let _ = writeln!(out, "</{}>", spec.root);
    out
}

fn field_names(spec: &EnvelopeSpec) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut scalars = Vec::new();
    let mut texts = Vec::new();
    for f in spec.tags() {
        match f.kind {
            Kind::Scalar(_) => scalars.push(f.tag),
            Kind::Text => texts.push(f.tag),
            Kind::Record(_) | Kind::List(_) => {}
        }
    }
    (scalars, texts)
}
