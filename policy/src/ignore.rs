//! `pipeline.ignore_paths`: the globs of files no reviewer is shown, compiled once, and how a
//! file they leave out says so (its coverage reason), so the pipeline can tell such a file from
//! one left out for another reason.

use crate::task::DiffFile;

/// How the reason of a file left out by `pipeline.ignore_paths` starts.
const IGNORED: &str = "ignored: ";

/// Why a file `pattern` matches is left out.
pub fn reason(pattern: &str) -> String {
    format!("{IGNORED}matches `{pattern}` (pipeline.ignore_paths)")
}

/// Whether `file` was left out because `pipeline.ignore_paths` matches it.
pub fn is_ignored(file: &DiffFile) -> bool {
    file.excluded
        .as_deref()
        .is_some_and(|r| r.starts_with(IGNORED))
}

/// The globs of `pipeline.ignore_paths`, compiled (`*` stays within a folder, `**` crosses
/// folders, as in `.gitignore`).
#[derive(Debug, Clone, Default)]
pub struct IgnoredPaths {
    patterns: Vec<(String, globset::GlobMatcher)>,
}

impl IgnoredPaths {
    /// Compiles `patterns`; the error names the pattern that is not a glob.
    pub fn new(patterns: &[String]) -> Result<IgnoredPaths, String> {
        let patterns = patterns
            .iter()
            .map(|p| {
                globset::GlobBuilder::new(p)
                    .literal_separator(true)
                    .build()
                    .map(|g| (p.clone(), g.compile_matcher()))
                    .map_err(|e| format!("`{p}` is not a glob: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(IgnoredPaths { patterns })
    }

    /// The first pattern `path` matches.
    pub fn matching(&self, path: &str) -> Option<&str> {
        self.patterns
            .iter()
            .find(|(_, m)| m.is_match(path))
            .map(|(p, _)| p.as_str())
    }
}
