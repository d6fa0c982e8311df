//! Which lines of a pull request's diff GitHub lets a review comment sit on: the new-side lines
//! (added or context) of each hunk, per file. This is the fake's own small walker over `git diff`
//! output, deliberately independent of `verdict_proto::diff`: the code under test must not grade
//! itself.

/// One hunk of one file: its header and lines, with the new-side line number of each line that
/// has one (deleted lines have none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hunk {
    pub header: String,
    pub lines: Vec<(Option<u32>, String)>,
}

impl Hunk {
    /// The first and last new-side line of the hunk, `None` when it has none (a deleted file).
    fn new_range(&self) -> Option<(u32, u32)> {
        let mut numbers = self.lines.iter().filter_map(|(n, _)| *n);
        let first = numbers.next()?;
        let last = numbers.next_back().unwrap_or(first);
        Some((first, last))
    }

    fn covers(&self, start: u32, end: u32) -> bool {
        self.new_range()
            .is_some_and(|(first, last)| first <= start && end <= last)
    }

    /// The hunk as GitHub shows it above a comment: the header and every line down to `line`.
    pub(super) fn text_until(&self, line: u32) -> String {
        let mut out = self.header.clone();
        for (number, text) in &self.lines {
            out.push('\n');
            out.push_str(text);
            if *number == Some(line) {
                break;
            }
        }
        out
    }
}

/// The hunks of one file, named by its new path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileDiff {
    pub path: String,
    pub hunks: Vec<Hunk>,
}

/// The hunk of `path` that holds every new-side line of `start..=end`, if one does.
pub(crate) fn hunk_for<'a>(
    files: &'a [FileDiff],
    path: &str,
    start: u32,
    end: u32,
) -> Option<&'a Hunk> {
    files
        .iter()
        .filter(|f| f.path == path)
        .flat_map(|f| f.hunks.iter())
        .find(|h| h.covers(start, end))
}

/// GitHub's `position` of a new-side line: lines counted down from the file's first hunk header
/// (the line below it is 1), through later hunks' headers too.
pub(crate) fn position(files: &[FileDiff], path: &str, line: u32) -> Option<u32> {
    let file = files.iter().find(|f| f.path == path)?;
    let mut counter = 0u32;
    for (i, hunk) in file.hunks.iter().enumerate() {
        if i > 0 {
            counter += 1;
        }
        for (number, _) in &hunk.lines {
            counter += 1;
            if *number == Some(line) {
                return Some(counter);
            }
        }
    }
    None
}

