//! The diff parser against real `git diff` output: one throwaway repository with every shape of
//! change a PR can hold, diffed with the option variants reviewers' tooling uses.
//!
//! Expectations are hand-computed from the edits below, so a change in git's output that moves a
//! commentable line shows up here rather than as a misplaced review comment.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use tempfile::TempDir;
use verdict_proto::diff::{self, FileStatus};

type Lines = Vec<(u32, u32)>;

/// Runs git in `repo` with no user or system configuration able to change its output.
fn git(home: &Path, repo: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.autocrlf=false",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "core.quotePath=true",
        ])
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("git output is UTF-8 here")
}

/// Numbered lines with a per-file tag, so that no two files look alike to rename/copy detection.
fn numbered(tag: &str, n: u32) -> String {
    (1..=n).map(|i| format!("{tag} line {i}\n")).collect()
}

fn write(repo: &Path, path: &str, content: impl AsRef<[u8]>) {
    let path = repo.join(path);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(path, content).unwrap();
}

/// A repository whose two commits hold every shape of change; returns (home, repo).
fn repository() -> (TempDir, std::path::PathBuf) {
    let home = TempDir::new().unwrap();
    let repo = home.path().join("repo");
    fs::create_dir(&repo).unwrap();
    let h = home.path();
    git(h, &repo, &["init", "-q", "."]);

    write(&repo, "edit.txt", numbered("edit", 100));
    write(&repo, "gone.txt", numbered("gone", 5));
    write(&repo, "moved.txt", numbered("moved", 10));
    write(&repo, "renamed-edit.txt", numbered("rename", 20));
    write(&repo, "template.txt", numbered("template", 20));
    write(
        &repo,
        "image.bin",
        (0..=255u8).cycle().take(1024).collect::<Vec<u8>>(),
    );
    write(&repo, "script.sh", "#!/bin/sh\necho hi\n");
    write(&repo, "eof.txt", "eof a\neof b\neof c");
    write(&repo, "crlf.txt", "one\r\ntwo\r\nthree\r\n");
    write(&repo, "dir with space/my file.txt", "space one\n");
    write(&repo, "café.txt", "accent x\n");
    write(&repo, "say \"hi\".txt", "quote a\n");
    write(&repo, "shrink.txt", numbered("shrink", 10));
    git(h, &repo, &["add", "-A"]);
    git(h, &repo, &["commit", "-q", "-m", "base"]);

    // edit.txt: three hunks far apart (replace line 5, insert after 50, remove line 95).
    let mut edit: Vec<String> = (1..=100).map(|i| format!("edit line {i}")).collect();
    edit[4] = "edit line 5 changed".into();
    edit.insert(50, "edit inserted".into());
    edit.remove(95);
    write(&repo, "edit.txt", edit.join("\n") + "\n");
    fs::remove_file(repo.join("gone.txt")).unwrap();
    fs::rename(repo.join("moved.txt"), repo.join("moved-renamed.txt")).unwrap();
    fs::remove_file(repo.join("renamed-edit.txt")).unwrap();
    write(
        &repo,
        "renamed-edited.txt",
        numbered("rename", 20).replace("rename line 10\n", "rename line ten\n"),
    );
    write(
        &repo,
        "template-copy.txt",
        numbered("template", 20) + "template appended\n",
    );
    let mut image: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
    image[100] = 0;
    image[700] = 0;
    write(&repo, "image.bin", image);
    write(&repo, "new.bin", b"\0\x01binary\0payload\xff\xfe\0");
    fs::set_permissions(repo.join("script.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    write(&repo, "eof.txt", "eof a\neof b\neof C");
    write(&repo, "crlf.txt", "one\r\nTWO\r\nthree\r\n");
    write(&repo, "dir with space/my file.txt", "space two\n");
    write(&repo, "café.txt", "accent x\naccent y\n");
    write(&repo, "say \"hi\".txt", "quote a\nquote b\n");
    write(&repo, "added.txt", "added 1\nadded 2\nadded 3\n");
    let shrink: String = (1..=10)
        .filter(|i| !(4..=6).contains(i))
        .map(|i| format!("shrink line {i}\n"))
        .collect();
    write(&repo, "shrink.txt", shrink);
    git(h, &repo, &["add", "-A"]);
    git(h, &repo, &["commit", "-q", "-m", "change"]);
    (home, repo)
}

/// Parses git output, which must yield no warnings, into path → commentable ranges.
fn commentable(output: &str) -> BTreeMap<String, Lines> {
    let parsed = diff::parse(output);
    assert!(
        parsed.warnings.is_empty(),
        "warnings on real git output: {:#?}\n{output}",
        parsed.warnings
    );
    let files = parsed.commentable().files;
    let count = files.len();
    let map: BTreeMap<String, Lines> = files.into_iter().map(|f| (f.path, f.lines)).collect();
    assert_eq!(map.len(), count, "a path is listed twice: {map:#?}");
    map
}

fn statuses(output: &str) -> BTreeMap<String, (FileStatus, bool)> {
    diff::parse(output)
        .files
        .into_iter()
        .map(|f| {
            let path = f.path().unwrap().to_owned();
            (path, (f.status, f.binary))
        })
        .collect()
}

fn expected(entries: &[(&str, &[(u32, u32)])]) -> BTreeMap<String, Lines> {
    entries
        .iter()
        .map(|(path, lines)| ((*path).to_owned(), lines.to_vec()))
        .collect()
}

const NO_LINES: &[(u32, u32)] = &[];

/// The expectation for three lines of context (git's default).
fn expected_u3() -> BTreeMap<String, Lines> {
    expected(&[
        ("edit.txt", &[(2, 8), (48, 54), (93, 98)]),
        ("moved-renamed.txt", NO_LINES),
        ("renamed-edited.txt", &[(7, 13)]),
        ("template-copy.txt", &[(18, 21)]),
        ("image.bin", NO_LINES),
        ("new.bin", NO_LINES),
        ("script.sh", NO_LINES),
        ("eof.txt", &[(1, 3)]),
        ("crlf.txt", &[(1, 3)]),
        ("dir with space/my file.txt", &[(1, 1)]),
        ("café.txt", &[(1, 2)]),
        ("say \"hi\".txt", &[(1, 2)]),
        ("added.txt", &[(1, 3)]),
        ("shrink.txt", &[(1, 6)]),
    ])
}

const BASE: [&str; 7] = [
    "diff",
    "--no-color",
    "-M",
    "-C",
    "--find-copies-harder",
    "HEAD~1",
    "HEAD",
];

fn diff_with(home: &Path, repo: &Path, extra: &[&str]) -> String {
    let mut args = BASE.to_vec();
    args.splice(1..1, extra.iter().copied());
    git(home, repo, &args)
}

#[test]
fn default_git_diff() {
    let (home, repo) = repository();
    let output = diff_with(home.path(), &repo, &[]);
    assert_eq!(commentable(&output), expected_u3(), "\n{output}");

    let statuses = statuses(&output);
    let expect = |path: &str, status: FileStatus, binary: bool| {
        assert_eq!(
            statuses.get(path),
            Some(&(status, binary)),
            "{path}: {statuses:#?}"
        );
    };
    expect("gone.txt", FileStatus::Deleted, false);
    expect("added.txt", FileStatus::Added, false);
    expect("moved-renamed.txt", FileStatus::Renamed, false);
    expect("renamed-edited.txt", FileStatus::Renamed, false);
    expect("template-copy.txt", FileStatus::Copied, false);
    expect("image.bin", FileStatus::Modified, true);
    expect("new.bin", FileStatus::Added, true);
    expect("script.sh", FileStatus::ModeChanged, false);
    expect("edit.txt", FileStatus::Modified, false);
    expect("café.txt", FileStatus::Modified, false);

    let parsed = diff::parse(&output);
    let by_path = |p: &str| parsed.files.iter().find(|f| f.path() == Some(p)).unwrap();
    let renamed = by_path("moved-renamed.txt");
    assert_eq!(renamed.old_path.as_deref(), Some("moved.txt"));
    assert_eq!(renamed.similarity, Some(100));
    assert!(renamed.hunks.is_empty());
    assert_eq!(
        by_path("template-copy.txt").old_path.as_deref(),
        Some("template.txt")
    );
    let script = by_path("script.sh");
    assert_eq!(
        (script.old_mode.as_deref(), script.new_mode.as_deref()),
        (Some("100644"), Some("100755"))
    );
    let eof = &by_path("eof.txt").hunks[0];
    assert!(eof.old_missing_newline && eof.new_missing_newline);
    assert_eq!(by_path("edit.txt").hunks.len(), 3);
    assert!(!parsed.commentable().contains("edit.txt", 8, 48));
    assert!(parsed.commentable().contains("edit.txt", 48, 54));
    assert!(!parsed.commentable().contains("gone.txt", 1, 1));
}

#[test]
fn zero_context() {
    let (home, repo) = repository();
    let output = diff_with(home.path(), &repo, &["-U0"]);
    let mut expect = expected_u3();
    for (path, lines) in [
        ("edit.txt", vec![(5, 5), (51, 51)]),
        ("renamed-edited.txt", vec![(10, 10)]),
        ("template-copy.txt", vec![(21, 21)]),
        ("eof.txt", vec![(3, 3)]),
        ("crlf.txt", vec![(2, 2)]),
        ("café.txt", vec![(2, 2)]),
        ("say \"hi\".txt", vec![(2, 2)]),
        // A pure deletion without context leaves nothing to comment on, but the file is listed.
        ("shrink.txt", vec![]),
    ] {
        expect.insert(path.to_owned(), lines);
    }
    assert_eq!(commentable(&output), expect, "\n{output}");
}

#[test]
fn binary_patches_are_skipped() {
    let (home, repo) = repository();
    let output = diff_with(home.path(), &repo, &["--binary"]);
    assert!(output.contains("GIT binary patch"), "{output}");
    assert_eq!(commentable(&output), expected_u3(), "\n{output}");
}

#[test]
fn no_prefix_and_custom_prefixes() {
    let (home, repo) = repository();
    let output = diff_with(home.path(), &repo, &["--no-prefix"]);
    assert_eq!(commentable(&output), expected_u3(), "\n{output}");
    let output = diff_with(
        home.path(),
        &repo,
        &["--src-prefix=old/", "--dst-prefix=new/"],
    );
    assert_eq!(commentable(&output), expected_u3(), "\n{output}");
}

#[test]
fn format_patch_mail() {
    let (home, repo) = repository();
    let output = git(
        home.path(),
        &repo,
        &[
            "format-patch",
            "--stdout",
            "--no-color",
            "-M",
            "-C",
            "--find-copies-harder",
            "-1",
            "HEAD",
        ],
    );
    assert_eq!(commentable(&output), expected_u3(), "\n{output}");
}

#[test]
fn crlf_content_lines_keep_their_numbering() {
    let (home, repo) = repository();
    let mut args = BASE.to_vec();
    args.extend(["--", "crlf.txt"]);
    let output = git(home.path(), &repo, &args);
    assert!(output.contains("+TWO\r\n"), "{output:?}");
    assert_eq!(commentable(&output), expected(&[("crlf.txt", &[(1, 3)])]));
}
