//! The diff parser against real git: one throwaway repository with every shape of change a PR can
//! hold, diffed with the option variants reviewers' tooling uses.
//!
//! Each variant's output is stored as a diff case, `data/diff/real-git-<variant>.diff`, whose
//! expected parse (checked by hand against the edits below when it was stored) the table test in
//! `cases/` checks without git. This test runs the installed git and requires its output to parse
//! exactly as the stored output does, so a git whose output would move a commentable line fails
//! here rather than as a misplaced review comment. `VERDICT_BLESS=1` stores the installed git's
//! output instead; bless the cases afterwards (`--test cases`) and review both diffs.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use tempfile::TempDir;
use verdict_proto::diff;

/// Runs git in `repo` with no user or system configuration able to change its output, and fixed
/// dates so that commit ids (which `format-patch` prints) do not change between runs.
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
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
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

const BASE: [&str; 7] = [
    "diff",
    "--no-color",
    "-M",
    "-C",
    "--find-copies-harder",
    "HEAD~1",
    "HEAD",
];

/// A stored git output: its case name, the git command, and text it must hold to exercise what
/// it is there for.
struct Variant {
    case: &'static str,
    args: Vec<&'static str>,
    must_hold: Option<&'static str>,
}

fn variants() -> Vec<Variant> {
    let diff = |extra: &[&'static str]| {
        let mut args = BASE.to_vec();
        args.splice(1..1, extra.iter().copied());
        args
    };
    let mut crlf_only = BASE.to_vec();
    crlf_only.extend(["--", "crlf.txt"]);
    vec![
        Variant {
            case: "real-git-default",
            args: diff(&[]),
            must_hold: None,
        },
        Variant {
            case: "real-git-zero-context",
            args: diff(&["-U0"]),
            must_hold: None,
        },
        Variant {
            case: "real-git-binary-patches",
            args: diff(&["--binary"]),
            must_hold: Some("GIT binary patch"),
        },
        Variant {
            case: "real-git-no-prefix",
            args: diff(&["--no-prefix"]),
            must_hold: None,
        },
        Variant {
            case: "real-git-custom-prefixes",
            args: diff(&["--src-prefix=old/", "--dst-prefix=new/"]),
            must_hold: None,
        },
        Variant {
            case: "real-git-format-patch",
            args: vec![
                "format-patch",
                "--stdout",
                "--no-color",
                "-M",
                "-C",
                "--find-copies-harder",
                "-1",
                "HEAD",
            ],
            must_hold: None,
        },
        Variant {
            case: "real-git-crlf-content",
            args: crlf_only,
            must_hold: Some("+TWO\r\n"),
        },
    ]
}

#[test]
fn installed_git_output_parses_as_the_stored_cases() {
    let (home, repo) = repository();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/diff");
    let bless = std::env::var_os("VERDICT_BLESS").is_some();
    let version = git(home.path(), &repo, &["--version"]);
    let mut failures = Vec::new();
    for variant in variants() {
        let live = git(home.path(), &repo, &variant.args);
        let path = data.join(format!("{}.diff", variant.case));
        if bless {
            fs::write(&path, &live).unwrap();
        }
        let stored = fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with VERDICT_BLESS=1 to store it)",
                path.display()
            )
        });
        if let Some(needle) = variant.must_hold {
            for (what, text) in [("git's output", &live), ("the stored case", &stored)] {
                if !text.contains(needle) {
                    failures.push(format!("{}: {what} lacks {needle:?}", variant.case));
                }
            }
        }
        let live_parse = diff::parse(&live);
        if !live_parse.warnings.is_empty() {
            failures.push(format!(
                "{}: warnings on real git output: {:#?}\n{live}",
                variant.case, live_parse.warnings
            ));
        }
        let stored_parse = diff::parse(&stored);
        if live_parse != stored_parse {
            let first = live_parse
                .files
                .iter()
                .zip(&stored_parse.files)
                .find(|(l, s)| l != s);
            failures.push(format!(
                "{}: `git {}` parses differently from the stored case {} ({} files live, {} \
                 stored); first differing file (live, stored): {first:#?}\nIf git changed, store \
                 its output with VERDICT_BLESS=1 and review the diff.\n--- live output\n{live}",
                variant.case,
                variant.args.join(" "),
                path.display(),
                live_parse.files.len(),
                stored_parse.files.len(),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "with {version}\n{}",
        failures.join("\n\n")
    );
}
