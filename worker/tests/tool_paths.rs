//! Confinement as a property (SPEC E1, R2): whatever path a model sends to `read`, `ls`, `find`
//! or `grep` — any mix of `..`, `/`, `.`, names and symlink names — nothing outside the snapshot
//! ever shows up in the output, and a path with `..` or a leading `/` is always refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use proptest::prelude::*;
use verdict_backends::repo::Snapshot;
use verdict_proto::wire::Tool;
use verdict_worker::tools::{ToolBox, ToolLimits};

const SECRET: &str = "SECRET-OUTSIDE";

/// `<tmp>/outside.txt` and `<tmp>/outside/secret-name.txt` hold the secret; the snapshot is
/// `<tmp>/snap/root`, with symlinks leading out of it in every way we know.
struct World {
    _tmp: tempfile::TempDir,
    tmp_path: String,
    tools: ToolBox,
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    std::fs::write(base.join("outside.txt"), SECRET).unwrap();
    std::fs::create_dir(base.join("outside")).unwrap();
    std::fs::write(base.join("outside/secret-name.txt"), SECRET).unwrap();
    let root: PathBuf = base.join("snap/root");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f.txt"), "inside\n").unwrap();
    std::fs::write(root.join("top.txt"), "inside top\n").unwrap();
    symlink("a/b", root.join("in_dir")).unwrap();
    symlink("../top.txt", root.join("a/in_file")).unwrap();
    symlink("/etc/passwd", root.join("abs_out")).unwrap();
    symlink("/etc", root.join("abs_dir")).unwrap();
    symlink("../../outside.txt", root.join("rel_out")).unwrap();
    symlink("../../outside", root.join("dir_out")).unwrap();
    symlink("../../../../outside", root.join("a/b/deep_out")).unwrap();
    symlink("..", root.join("a/up")).unwrap();
    symlink("../..", root.join("up2")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    let snapshot = Snapshot::new(&root, "c", ()).unwrap();
    let tools = ToolBox::new(snapshot, &Tool::READ_ONLY, ToolLimits::default());
    World {
        tmp_path: base.display().to_string(),
        _tmp: tmp,
        tools,
    }
}

fn path_strategy() -> impl Strategy<Value = String> {
    let part = prop::sample::select(vec![
        "..",
        ".",
        "",
        "a",
        "b",
        "f.txt",
        "top.txt",
        "in_dir",
        "in_file",
        "abs_out",
        "abs_dir",
        "rel_out",
        "dir_out",
        "deep_out",
        "up",
        "up2",
        "loop",
        "outside",
        "outside.txt",
        "secret-name.txt",
        "etc",
        "passwd",
        "snap",
        "root",
        "...",
        "~",
    ]);
    (
        prop::collection::vec(part, 0..7),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(parts, leading, trailing)| {
            let mut path = parts.join("/");
            if leading {
                path.insert(0, '/');
            }
            if trailing {
                path.push('/');
            }
            path
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_tool_ever_shows_anything_outside_the_snapshot(path in path_strategy()) {
        let world = world();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let calls = [
            ("read", serde_json::json!({ "path": path })),
            ("ls", serde_json::json!({ "path": path })),
            ("find", serde_json::json!({ "glob": "**", "path": path })),
            ("grep", serde_json::json!({ "pattern": "", "path": path })),
        ];
        let must_refuse = path.starts_with('/') || path.split('/').any(|p| p == "..");
        for (tool, arguments) in calls {
            let output = runtime.block_on(world.tools.call(tool, &arguments.to_string()));
            prop_assert!(!output.content.contains(SECRET), "{tool} {path:?}: {}", output.content);
            // Error messages quote the requested path; anything else naming the file is a leak.
            if !path.contains("secret-name") {
                prop_assert!(!output.content.contains("secret-name"), "{tool} {path:?}: {}", output.content);
            }
            prop_assert!(!output.content.contains("root:"), "{tool} {path:?}: /etc/passwd leaked");
            prop_assert!(!output.content.contains(&world.tmp_path), "{tool} {path:?}: host path leaked");
            if must_refuse {
                prop_assert!(output.is_error, "{tool} {path:?} was accepted: {}", output.content);
            }
        }
    }
}