/// Reads a unified diff as `git diff` prints it. Lines it does not understand outside hunks
/// (index, mode, rename and binary notes) are skipped; a malformed hunk header ends the hunk.
pub(crate) fn parse(diff: &str) -> Vec<FileDiff> {
    let mut files: Vec<FileDiff> = Vec::new();
    // Lines still expected in the current hunk, old side and new side.
    let mut old_left = 0u32;
    let mut new_left = 0u32;
    let mut next_new = 0u32;
    for raw in diff.lines() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if old_left > 0 || new_left > 0 {
            if let Some(hunk) = files.last_mut().and_then(|f| f.hunks.last_mut()) {
                let kind = line.chars().next();
                match kind {
                    // Some tools strip the single space of an empty context line.
                    Some(' ') | None => {
                        hunk.lines.push((Some(next_new), line.to_owned()));
                        next_new += 1;
                        old_left = old_left.saturating_sub(1);
                        new_left = new_left.saturating_sub(1);
                    }
                    Some('+') => {
                        hunk.lines.push((Some(next_new), line.to_owned()));
                        next_new += 1;
                        new_left = new_left.saturating_sub(1);
                    }
                    Some('-') => {
                        hunk.lines.push((None, line.to_owned()));
                        old_left = old_left.saturating_sub(1);
                    }
                    Some('\\') => hunk.lines.push((None, line.to_owned())),
                    Some(_) => {}
                }
                if matches!(kind, Some(' ' | '+' | '-' | '\\') | None) {
                    // Once both counts are spent the hunk is complete; a "\ No newline" note
                    // after it is skipped below like any other line outside a hunk.
                    continue;
                }
            }
            // A hunk shorter than its header said: read the line as a header.
            old_left = 0;
            new_left = 0;
        }
        if line.starts_with("diff --git ") {
            files.push(FileDiff {
                path: git_header_path(line).unwrap_or_default(),
                hunks: Vec::new(),
            });
        } else if let Some(path) = line.strip_prefix("+++ ") {
            let path = unquote(path.split('\t').next().unwrap_or(path));
            let path = path.strip_prefix("b/").map(str::to_owned).unwrap_or(path);
            match files.last_mut() {
                Some(file) if file.hunks.is_empty() => {
                    if path != "/dev/null" {
                        file.path = path;
                    }
                }
                _ => files.push(FileDiff {
                    path,
                    hunks: Vec::new(),
                }),
            }
        } else if line.starts_with("@@ ") {
            let Some((old_count, new_start, new_count)) = hunk_header(line) else {
                continue;
            };
            let Some(file) = files.last_mut() else {
                continue;
            };
            file.hunks.push(Hunk {
                header: line.to_owned(),
                lines: Vec::new(),
            });
            old_left = old_count;
            new_left = new_count;
            next_new = new_start;
        }
    }
    files
}

/// `@@ -a[,b] +c[,d] @@ …` → (b, c, d); a missing count is 1, as in the format.
fn hunk_header(line: &str) -> Option<(u32, u32, u32)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count = |range: &str| -> Option<(u32, u32)> {
        match range.split_once(',') {
            Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
            None => Some((range.parse().ok()?, 1)),
        }
    };
    let (_, old_count) = count(old)?;
    let (new_start, new_count) = count(new)?;
    Some((old_count, new_start, new_count))
}

/// The `b/` path of `diff --git a/x b/x`, used until a `+++` line names it (files without
/// hunks, such as binary files, have none). Ambiguous with spaces; `+++` settles it.
fn git_header_path(line: &str) -> Option<String> {
    let rest = line.strip_prefix("diff --git ")?;
    if rest.starts_with('"') {
        let end = rest.rfind(" \"b/").or_else(|| rest.rfind(" b/"))?;
        let path = unquote(rest[end + 1..].trim());
        return Some(path.strip_prefix("b/").map(str::to_owned).unwrap_or(path));
    }
    let at = rest.rfind(" b/")?;
    let path = unquote(&rest[at + 1..]);
    Some(path.strip_prefix("b/").map(str::to_owned).unwrap_or(path))
}

