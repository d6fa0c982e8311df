//! `VERDICT_*` environment overrides, applied onto the parsed TOML tree before validation so the
//! same checks cover a value whichever way it came in.
//!
//! `VERDICT_<PATH>` with `__` between path segments sets the key at `<PATH>`:
//! `VERDICT_REVIEW_TIMEOUT_SECONDS`, `VERDICT_BROKER__URL`, `VERDICT_PROVIDERS__LOCAL__BASE_URL`,
//! `VERDICT_STAGES__ISSUE_ANALYSIS__MODEL`. Segments match case-insensitively, with `_` standing
//! for `-` in provider and stage names. The value is parsed as the key's type: integers, numbers,
//! booleans (`true`/`false`/`1`/`0`), comma-separated lists for arrays, text as is.
//!
//! A `VERDICT_*` variable that is no configuration key is an error, so a typo is never silently
//! ignored, unless verdict reads it for something else ([`KNOWN_ENV_VARS`]) or the configuration
//! itself names it as a key source (`api_key_env`, `api.token_env`, `github.*_env`).

use std::collections::{BTreeMap, BTreeSet};

use toml::{Table, Value};
use verdict_proto::wire::StageKind;

use super::ConfigError;
use super::defaults::{API_TOKEN_ENV, KNOWN_ENV_VARS};
use super::raw::{self, Field, Kind, Names};

const PREFIX: &str = "VERDICT_";

/// Which keys environment variables set, as dotted keys spelled as in the file.
#[derive(Debug, Default)]
pub(super) struct Origins {
    /// Key → the variable that set it.
    keys: BTreeMap<String, String>,
    /// Table → the variable whose key created it (a provider only the environment defines).
    tables: BTreeMap<String, String>,
}

impl Origins {
    /// The variable that set `key`, or that created a table containing it.
    pub(super) fn var_for(&self, key: &str) -> Option<&str> {
        let inside = |table: &str| key.starts_with(table) && key[table.len()..].starts_with('.');
        self.keys
            .get(key)
            .or_else(|| {
                self.tables
                    .iter()
                    .find(|(t, _)| key == t.as_str() || inside(t))
                    .map(|(_, v)| v)
            })
            .map(String::as_str)
    }
}

/// Where a variable points.
struct Target {
    /// Path segments as spelled in the file.
    path: Vec<String>,
    kind: Kind,
}

/// Applies every `VERDICT_*` override in `env` to `tree`.
pub(super) fn apply(tree: &mut Table, env: &[(String, String)]) -> Result<Origins, ConfigError> {
    // Sorted, so the first error reported does not depend on the environment's order.
    let vars: BTreeMap<&str, &str> = env
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX) && !KNOWN_ENV_VARS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut origins = Origins::default();
    let mut unresolved = Vec::new();
    for (var, value) in vars {
        let target = match resolve(tree, var) {
            Ok(target) => target,
            Err(problem) => {
                unresolved.push((var, problem));
                continue;
            }
        };
        let value = parse_value(value, target.kind).map_err(|problem| ConfigError::Env {
            var: var.to_owned(),
            problem: format!("{problem} (config key {})", target.path.join(".")),
        })?;
        let key = target.path.join(".");
        if let Some(other) = origins.keys.get(&key) {
            return Err(ConfigError::Env {
                var: var.to_owned(),
                problem: format!("sets config key {key}, which {other} sets too; keep one"),
            });
        }
        for created in set(tree, &target.path, value, var)? {
            origins
                .tables
                .entry(created)
                .or_insert_with(|| var.to_owned());
        }
        origins.keys.insert(key, var.to_owned());
    }
    let sources = key_sources(tree);
    if let Some((var, problem)) = unresolved
        .into_iter()
        .find(|(var, _)| !sources.contains(*var))
    {
        return Err(ConfigError::Env {
            var: var.to_owned(),
            problem: format!(
                "{problem}. A VERDICT_* variable must be a configuration key (VERDICT_<PATH> with __ between segments, e.g. VERDICT_BROKER__URL) or one verdict reads otherwise: {}",
                KNOWN_ENV_VARS.join(", ")
            ),
        });
    }
    Ok(origins)
}

/// The variables the configuration names as secret sources: they are read, not overrides.
fn key_sources(tree: &Table) -> BTreeSet<String> {
    let mut names = BTreeSet::from([API_TOKEN_ENV.to_owned()]);
    let str_at = |t: &Table, k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(api) = tree.get("api").and_then(Value::as_table) {
        names.extend(str_at(api, "token_env"));
    }
    if let Some(github) = tree.get("github").and_then(Value::as_table) {
        for key in ["token_env", "app_private_key_env", "webhook_secret_env"] {
            names.extend(str_at(github, key));
        }
    }
    if let Some(providers) = tree.get("providers").and_then(Value::as_table) {
        for provider in providers.values().filter_map(Value::as_table) {
            names.extend(str_at(provider, "api_key_env"));
        }
    }
    names
}

