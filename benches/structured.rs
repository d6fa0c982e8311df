//! The structured-output benchmark (issue 13): how often the real tiny local model (SmolLM2-135M
//! behind llama.cpp, installed by `ops/bin/llm`) meets each stage contract, with and without the
//! contract sent as a decoding constraint. Every try is one whole stage through the real
//! `StageExecutor` — the prompt a worker builds, the repair rounds, echo detection — against the
//! real server. A benchmark, not a test: it asserts nothing and is never run by `cargo test`.
//!
//! ```text
//! cargo bench --bench structured -- [--tries 10] [--modes off,auto]
//!     [--stages triage,summary,reviewer,validator,review] [--max-tokens 512]
//!     [--repairs 2] [--out target/bench]
//! ```
//!
//! Per mode and stage it reports: tries whose first answer was valid, tries that ended valid,
//! tries rejected only as echoes of the contract (`echoed-contract`), other invalid outputs,
//! execution failures, repair rounds per try, and seconds and output tokens per call. Writes
//! `structured.md` and `structured.json` into `--out` and prints the Markdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a benchmark harness: a panic is a failed run, and its report goes to stdout

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use verdict_backends::clock::{Clock, SystemClock};
use verdict_backends::repo::MemoryRepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::StageOutcome;
use verdict_proto::repair::RepairMode;
use verdict_proto::structured::{Bounds, StructuredOutput};
use verdict_proto::wire::{
    InputContent, InputRef, Priority, RepairPolicy, StageKind, StageRequest, WIRE_VERSION,
    input_name,
};
use verdict_proto::{DiagnosticCode, Language, ValidateOptions};
use verdict_testkit::LocalModel;
use verdict_worker::executor::{ExecutorDeps, ExecutorSettings, ProviderRegistry, StageExecutor};
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::{ProviderKind, ProviderSettings, build};

const DIFF: &str = "diff --git a/src/stack.rs b/src/stack.rs\n--- a/src/stack.rs\n+++ b/src/stack.rs\n@@ -1,8 +1,12 @@\n pub struct Stack { items: Vec<i32> }\n \n impl Stack {\n     pub fn push(&mut self, v: i32) { self.items.push(v); }\n-    pub fn pop(&mut self) -> Option<i32> { self.items.pop() }\n+    pub fn pop(&mut self) -> i32 {\n+        let last = self.items[self.items.len() - 1];\n+        self.items.truncate(self.items.len() - 1);\n+        last\n+    }\n }\n";

/// What a configuration for a model this small would set (`structured_max_items = 2`,
/// `structured_max_length = 80`): short lists and texts, so that even a model that fills every
/// text to its bound ends its answer within the output limit.
const BOUNDS: Bounds = Bounds {
    max_items: 2,
    max_length: 80,
    max_lines: 3,
};

