//! The real local model — SmolLM2-135M behind llama.cpp's OpenAI-compatible server, installed by
//! `ops/bin/llm` — driving a review stage end to end, with `structured_output = "auto"` (so the
//! real server is discovered as llama.cpp and takes the envelope's grammar). The model is tiny:
//! under the grammar it often copies the contract (an echo, rejected), and whatever it says the
//! stage must end in a classified outcome, with the repair loop exercised against a real
//! provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verdict_backends::clock::{Clock, SystemClock};
use verdict_backends::repo::MemoryRepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::StageOutcome;
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{
    EventType, InputContent, InputRef, Priority, RepairPolicy, StageKind, StageRequest,
    WIRE_VERSION,
};
use verdict_proto::{Language, ProtocolId, ValidateOptions, validate};
use verdict_testkit::LocalModel;
use verdict_worker::executor::{ExecutorDeps, ExecutorSettings, ProviderRegistry, StageExecutor};
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::{ProviderKind, ProviderSettings, build};

const DIFF: &str = "diff --git a/src/stack.rs b/src/stack.rs\n--- a/src/stack.rs\n+++ b/src/stack.rs\n@@ -1,8 +1,12 @@\n pub struct Stack { items: Vec<i32> }\n \n impl Stack {\n     pub fn push(&mut self, v: i32) { self.items.push(v); }\n-    pub fn pop(&mut self) -> Option<i32> { self.items.pop() }\n+    pub fn pop(&mut self) -> i32 {\n+        let last = self.items[self.items.len() - 1];\n+        self.items.truncate(self.items.len() - 1);\n+        last\n+    }\n }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_stage_on_the_real_local_model_ends_classified() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let server = LocalModel::start(&root, 8192).await;

    let settings = ProviderSettings {
        name: "local".into(),
        kind: ProviderKind::Openai,
        base_url: server.base_url(),
        api_key: None,
        model: "smollm2".into(),
        timeout: Duration::from_secs(180),
        connect_timeout: Duration::from_secs(5),
        max_tokens: Some(256),
        temperature: Some(0.2),
        command: Vec::new(),
        no_tools_flag: None,
        tools_flag: None,
        // `auto`: the worker finds llama.cpp at /props and holds the envelope to its grammar.
        structured_output: verdict_worker::provider::StructuredOutput::Auto,
        structured_bounds: Default::default(),
        context_window: None,
    };
    let mut providers = ProviderRegistry::new();
    providers.insert(build(settings).unwrap());
    let store = Arc::new(MemoryStore::new());
    let executor = StageExecutor::new(
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
    );
    let request = StageRequest {
        version: WIRE_VERSION,
        task_id: "local-smoke".into(),
        stage_id: "review".into(),
        stage: StageKind::Review,
        protocol: ProtocolId::Review,
        required: true,
        attempt: 1,
        priority: Priority::Interactive,
        deadline_unix_ms: SystemClock.now_unix_ms() + 600_000,
        language: Language::En,
        repository: None,
        inputs: vec![
            InputRef {
                name: "pull request title".into(),
                content: InputContent::Inline {
                    text: "Make Stack::pop return the value directly".into(),
                },
            },
            InputRef {
                name: "diff".into(),
                content: InputContent::Inline { text: DIFF.into() },
            },
        ],
        tools: Vec::new(),
        provider: None,
        model: None,
        repair: RepairPolicy {
            mode: RepairMode::Conversation,
            max_attempts: 2,
        },
        structured_output: None,
        validate: ValidateOptions::default(),
        changed_files: None,
    };

    let execution = tokio::time::timeout(
        Duration::from_secs(600),
        executor.execute(&request, &CancellationToken::new()),
    )
    .await
    .expect("the stage ends");
    let outcome = &execution.result.outcome;
    eprintln!(
        "local model outcome: {}",
        serde_json::to_string(outcome).unwrap()
    );
    match outcome {
        StageOutcome::Ok {
            value, attempts, ..
        } => {
            // What the executor accepted is exactly what the protocol accepts.
            let reparsed = validate(
                ProtocolId::Review,
                &ValidateOptions::default(),
                &verdict_proto::review::Review::to_envelope(
                    &serde_json::from_value(value.clone()).unwrap(),
                ),
            );
            assert!(reparsed.is_ok(), "{reparsed:?}");
            assert!(*attempts >= 1);
        }
        StageOutcome::InvalidOutput {
            diagnostics,
            attempts,
            ..
        } => {
            assert!(!diagnostics.is_empty());
            // Both repair rounds, or one when it repeated the invalid answer (decision 182).
            assert!(
                (2..=3).contains(attempts),
                "the original answer and its repair rounds: {attempts}"
            );
            assert_eq!(
                store.events_of_type(EventType::ProtocolRepair).len() as u32,
                attempts - 1
            );
        }
        StageOutcome::ExecutionFailure { kind, message, .. } => {
            panic!("a healthy local server must answer; got execution failure {kind}: {message}")
        }
    }
    let usage = execution.result.usage;
    assert!(
        usage.calls >= 1 && usage.output_tokens > 0,
        "real tokens were generated: {usage:?}"
    );
    assert_eq!(store.transcripts().len(), 1);
}