/// The key `var` names, or why it names none.
fn resolve(tree: &Table, var: &str) -> Result<Target, String> {
    let rest = &var[PREFIX.len()..];
    if rest.is_empty() {
        return Err("names no configuration key".to_owned());
    }
    let segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    let mut fields: &'static [Field] = raw::ROOT;
    let mut path: Vec<String> = Vec::new();
    let mut existing: Option<&Table> = Some(tree);
    let mut i = 0;
    while let Some(segment) = segments.get(i) {
        let here = if path.is_empty() {
            "at the top level".to_owned()
        } else {
            format!("in [{}]", path.join("."))
        };
        let Some(field) = raw::field(fields, segment) else {
            return Err(format!(
                "there is no key `{segment}` {here}{}; valid keys: {}",
                super::validate::suggestion(segment, fields.iter().map(|f| f.name)),
                raw::names(fields)
            ));
        };
        path.push(field.name.to_owned());
        existing = existing
            .and_then(|t| t.get(field.name))
            .and_then(Value::as_table);
        i += 1;
        match field.kind {
            Kind::Table(inner) => {
                if i == segments.len() {
                    return Err(table_not_value(&path, inner));
                }
                fields = inner;
            }
            Kind::Named(inner, names) => {
                let Some(name_segment) = segments.get(i) else {
                    return Err(format!(
                        "config key {} is a table of named tables; set one key, e.g. {}{}__<NAME>__{}",
                        path.join("."),
                        PREFIX,
                        path.join("__").to_ascii_uppercase(),
                        inner.first().map_or("", |f| f.name).to_ascii_uppercase()
                    ));
                };
                let name = entry_name(existing, name_segment, names, &path)?;
                existing = existing
                    .and_then(|t| t.get(&name))
                    .and_then(Value::as_table);
                path.push(name);
                i += 1;
                if i == segments.len() {
                    return Err(table_not_value(&path, inner));
                }
                fields = inner;
            }
            kind => {
                if i != segments.len() {
                    return Err(format!(
                        "config key {} is a value, not a table; use {}{}",
                        path.join("."),
                        PREFIX,
                        segments[..i].join("__").to_ascii_uppercase()
                    ));
                }
                return Ok(Target { path, kind });
            }
        }
    }
    Err("names no configuration key".to_owned())
}

fn table_not_value(path: &[String], fields: &[Field]) -> String {
    format!(
        "config key {} is a table; set one of its keys ({}) with {}{}__<KEY>",
        path.join("."),
        raw::names(fields),
        PREFIX,
        path.join("__").to_ascii_uppercase().replace('-', "_")
    )
}

/// The entry of a named table (`providers`, `stages`) a segment names, spelled as in the file.
fn entry_name(
    existing: Option<&Table>,
    segment: &str,
    names: Names,
    path: &[String],
) -> Result<String, String> {
    let normal = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    match names {
        Names::Stages => StageKind::ALL
            .iter()
            .map(|s| s.as_str())
            .find(|s| normal(s) == segment)
            .map(str::to_owned)
            .ok_or_else(|| {
                format!(
                    "`{segment}` is not a stage; valid stages (with _ for -): {}",
                    stage_names()
                )
            }),
        Names::Any => {
            let matches: Vec<&String> = existing
                .map(|t| t.keys().filter(|k| normal(k) == segment).collect())
                .unwrap_or_default();
            match matches.as_slice() {
                [] => Ok(segment.to_owned()),
                [one] => Ok((*one).clone()),
                several => Err(format!(
                    "`{segment}` matches several entries of [{}] ({}); rename them so they differ in more than case and -/_",
                    path.join("."),
                    several
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
    }
}

pub(super) fn stage_names() -> String {
    StageKind::ALL
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a variable's text as a value of `kind`.
fn parse_value(text: &str, kind: Kind) -> Result<Value, String> {
    match kind {
        Kind::Str => Ok(Value::String(text.to_owned())),
        Kind::Int => text
            .trim()
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|_| format!("`{text}` is not an integer")),
        Kind::Float => match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Value::Float(v)),
            _ => Err(format!("`{text}` is not a number")),
        },
        Kind::Bool => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(Value::Boolean(true)),
            "false" | "0" => Ok(Value::Boolean(false)),
            _ => Err(format!("`{text}` is not a boolean (true or false)")),
        },
        Kind::List => Ok(Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        )),
        Kind::Table(_) | Kind::Named(..) => Err("is a table, not a value".to_owned()),
    }
}

/// Sets `value` at `path`, creating the tables on the way; returns the tables it created.
fn set(
    tree: &mut Table,
    path: &[String],
    value: Value,
    var: &str,
) -> Result<Vec<String>, ConfigError> {
    let mut created = Vec::new();
    let Some((last, parents)) = path.split_last() else {
        return Ok(created);
    };
    let mut table = tree;
    for (depth, segment) in parents.iter().enumerate() {
        if !table.contains_key(segment) {
            created.push(path[..=depth].join("."));
        }
        let entry = table
            .entry(segment.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        table = match entry {
            Value::Table(t) => t,
            other => {
                return Err(ConfigError::Key {
                    key: path[..=depth].join("."),
                    value: Some(other.type_str().to_owned()),
                    problem: format!(
                        "must be a table (environment variable {var} sets a key in it)"
                    ),
                    env_var: None,
                });
            }
        };
    }
    table.insert(last.clone(), value);
    Ok(created)
}
