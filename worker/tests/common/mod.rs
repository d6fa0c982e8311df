//! Shared rig for the executor tests on the scripted provider: memory backends, virtual time.

#![allow(dead_code, clippy::unwrap_used)] // each test binary uses part of the rig

use std::sync::Arc;

use verdict_backends::clock::{Clock, TokioClock};
use verdict_backends::ratelimit::memory::MemoryRateLimiter;
use verdict_backends::repo::MemoryRepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{
    InputContent, InputRef, Priority, RepairPolicy, StageKind, StageRequest, WIRE_VERSION,
};
use verdict_proto::{Language, ValidateOptions};
use verdict_worker::executor::{ExecutorDeps, ExecutorSettings, ProviderRegistry, StageExecutor};
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::scripted::{ScriptedProvider, Step};

pub(crate) const VALID_REVIEW: &str = "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>8</SCORE>\n<DECISION>approve</DECISION>\n<DECISION_REASON>\nFine.\n</DECISION_REASON>\n<SUMMARY>\nSmall change.\n</SUMMARY>\n<FINDINGS>\n</FINDINGS>\n</SAKURA_REVIEW>\n";
pub(crate) const PROSE: &str = "The change looks good to me. I would approve it with a score of 8.";
/// Another invalid answer: a round that repeats the one before ends the repair (decision 182).
pub(crate) const PROSE_AGAIN: &str = "As I said, it looks fine: approve, score 8.";

pub(crate) struct Rig {
    pub executor: StageExecutor,
    pub provider: Arc<ScriptedProvider>,
    /// Events, transcripts, the journal and inputs.
    pub store: Arc<MemoryStore>,
    pub registry: prometheus::Registry,
    pub clock: Arc<TokioClock>,
}

pub(crate) fn rig(steps: Vec<Step>, settings: ExecutorSettings) -> Rig {
    rig_with(
        Arc::new(ScriptedProvider::new("scripted", "model-a", steps)),
        settings,
        Arc::new(MemoryStore::new()),
    )
}

pub(crate) fn rig_with(
    provider: Arc<ScriptedProvider>,
    settings: ExecutorSettings,
    store: Arc<MemoryStore>,
) -> Rig {
    rig_over(provider, settings, store, MemoryRepositorySource::new())
}

/// A rig whose stages see the repositories of `repositories`.
pub(crate) fn rig_over(
    provider: Arc<ScriptedProvider>,
    settings: ExecutorSettings,
    store: Arc<MemoryStore>,
    repositories: MemoryRepositorySource,
) -> Rig {
    let mut providers = ProviderRegistry::new();
    providers.insert(provider.clone());
    let registry = prometheus::Registry::new();
    let clock = Arc::new(TokioClock::new());
    let deps = ExecutorDeps {
        providers,
        repositories: Arc::new(repositories),
        inputs: store.clone(),
        journal: store.clone(),
        cache: store.clone(),
        transcripts: store.clone(),
        events: store.clone(),
        limiter: Arc::new(MemoryRateLimiter::new()),
        metrics: WorkerMetrics::register(&registry).unwrap(),
        clock: clock.clone(),
    };
    Rig {
        executor: StageExecutor::new(deps, settings),
        provider,
        store,
        registry,
        clock,
    }
}

pub(crate) fn request(
    stage: StageKind,
    mode: RepairMode,
    max: u8,
    deadline_unix_ms: u64,
) -> StageRequest {
    StageRequest {
        version: WIRE_VERSION,
        task_id: "task-1".into(),
        stage_id: format!("{}-1", stage.as_str()),
        stage,
        protocol: stage.default_protocol(),
        required: true,
        attempt: 1,
        priority: Priority::Interactive,
        deadline_unix_ms,
        language: Language::En,
        repository: None,
        inputs: vec![InputRef {
            name: "diff".into(),
            content: InputContent::Inline {
                text: "diff --git a/src/lib.rs b/src/lib.rs\n+fn f() {}\n".into(),
            },
        }],
        tools: vec![],
        provider: None,
        model: None,
        repair: RepairPolicy {
            mode,
            max_attempts: max,
        },
        structured_output: None,
        validate: ValidateOptions::default(),
        changed_files: None,
    }
}

pub(crate) fn far_future(r: &Rig) -> u64 {
    r.clock.now_unix_ms() + 600_000
}

pub(crate) fn counter(registry: &prometheus::Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric().to_vec())
        .filter(|m| {
            labels.iter().all(|(k, v)| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            })
        })
        .map(|m| m.get_counter().get_value())
        .sum()
}
