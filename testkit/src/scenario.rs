//! The end-to-end scenarios' shared material: a configuration that gives every stage its own
//! model on the fake provider (so each stage is scripted separately), valid answers for every
//! stage, and the sample repository with its pull-request-shaped change.

use std::path::{Path, PathBuf};

/// The model each stage uses in [`config_toml`]; script the fake provider by these names.
pub const TRIAGE: &str = "m-triage";
pub const SUMMARY: &str = "m-summary";
pub const REVIEWER: &str = "m-reviewer";
pub const VALIDATOR: &str = "m-validator";
pub const REVIEW: &str = "m-review";
/// The model of stages [`config_toml`] gives no model of their own (scans, issue analyses).
pub const DEFAULT: &str = "m-default";

/// Prose a model writes instead of its contract.
pub const PROSE: &str =
    "Looking at the change, the coupon logic has a few problems. I would request changes.";

pub const TRIAGE_OK: &str =
    r#"{"review": true, "reason": "Adds coupon and pricing logic to the cart."}"#;

pub const SUMMARY_OK: &str = r#"{"summary": "Adds percentage coupons and an average item price to the cart.", "change_type": "feature", "risk": "medium", "files": [{"path": "src/shopcart/cart.py", "summary": "Coupon support and average price."}], "focus_areas": ["Division by zero in average_item_price_cents", "Coupon percentage bounds"]}"#;

pub const REVIEWER_OK: &str = r#"{"findings": [{"severity": "major", "file": "src/shopcart/cart.py", "start_line": 57, "end_line": 59, "quote": "\n    def average_item_price_cents(self) -> int:\n        count = sum(item.quantity for item in self._items.values())", "title": "Division by zero on an empty cart", "description": "average_item_price_cents divides by the item count, which is 0 for an empty cart.", "suggestion": "Return 0 when the cart is empty.", "confidence": 0.9}], "files_reviewed": ["src/shopcart/cart.py"]}"#;

pub const REVIEWER_NONE: &str = r#"{"findings": [], "files_reviewed": ["tests/test_cart.py"]}"#;

pub const VALIDATOR_OK: &str = r#"{"verdicts": [{"id": "F1", "verdict": "confirmed", "severity": null, "reason": "count is 0 for an empty cart."}]}"#;

pub const REVIEW_OK: &str = "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>5</SCORE>\n<DECISION>request_changes</DECISION>\n<DECISION_REASON>\nAn empty cart crashes average_item_price_cents.\n</DECISION_REASON>\n<SUMMARY>\nAdds coupons and an average item price.\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>major</SEVERITY>\n<FILE>src/shopcart/cart.py</FILE>\n<START_LINE>57</START_LINE>\n<END_LINE>59</END_LINE>\n<TITLE>Division by zero on an empty cart</TITLE>\n<DESCRIPTION>\nThe item count is 0 for an empty cart.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n</FINDINGS>\n</SAKURA_REVIEW>\n";

pub const SCAN_OK: &str = "<SAKURA_SCAN>\n<VERSION>1</VERSION>\n<OVERALL_SCORE>80</OVERALL_SCORE>\n<SUMMARY>\nA small cart library with one risky division.\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>minor</SEVERITY>\n<CATEGORY>reliability</CATEGORY>\n<FILE>NONE</FILE>\n<START_LINE>NONE</START_LINE>\n<END_LINE>NONE</END_LINE>\n<TITLE>No tests for empty carts</TITLE>\n<DESCRIPTION>\nNothing covers an empty cart.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n<CONFIDENCE>70</CONFIDENCE>\n</FINDING>\n</FINDINGS>\n</SAKURA_SCAN>\n";

/// Where the run's state lives, so parallel tests never share queues or keys.
#[derive(Debug, Clone)]
pub struct Isolation {
    pub broker_prefix: String,
    pub redis_prefix: String,
}

impl Isolation {
    /// Unique names for one test.
    pub fn unique(test: &str) -> Isolation {
        let n: u64 = rand::random();
        Isolation {
            broker_prefix: format!("e2e-{test}-{n:x}"),
            redis_prefix: format!("e2e:{test}:{n:x}:"),
        }
    }
}

