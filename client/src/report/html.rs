//! The organisation report as one self-contained HTML page: inline CSS, a small inline script
//! that sorts the summary table (by a click on a column, or on load by `#sort=<column>` or
//! `#sort=<column>-desc` in the address), no external assets. Rendered by minijinja from
//! `report.html` with HTML autoescaping on for everything, because titles, paths and reasons
//! come from models and repositories.

use minijinja::{AutoEscape, Environment, context};

use super::{CATEGORIES, OrgReport, SEVERITIES};
use verdict_api::document::SkipReason;

const TEMPLATE: &str = include_str!("report.html");

/// Why the page could not be rendered (a template bug: the template is part of the binary).
#[derive(Debug, thiserror::Error)]
#[error("cannot render the report page: {0}")]
pub struct ReportError(#[from] minijinja::Error);

/// The page of `report`.
pub fn html(report: &OrgReport) -> Result<String, ReportError> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_template("report.html", TEMPLATE)?;
    let reasons: Vec<&str> = SkipReason::ALL.iter().map(|r| r.as_str()).collect();
    let page = env.get_template("report.html")?.render(context! {
        report => minijinja::value::Serde(report),
        severities => SEVERITIES,
        categories => CATEGORIES,
        reasons => reasons,
    })?;
    Ok(page)
}
