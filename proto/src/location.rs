//! The one rule for paths models put in findings and comments: repository-relative, inside the
//! repository. A finding elsewhere can never be anchored, so every protocol rejects it the same way.

/// Why `path` is not a repository-relative path inside the repository, or `None` when it is.
/// The reason completes a sentence such as "FILE must be …" / "\"file\" must be …".
pub fn repository_path_problem(path: &str) -> Option<String> {
    // The preview is built only on the error path: this runs for every finding.
    let shown = || crate::redact::safe_preview(path, 80);
    if path.starts_with('/') || path.starts_with('\\') || path.as_bytes().get(1) == Some(&b':') {
        let shown = shown();
        return Some(format!(
            "a repository-relative path such as src/lib.rs, found the absolute path \"{shown}\""
        ));
    }
    if path.split(['/', '\\']).any(|segment| segment == "..") {
        let shown = shown();
        return Some(format!(
            "a path inside the repository, found \"{shown}\" with a .. segment"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relative_paths_inside_the_repository_pass() {
        for ok in ["src/lib.rs", "a b/c.txt", "..hidden/x", "x/..y"] {
            assert_eq!(repository_path_problem(ok), None, "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "\\x",
            "C:\\x",
            "../x",
            "a/../../b",
            "a\\..\\b",
        ] {
            assert!(repository_path_problem(bad).is_some(), "{bad}");
        }
    }
}
