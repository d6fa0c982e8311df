//! Confinement (SPEC E1, R2): the one function that turns a path a model asked for into a path
//! the tools may touch. Every tool goes through it; nothing else joins model input to the root.
//!
//! A path is refused outright when it is absolute, contains a `..` component or a NUL byte. A
//! path that survives is joined to the snapshot root and canonicalised (following every symlink);
//! the result must still lie under the root. A path that does not exist, that cannot be resolved,
//! or that resolves outside the root gets one and the same answer, so a model learns nothing about
//! the worker's filesystem, not even whether a file outside the snapshot exists.
//!
//! The snapshot is read-only by convention; an `exec` agent changing symlinks between the check
//! and the use could race it, which is why the walks never follow symlinks at all.

use std::path::{Component, Path, PathBuf};

/// Longer requested paths are refused before touching the filesystem.
const MAX_PATH_BYTES: usize = 4096;

/// Why a requested path is refused; worded for the model (see [`PathError::message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathError {
    Absolute,
    ParentComponent,
    Nul,
    TooLong,
    /// Missing, unresolvable, or outside the snapshot: deliberately indistinguishable.
    NotFound,
}

impl PathError {
    /// What the model is told, quoting the path it asked for.
    pub(crate) fn message(self, requested: &str) -> String {
        let shown = quote(requested);
        match self {
            PathError::Absolute => format!(
                "{shown} is an absolute path; paths are relative to the repository root, e.g. `src/main.rs`"
            ),
            PathError::ParentComponent => format!(
                "{shown} contains `..`; paths are relative to the repository root and cannot leave it"
            ),
            PathError::Nul => "the path contains a NUL byte; remove it".to_owned(),
            PathError::TooLong => format!("the path is longer than {MAX_PATH_BYTES} bytes"),
            PathError::NotFound => format!(
                "{shown} does not exist in the repository; use ls or find to see what is there"
            ),
        }
    }
}

/// A requested path (or other model input) for an error message: backquoted, one line, short.
pub(crate) fn quote(requested: &str) -> String {
    format!(
        "`{}`",
        verdict_proto::redact::safe_preview(requested, 200).replace('\n', " ")
    )
}

/// The canonical path `requested` names under `root` (which must itself be canonical). An empty
/// path and `.` name the root.
pub(crate) fn confine(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    if requested.contains('\0') {
        return Err(PathError::Nul);
    }
    if requested.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    let relative = Path::new(requested);
    if requested.starts_with('/') || relative.is_absolute() {
        return Err(PathError::Absolute);
    }
    let mut joined = root.to_path_buf();
    for component in relative.components() {
        match component {
            Component::Normal(name) => joined.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(PathError::ParentComponent),
            Component::RootDir | Component::Prefix(_) => return Err(PathError::Absolute),
        }
    }
    match joined.canonicalize() {
        Ok(resolved) if resolved.starts_with(root) => Ok(resolved),
        _ => Err(PathError::NotFound),
    }
}

/// How a path under `root` is shown to the model: relative, `/`-separated, `.` for the root.
pub(crate) fn display(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        // Never reached for confined paths; never show an absolute path either.
        Err(_) => "?".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use proptest::prelude::*;

    use super::*;

    /// `<tmp>/outside.txt`, `<tmp>/outside/`, and the snapshot `<tmp>/root` with a tree and
    /// symlinks pointing inside and outside.
    fn hostile_tree() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("outside.txt"), "secret").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/x"), "secret").unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.txt"), "inside").unwrap();
        std::fs::write(root.join("top.txt"), "inside").unwrap();
        symlink("a/b", root.join("in_dir")).unwrap();
        symlink("../top.txt", root.join("a/in_file")).unwrap();
        symlink("/etc/passwd", root.join("abs_out")).unwrap();
        symlink("../outside.txt", root.join("rel_out")).unwrap();
        symlink("../../../outside", root.join("a/b/deep_out")).unwrap();
        symlink("../outside/missing", root.join("missing_out")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        let root = root.canonicalize().unwrap();
        (tmp, root)
    }

    #[test]
    fn refusals() {
        let (_tmp, root) = hostile_tree();
        let cases = [
            ("../outside.txt", PathError::ParentComponent),
            ("a/../../outside.txt", PathError::ParentComponent),
            ("a/..", PathError::ParentComponent),
            ("/etc/passwd", PathError::Absolute),
            ("//etc", PathError::Absolute),
            ("top.txt\0", PathError::Nul),
            ("abs_out", PathError::NotFound),
            ("rel_out", PathError::NotFound),
            ("a/b/deep_out/x", PathError::NotFound),
            ("a/b/deep_out", PathError::NotFound),
            ("missing_out", PathError::NotFound),
            ("loop", PathError::NotFound),
            ("nope.txt", PathError::NotFound),
            ("top.txt/x", PathError::NotFound),
        ];
        for (requested, expected) in cases {
            assert_eq!(confine(&root, requested), Err(expected), "{requested}");
        }
        assert_eq!(confine(&root, &"a/".repeat(3000)), Err(PathError::TooLong));
        // The same words for "outside" and "missing".
        assert_eq!(
            PathError::NotFound
                .message("rel_out")
                .replace("rel_out", "X"),
            PathError::NotFound.message("nope").replace("nope", "X")
        );
    }

    #[test]
    fn paths_inside_resolve() {
        let (_tmp, root) = hostile_tree();
        assert_eq!(confine(&root, "").unwrap(), root);
        assert_eq!(confine(&root, ".").unwrap(), root);
        assert_eq!(confine(&root, "./a//b/").unwrap(), root.join("a/b"));
        assert_eq!(
            confine(&root, "in_dir/f.txt").unwrap(),
            root.join("a/b/f.txt")
        );
        assert_eq!(confine(&root, "a/in_file").unwrap(), root.join("top.txt"));
        assert_eq!(display(&root, &root.join("a/b/f.txt")), "a/b/f.txt");
        assert_eq!(display(&root, &root), ".");
        assert_eq!(display(&root, Path::new("/etc")), "?");
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Whatever string of `..`, `/`, `.`, names and symlink names a model sends, an accepted
        /// path is under the root, and a path with `..` or a leading `/` is never accepted.
        #[test]
        fn never_escapes(parts in prop::collection::vec(
            prop::sample::select(vec![
                "..", ".", "", "a", "b", "f.txt", "top.txt", "in_dir", "in_file", "abs_out",
                "rel_out", "deep_out", "missing_out", "loop", "outside", "outside.txt", "x",
                "etc", "passwd", "...", ".a", "~",
            ]),
            0..8,
        ), leading_slash in any::<bool>(), trailing_slash in any::<bool>()) {
            let (tmp, root) = hostile_tree();
            let mut requested = parts.join("/");
            if leading_slash { requested.insert(0, '/'); }
            if trailing_slash { requested.push('/'); }
            if let Ok(resolved) = confine(&root, &requested) {
                prop_assert!(resolved.starts_with(&root), "{requested} -> {resolved:?}");
                prop_assert!(!resolved.starts_with(tmp.path().join("outside")));
                prop_assert!(!requested.starts_with('/'));
                prop_assert!(!requested.split('/').any(|p| p == ".."));
            }
        }
    }
}