/// Git quotes unusual paths C-style (`"b/sp\303\251cial"`); anything else is taken as written.
fn unquote(path: &str) -> String {
    let Some(inner) = path.strip_prefix('"').and_then(|p| p.strip_suffix('"')) else {
        return path.to_owned();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(b'"') => bytes.push(b'"'),
            Some(b'\\') => bytes.push(b'\\'),
            Some(d @ b'0'..=b'7') => {
                let mut value = u32::from(d - b'0');
                for _ in 0..2 {
                    match chars.peek() {
                        Some(&o @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(o - b'0');
                            chars.next();
                        }
                        _ => break,
                    }
                }
                bytes.push(u8::try_from(value).unwrap_or(b'?'));
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const TWO_HUNKS: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,4 +1,5 @@
 fn one() {}
-fn two() {}
+fn two() -> u8 { 2 }
+fn two_and_a_half() {}
 fn three() {}
 fn four() {}
@@ -20,3 +21,3 @@ fn twenty() {}
 fn twenty_one() {}
-fn twenty_two() {}
+fn twenty_two() -> u8 { 22 }
 fn twenty_three() {}
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+hello
+world
\\ No newline at end of file
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/logo.png b/logo.png
index 5555555..6666666 100644
Binary files a/logo.png and b/logo.png differ
";

    #[test]
    fn new_side_lines_per_hunk() {
        let files = parse(TWO_HUNKS);
        let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["src/lib.rs", "new.txt", "gone.txt", "logo.png"]);
        let lib = &files[0];
        assert_eq!(lib.hunks.len(), 2);
        assert_eq!(lib.hunks[0].new_range(), Some((1, 5)));
        assert_eq!(lib.hunks[1].new_range(), Some((21, 23)));
        assert_eq!(files[1].hunks[0].new_range(), Some((1, 2)));
        assert_eq!(files[2].hunks[0].new_range(), None);
        assert!(files[3].hunks.is_empty());
    }

    #[test]
    fn ranges_must_stay_in_one_hunk() {
        let files = parse(TWO_HUNKS);
        assert!(hunk_for(&files, "src/lib.rs", 2, 4).is_some());
        assert!(hunk_for(&files, "src/lib.rs", 21, 23).is_some());
        assert!(
            hunk_for(&files, "src/lib.rs", 4, 21).is_none(),
            "spans two hunks"
        );
        assert!(
            hunk_for(&files, "src/lib.rs", 6, 6).is_none(),
            "between hunks"
        );
        assert!(
            hunk_for(&files, "src/lib.rs", 24, 24).is_none(),
            "after the last hunk"
        );
        assert!(hunk_for(&files, "gone.txt", 1, 1).is_none(), "deleted file");
        assert!(
            hunk_for(&files, "lib.rs", 2, 2).is_none(),
            "paths match exactly"
        );
    }

    #[test]
    fn positions_count_through_later_hunk_headers() {
        let files = parse(TWO_HUNKS);
        assert_eq!(position(&files, "src/lib.rs", 1), Some(1));
        assert_eq!(
            position(&files, "src/lib.rs", 2),
            Some(3),
            "after the deleted line"
        );
        assert_eq!(
            position(&files, "src/lib.rs", 21),
            Some(8),
            "below the second header"
        );
        assert_eq!(position(&files, "new.txt", 2), Some(2));
        assert_eq!(position(&files, "src/lib.rs", 6), None);
    }

    #[test]
    fn hunk_text_stops_at_the_line() {
        let files = parse(TWO_HUNKS);
        let hunk = hunk_for(&files, "src/lib.rs", 3, 3).unwrap();
        assert_eq!(
            hunk.text_until(3),
            "@@ -1,4 +1,5 @@\n fn one() {}\n-fn two() {}\n+fn two() -> u8 { 2 }\n+fn two_and_a_half() {}"
        );
    }

    #[test]
    fn a_deleted_line_that_looks_like_a_header_stays_in_the_hunk() {
        let diff = "--- a/x.md\n+++ b/x.md\n@@ -1,2 +1,2 @@\n--- a rule\n+++ b rule\n keep\n";
        let files = parse(diff);
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "x.md");
        assert_eq!(files[0].hunks[0].new_range(), Some((1, 2)));
    }

    #[test]
    fn quoted_paths_are_unquoted() {
        let diff = "diff --git \"a/sp\\303\\251cial.txt\" \"b/sp\\303\\251cial.txt\"\n--- \"a/sp\\303\\251cial.txt\"\n+++ \"b/sp\\303\\251cial.txt\"\n@@ -1 +1 @@\n-a\n+b\n";
        let files = parse(diff);
        assert_eq!(files[0].path, "spécial.txt");
        assert!(hunk_for(&files, "spécial.txt", 1, 1).is_some());
    }

    #[test]
    fn counts_default_to_one() {
        assert_eq!(hunk_header("@@ -3 +4 @@"), Some((1, 4, 1)));
        assert_eq!(hunk_header("@@ -3,0 +4,2 @@ ctx"), Some((0, 4, 2)));
        assert_eq!(hunk_header("@@ nonsense @@"), None);
    }
}