struct Args {
    tries: u32,
    modes: Vec<StructuredOutput>,
    stages: Vec<StageKind>,
    max_tokens: u32,
    repairs: u8,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        tries: 10,
        modes: vec![StructuredOutput::Off, StructuredOutput::Auto],
        stages: vec![
            StageKind::Triage,
            StageKind::Summary,
            StageKind::Reviewer,
            StageKind::Validator,
            StageKind::Review,
        ],
        max_tokens: 512,
        repairs: 2,
        out: PathBuf::from("target/bench"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--tries" => a.tries = value().parse().expect("--tries N"),
            "--max-tokens" => a.max_tokens = value().parse().expect("--max-tokens N"),
            "--repairs" => a.repairs = value().parse().expect("--repairs N"),
            "--out" => a.out = PathBuf::from(value()),
            "--modes" => {
                a.modes = value()
                    .split(',')
                    .map(|m| {
                        *StructuredOutput::ALL
                            .iter()
                            .find(|x| x.as_str() == m)
                            .unwrap_or_else(|| panic!("unknown mode {m}"))
                    })
                    .collect()
            }
            "--stages" => {
                a.stages = value()
                    .split(',')
                    .map(|s| {
                        StageKind::ALL
                            .into_iter()
                            .find(|k| k.as_str() == s)
                            .unwrap_or_else(|| panic!("unknown stage {s}"))
                    })
                    .collect()
            }
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn inline(name: &str, text: &str) -> InputRef {
    InputRef {
        name: name.into(),
        content: InputContent::Inline { text: text.into() },
    }
}

/// What the pipeline gives each stage, for the one sample change.
fn inputs(stage: StageKind) -> Vec<InputRef> {
    let mut v = vec![
        inline(
            "pull request title",
            "Make Stack::pop return the value directly",
        ),
        inline(input_name::DIFF, DIFF),
    ];
    if stage == StageKind::Validator {
        v.push(inline(
            "summary (from the summary stage)",
            &json!({"summary": "Stack::pop now returns the last value instead of an Option.", "change_type": "refactor", "risk": "medium", "files": [{"path": "src/stack.rs", "summary": "pop indexes the last item"}], "focus_areas": ["empty stack"]}).to_string(),
        ));
        v.push(inline(
            input_name::CANDIDATES,
            &json!([{"id": "F1", "finding": {"severity": "major", "file": "src/stack.rs", "start_line": 6, "end_line": 6, "title": "pop panics on an empty stack", "description": "items.len() - 1 underflows when the stack is empty.", "suggestion": null, "confidence": 0.9}, "raised_by": ["reviewer-1"]}]).to_string(),
        ));
    }
    v
}

fn request(stage: StageKind, try_no: u32, repairs: u8) -> StageRequest {
    let protocol = stage.default_protocol();
    StageRequest {
        version: WIRE_VERSION,
        task_id: format!("bench-{}-{try_no}", stage.as_str()),
        stage_id: stage.as_str().into(),
        stage,
        protocol,
        required: true,
        attempt: 1,
        priority: Priority::Interactive,
        deadline_unix_ms: SystemClock.now_unix_ms() + 900_000,
        language: Language::En,
        repository: None,
        inputs: inputs(stage),
        tools: Vec::new(),
        provider: None,
        model: None,
        repair: RepairPolicy {
            mode: RepairMode::default_for(protocol),
            max_attempts: repairs,
        },
        structured_output: None,
        validate: ValidateOptions::default(),
        changed_files: None,
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(300)
        .collect()
}

#[derive(Default, serde::Serialize)]
struct Tally {
    tries: u32,
    first_valid: u32,
    valid: u32,
    echo: u32,
    invalid: u32,
    failed: u32,
    repair_rounds: u32,
    calls: u32,
    output_tokens: u64,
    seconds: f64,
}

fn executor(base_url: &str, mode: StructuredOutput, max_tokens: u32) -> StageExecutor {
    let settings = ProviderSettings {
        name: "local".into(),
        kind: ProviderKind::Openai,
        base_url: base_url.to_owned(),
        api_key: None,
        model: "smollm2".into(),
        timeout: Duration::from_secs(300),
        connect_timeout: Duration::from_secs(5),
        max_tokens: Some(max_tokens),
        temperature: Some(0.2),
        command: Vec::new(),
        no_tools_flag: None,
        tools_flag: None,
        structured_output: mode,
        structured_bounds: BOUNDS,
        context_window: None,
    };
    let mut providers = ProviderRegistry::new();
    providers.insert(build(settings).unwrap());
    let store = Arc::new(MemoryStore::new());
    StageExecutor::new(
        ExecutorDeps {
            providers,
            repositories: Arc::new(MemoryRepositorySource::new()),
            inputs: store.clone(),
            journal: store.clone(),
            cache: store.clone(),
            transcripts: store.clone(),
            events: store.clone(),
            limiter: Arc::new(verdict_backends::ratelimit::memory::MemoryRateLimiter::new()),
            metrics: WorkerMetrics::register(&prometheus::Registry::new()).unwrap(),
            clock: Arc::new(SystemClock),
        },
        ExecutorSettings::default(),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = LocalModel::start(Path::new(env!("CARGO_MANIFEST_DIR")), 8192).await;
    let base_url = server.base_url();

    let mut rows: Vec<(StructuredOutput, StageKind, Tally)> = Vec::new();
    for &mode in &a.modes {
        let executor = executor(&base_url, mode, a.max_tokens);
        for &stage in &a.stages {
            let mut t = Tally::default();
            for try_no in 0..a.tries {
                // A fresh task id per try: no journal entry or cache is reused.
                let req = request(stage, try_no, a.repairs);
                let start = Instant::now();
                let x = executor.execute(&req, &CancellationToken::new()).await;
                t.seconds += start.elapsed().as_secs_f64();
                t.tries += 1;
                t.calls += x.result.usage.calls;
                t.output_tokens += x.result.usage.output_tokens;
                match &x.result.outcome {
                    StageOutcome::Ok {
                        repaired, attempts, ..
                    } => {
                        t.valid += 1;
                        t.first_valid += u32::from(!repaired);
                        t.repair_rounds += attempts.saturating_sub(1);
                    }
                    StageOutcome::InvalidOutput {
                        diagnostics,
                        attempts,
                        ..
                    } => {
                        let echo = !diagnostics.is_empty()
                            && diagnostics
                                .as_slice()
                                .iter()
                                .all(|d| d.code == DiagnosticCode::EchoedContract);
                        if echo {
                            t.echo += 1;
                        } else {
                            t.invalid += 1;
                        }
                        t.repair_rounds += attempts.saturating_sub(1);
                    }
                    StageOutcome::ExecutionFailure { .. } => t.failed += 1,
                }
                let why = match &x.result.outcome {
                    StageOutcome::InvalidOutput { error, .. } => format!(": {}", one_line(error)),
                    StageOutcome::ExecutionFailure { message, .. } => {
                        format!(": {}", one_line(message))
                    }
                    StageOutcome::Ok { .. } => String::new(),
                };
                eprintln!(
                    "structured: {} {} try {}: {} in {:.1} s{why}",
                    mode.as_str(),
                    stage.as_str(),
                    try_no + 1,
                    x.result.outcome.label(),
                    start.elapsed().as_secs_f64()
                );
            }
            rows.push((mode, stage, t));
        }
    }
    server.stop().await;

    let mut md = format!(
        "Local model: SmolLM2-135M-Instruct (BF16) on llama.cpp, one thread, 8,192-token context; {} tries per stage and mode, at most {} output tokens per call, {} repair rounds, bounds of {} items and {} characters ({} lines of envelope text).\n\n",
        a.tries, a.max_tokens, a.repairs, BOUNDS.max_items, BOUNDS.max_length, BOUNDS.max_lines
    );
    md.push_str("| mode | stage (protocol) | first answer valid | ended valid | rejected as echo | valid or echo | other invalid | execution failure | repair rounds per try | s per call | output tokens per call |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (mode, stage, t) in &rows {
        let per_call = |x: f64| {
            if t.calls == 0 {
                0.0
            } else {
                x / f64::from(t.calls)
            }
        };
        md.push_str(&format!(
            "| {} | {} ({}) | {}/{} | {}/{} | {}/{} | {}/{} | {} | {} | {:.1} | {:.1} | {:.0} |\n",
            mode.as_str(),
            stage.as_str(),
            stage.default_protocol().as_str(),
            t.first_valid,
            t.tries,
            t.valid,
            t.tries,
            t.echo,
            t.tries,
            t.valid + t.echo,
            t.tries,
            t.invalid,
            t.failed,
            f64::from(t.repair_rounds) / f64::from(t.tries.max(1)),
            per_call(t.seconds),
            per_call(t.output_tokens as f64),
        ));
    }
    println!("{md}");
    std::fs::create_dir_all(&a.out).unwrap();
    std::fs::write(a.out.join("structured.md"), &md).unwrap();
    let json: Vec<_> = rows
        .iter()
        .map(|(m, s, t)| json!({"mode": m.as_str(), "stage": s.as_str(), "tally": t}))
        .collect();
    std::fs::write(
        a.out.join("structured.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
}
