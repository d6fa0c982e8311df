//! A scan's repository cut into shards (SPEC S4, X4): every file of the commit classified —
//! scanned, or skipped with a reason (excluded by configuration, vendored, generated, binary, too
//! large, beyond the shard limit) — and the scanned files packed, in path order so neighbours
//! share a shard, into shards of at most `scan.shard_tokens` estimated tokens. Pure: intake gives
//! the listing, the pipeline plans one scan stage per shard.

use serde::{Deserialize, Serialize};
use verdict_proto::files::RepoFile;

use crate::ignore::IgnoredPaths;
use verdict_api::document::{Coverage, NotReviewed, SkipReason};

/// Bytes per estimated token: the usual rule of thumb for source code and English text.
pub const BYTES_PER_TOKEN: u64 = 4;

/// The most files one shard lists, whatever their size, so a shard's request stays far below a
/// broker message.
pub const MAX_FILES_PER_SHARD: usize = 1_000;

/// Folder names whose content is someone else's code, checked in (`vendor/`, `node_modules/`…).
const VENDORED_DIRS: &[&str] = &[
    "vendor",
    "vendors",
    "node_modules",
    "bower_components",
    "third_party",
    "third-party",
    "thirdparty",
    "external",
    "Pods",
    "Godeps",
    ".yarn",
];

/// File names a tool writes: lockfiles and their kin.
const GENERATED_NAMES: &[&str] = &[
    "Cargo.lock",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lockb",
    "poetry.lock",
    "Pipfile.lock",
    "uv.lock",
    "pdm.lock",
    "Gemfile.lock",
    "composer.lock",
    "go.sum",
    "flake.lock",
    "mix.lock",
    "pubspec.lock",
    "Podfile.lock",
    "packages.lock.json",
    "gradle.lockfile",
];

/// Name endings of generated files: minified bundles, source maps, protobuf and other codegen.
const GENERATED_SUFFIXES: &[&str] = &[
    ".min.js",
    ".min.css",
    ".min.mjs",
    ".js.map",
    ".css.map",
    ".pb.go",
    ".pb.cc",
    ".pb.h",
    "_pb2.py",
    "_pb2_grpc.py",
    ".pb.swift",
    ".g.dart",
    ".freezed.dart",
    ".designer.cs",
    ".generated.ts",
    ".generated.js",
    ".generated.cs",
    "_generated.go",
    ".gen.go",
];

/// How a scan shards a repository, copied into the task at submission (`[scan]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanSettings {
    /// The estimated tokens of file content one shard holds at most (a single file larger than
    /// this still gets a shard of its own, up to `max_file_bytes`).
    pub shard_tokens: u64,
    /// Files larger than this are skipped as too large.
    pub max_file_bytes: u64,
    /// The most shards (scan stages) one repository gets; files beyond are skipped.
    pub max_shards: usize,
    /// Globs of files a scan leaves out (`*` within a folder, `**` across folders).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl Default for ScanSettings {
    fn default() -> ScanSettings {
        ScanSettings {
            shard_tokens: 60_000,
            max_file_bytes: 200_000,
            max_shards: 64,
            exclude: Vec::new(),
        }
    }
}

/// One shard: the files one scan stage is told are its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanShard {
    pub files: Vec<String>,
    /// The files' estimated tokens together.
    pub tokens: u64,
}

/// What intake decided for a scan: the shards and the coverage (every file, scanned or skipped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanPlan {
    pub shards: Vec<ScanShard>,
    pub coverage: Coverage,
}