/// A complete configuration for a pool on the fake provider at `base_url`, with one model per
/// stage, one reviewer per file, a one-round repair budget for speed, and fast retries. The
/// sample repository is a local path, which `verdict scheduler` reads only when
/// `[repositories] allow_local_paths` says so.
pub fn config_toml(base_url: &str, isolation: &Isolation, cache_dir: &Path) -> String {
    format!(
        r#"review_timeout_seconds = 120
protocol_repair_max_attempts = 2
output_language = "en"
default_provider = "fake"

[broker]
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
prefix = "{broker}"
delivery_limit = 3
max_requeues = 1

[redis]
url = "redis://127.0.0.1:6379/"
prefix = "{redis}"

[api]
listen = "127.0.0.1:0"
token_env = "VERDICT_API_TOKEN"

[worker]
concurrency = 4
bulk_concurrency = 1
cache_dir = "{cache}"
metrics_listen = "127.0.0.1:0"
shutdown_grace_seconds = 5
# Scenarios run the same work many times and count what the provider is asked: the response
# cache (on in production) is turned on by the tests that are about it.
response_cache = false

[retry]
budget = 1
base_delay_ms = 10
max_delay_ms = 50
max_inline_wait_seconds = 5

[pipeline]
reviewers = 2
triage = true

[repositories]
allow_local_paths = true

[providers.fake]
kind = "openai"
base_url = "{base_url}"
model = "{default}"
timeout_seconds = 20
connect_timeout_seconds = 2

[stages.triage]
model = "{triage}"

[stages.summary]
model = "{summary}"

[stages.reviewer]
model = "{reviewer}"

[stages.validator]
model = "{validator}"

[stages.review]
model = "{review}"
"#,
        broker = isolation.broker_prefix,
        redis = isolation.redis_prefix,
        cache = cache_dir.display(),
        triage = TRIAGE,
        summary = SUMMARY,
        reviewer = REVIEWER,
        validator = VALIDATOR,
        review = REVIEW,
        default = DEFAULT,
    )
}

/// Builds the sample repository (`ops/bin/sample-repo`) in `dir`; base `main` (also its HEAD and
/// tagged `v0.3.0`), head `feature/coupons`.
pub fn sample_repo(dir: &Path) -> std::io::Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/bin/sample-repo");
    let out = std::process::Command::new(script).arg(dir).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "ops/bin/sample-repo failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(dir.to_path_buf())
}

/// A small repository of its own at `dir` (created), for organisation scans: one commit on
/// `main` with a README and a module naming `name`, so that no two repositories have the same
/// content. Two git processes (`init`, `fast-import`), so fifty take well under a second or two.
pub fn small_repo(dir: &Path, name: &str) -> std::io::Result<PathBuf> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1");
        c
    };
    std::fs::create_dir_all(dir)?;
    let init = git(&["init", "--quiet", "-b", "main"]).output()?;
    if !init.status.success() {
        return Err(std::io::Error::other(format!(
            "git init {}: {}",
            dir.display(),
            String::from_utf8_lossy(&init.stderr)
        )));
    }
    let readme = format!("# {name}\n\nA generated repository for organisation scans.\n");
    let module = format!(
        "def {}_total(items):\n    return sum(items) / len(items)\n",
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let mut stream = String::new();
    for (mark, text) in [(1, &readme), (2, &module)] {
        stream.push_str(&format!(
            "blob\nmark :{mark}\ndata {}\n{text}\n",
            text.len()
        ));
    }
    let message = format!("Create {name}");
    stream.push_str(&format!(
        "commit refs/heads/main\ncommitter t <t@t> 1700000000 +0000\ndata {}\n{message}\nM 100644 :1 README.md\nM 100644 :2 src/lib.py\n\n",
        message.len()
    ));
    let mut child = git(&["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(stream.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "git fast-import {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(dir.to_path_buf())
}

/// Scripts the fake provider so that every stage answers validly, forever; tests then override
/// the one stage they are about.
pub fn script_valid_answers(fake: &crate::FakeProvider) {
    use crate::{Behaviour, Script};
    fake.script(TRIAGE, Script::always(Behaviour::text(TRIAGE_OK)));
    fake.script(SUMMARY, Script::always(Behaviour::text(SUMMARY_OK)));
    fake.script(REVIEWER, Script::always(Behaviour::text(REVIEWER_OK)));
    fake.script(VALIDATOR, Script::always(Behaviour::text(VALIDATOR_OK)));
    fake.script(REVIEW, Script::always(Behaviour::text(REVIEW_OK)));
}