/// The estimated tokens of `bytes` of content.
pub fn estimate_tokens(bytes: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// Why `file` is not scanned, if it is not (checked in this order: the configuration's
/// exclusions first, then symbolic links, vendored, generated, binary, too large).
pub fn classify(
    file: &RepoFile,
    exclude: &IgnoredPaths,
    settings: &ScanSettings,
) -> Option<(SkipReason, String)> {
    if let Some(pattern) = exclude.matching(&file.path) {
        return Some((
            SkipReason::Excluded,
            format!("excluded: matches `{pattern}` (scan.exclude)"),
        ));
    }
    if file.symlink {
        return Some((
            SkipReason::Excluded,
            "excluded: a symbolic link (tools never follow links)".to_owned(),
        ));
    }
    let mut folders: Vec<&str> = file.path.split('/').collect();
    let name = folders.pop().unwrap_or_default();
    if let Some(dir) = folders.iter().find(|d| VENDORED_DIRS.contains(d)) {
        return Some((
            SkipReason::Vendored,
            format!("vendored: under a `{dir}/` folder"),
        ));
    }
    if GENERATED_NAMES.contains(&name) {
        return Some((SkipReason::Generated, "generated: a lockfile".to_owned()));
    }
    if let Some(suffix) = GENERATED_SUFFIXES
        .iter()
        .find(|s| name.len() > s.len() && name.ends_with(*s))
    {
        return Some((
            SkipReason::Generated,
            format!("generated: a `*{suffix}` file"),
        ));
    }
    if file.binary {
        return Some((SkipReason::Binary, "binary".to_owned()));
    }
    if file.bytes > settings.max_file_bytes {
        return Some((
            SkipReason::TooLarge,
            format!(
                "too large: {} bytes, over scan.max_file_bytes ({})",
                file.bytes, settings.max_file_bytes
            ),
        ));
    }
    None
}

/// Classifies `files` and packs the scanned ones into shards. Fails only when a `scan.exclude`
/// pattern is not a glob (the configuration check refuses those at start-up).
pub fn plan(files: &[RepoFile], settings: &ScanSettings) -> Result<ScanPlan, String> {
    let exclude = IgnoredPaths::new(&settings.exclude)?;
    let mut sorted: Vec<&RepoFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut coverage = Coverage {
        files_total: sorted.len(),
        ..Coverage::default()
    };
    let budget = settings.shard_tokens.max(1);
    let max_shards = settings.max_shards.max(1);
    let mut shards: Vec<ScanShard> = Vec::new();
    for file in sorted {
        if let Some((kind, reason)) = classify(file, &exclude, settings) {
            coverage
                .files_not_reviewed
                .push(NotReviewed::skipped(&file.path, kind, reason));
            continue;
        }
        let tokens = estimate_tokens(file.bytes);
        let fits = shards.last().is_some_and(|s| {
            s.tokens.saturating_add(tokens) <= budget && s.files.len() < MAX_FILES_PER_SHARD
        });
        if !fits {
            if shards.len() == max_shards {
                coverage.files_not_reviewed.push(NotReviewed::skipped(
                    &file.path,
                    SkipReason::OverBudget,
                    format!(
                        "not scanned: the repository needs more than scan.max_shards ({max_shards}) shards of scan.shard_tokens ({budget})"
                    ),
                ));
                continue;
            }
            shards.push(ScanShard {
                files: Vec::new(),
                tokens: 0,
            });
        }
        if let Some(shard) = shards.last_mut() {
            shard.tokens = shard.tokens.saturating_add(tokens);
            shard.files.push(file.path.clone());
            coverage.files_reviewed.push(file.path.clone());
        }
    }
    Ok(ScanPlan { shards, coverage })
}

/// The id of shard `index` (0-based) of `count`: `scan` when there is one, else `scan-1`….
pub fn stage_id(index: usize, count: usize) -> String {
    if count <= 1 {
        "scan".to_owned()
    } else {
        format!("scan-{}", index + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, bytes: u64) -> RepoFile {
        RepoFile {
            path: path.to_owned(),
            bytes,
            binary: false,
            symlink: false,
        }
    }

    fn reason_of(f: &RepoFile, settings: &ScanSettings) -> Option<SkipReason> {
        let exclude = IgnoredPaths::new(&settings.exclude).unwrap();
        classify(f, &exclude, settings).map(|(k, _)| k)
    }

    #[test]
    fn every_skip_has_its_reason() {
        let settings = ScanSettings {
            exclude: vec!["docs/**".to_owned()],
            max_file_bytes: 100,
            ..ScanSettings::default()
        };
        let cases = [
            (file("src/main.rs", 10), None),
            (file("docs/a/b.md", 10), Some(SkipReason::Excluded)),
            (file("vendor/x/y.go", 10), Some(SkipReason::Vendored)),
            (
                file("web/node_modules/a.js", 10),
                Some(SkipReason::Vendored),
            ),
            (file("Cargo.lock", 10), Some(SkipReason::Generated)),
            (file("web/app.min.js", 10), Some(SkipReason::Generated)),
            (file("api/x.pb.go", 10), Some(SkipReason::Generated)),
            (file("src/big.rs", 101), Some(SkipReason::TooLarge)),
            (file("src/vendorish.rs", 10), None),
            (file(".min.js", 10), None),
        ];
        for (f, want) in cases {
            assert_eq!(reason_of(&f, &settings), want, "{}", f.path);
        }
        let mut bin = file("img/a.png", 10);
        bin.binary = true;
        assert_eq!(reason_of(&bin, &settings), Some(SkipReason::Binary));
        let mut link = file("link", 3);
        link.symlink = true;
        assert_eq!(reason_of(&link, &settings), Some(SkipReason::Excluded));
    }

    #[test]
    fn files_are_packed_in_path_order_within_the_budget() {
        let settings = ScanSettings {
            shard_tokens: 100,
            ..ScanSettings::default()
        };
        // 200 bytes = 50 tokens each: two per shard.
        let files: Vec<RepoFile> = (0..5).map(|i| file(&format!("f{i}.rs"), 200)).collect();
        let p = plan(&files, &settings).unwrap();
        let shards: Vec<Vec<&str>> = p
            .shards
            .iter()
            .map(|s| s.files.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(
            shards,
            [
                vec!["f0.rs", "f1.rs"],
                vec!["f2.rs", "f3.rs"],
                vec!["f4.rs"]
            ]
        );
        assert_eq!(p.shards[0].tokens, 100);
        assert_eq!(p.coverage.files_total, 5);
        assert_eq!(p.coverage.files_reviewed.len(), 5);
    }

    #[test]
    fn a_file_over_the_budget_gets_a_shard_of_its_own_and_the_limit_is_honest() {
        let settings = ScanSettings {
            shard_tokens: 10,
            max_shards: 2,
            ..ScanSettings::default()
        };
        let files = [file("a", 400), file("b", 4), file("c", 4), file("d", 40)];
        let p = plan(&files, &settings).unwrap();
        assert_eq!(p.shards.len(), 2);
        assert_eq!(p.shards[0].files, ["a"]);
        assert_eq!(p.shards[1].files, ["b", "c"]);
        assert_eq!(p.coverage.files_not_reviewed.len(), 1);
        let left = &p.coverage.files_not_reviewed[0];
        assert_eq!(
            (left.path.as_str(), left.kind),
            ("d", Some(SkipReason::OverBudget))
        );
    }

    #[test]
    fn stage_ids() {
        assert_eq!(stage_id(0, 1), "scan");
        assert_eq!(stage_id(2, 3), "scan-3");
    }
}
