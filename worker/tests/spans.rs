//! Span structure (SPEC O2): stage → ai_call, tool_call, repair_round → ai_call.
//!
//! Alone in its own test binary: tracing caches callsite interest process-wide, so a span first
//! hit by a parallel test without a subscriber would be disabled here too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::sync::Arc;

use common::{PROSE, VALID_REVIEW, far_future, request, rig_with};
use tokio_util::sync::CancellationToken;
use verdict_backends::repo::MemoryRepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::StageOutcome;
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::StageKind;
use verdict_worker::executor::{ExecutorSettings, StageExecutor};
use verdict_worker::provider::scripted::{ScriptedProvider, Step};

mod spans {
    use std::sync::{Arc, Mutex};

    use tracing::Subscriber;
    use tracing::span::{Attributes, Id};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    /// A span's name and its parent's name.
    pub(crate) type Seen = (String, Option<String>);

    /// Records every span as it is created.
    #[derive(Clone, Default)]
    pub(crate) struct Capture(pub Arc<Mutex<Vec<Seen>>>);

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
        fn on_new_span(&self, _attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            let span = ctx.span(id).unwrap();
            let parent = span.parent().map(|p| p.name().to_owned());
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_owned(), parent));
        }
    }

    pub(crate) fn subscriber(capture: Capture) -> impl Subscriber + Send + Sync {
        tracing_subscriber::registry().with(capture)
    }
}

#[tokio::test(start_paused = true)]
async fn spans_nest_stage_then_ai_calls_tool_calls_and_repair_rounds() {
    use verdict_backends::repo::MemoryTree;
    use verdict_proto::wire::{RepositoryRef, Tool};

    let capture = spans::Capture::default();
    let _guard = tracing::subscriber::set_default(spans::subscriber(capture.clone()));

    let provider = Arc::new(ScriptedProvider::new(
        "scripted",
        "model-a",
        vec![
            Step::tool_call("c1", "read", r#"{"path": "src/lib.rs"}"#),
            Step::text(PROSE),
            Step::text(VALID_REVIEW),
        ],
    ));
    let mut r = rig_with(
        provider,
        ExecutorSettings::default(),
        Arc::new(MemoryStore::new()),
    );
    let repos = MemoryRepositorySource::new().with(
        "repo",
        "c0ffee",
        MemoryTree::new().file("src/lib.rs", "fn f() {}\n"),
    );
    let mut deps = r.executor.deps().clone();
    deps.repositories = Arc::new(repos);
    r.executor = StageExecutor::new(deps, ExecutorSettings::default());
    let mut req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    req.repository = Some(RepositoryRef {
        url: "repo".into(),
        commit: "c0ffee".into(),
        base: None,
    });
    req.tools = Tool::READ_ONLY.to_vec();
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(
        matches!(e.result.outcome, StageOutcome::Ok { repaired: true, .. }),
        "{:?}",
        e.result.outcome
    );

    let seen = capture.0.lock().unwrap().clone();
    let parent_of = |name: &str| -> Vec<Option<String>> {
        seen.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .collect()
    };
    assert_eq!(parent_of("stage"), vec![None]);
    assert_eq!(parent_of("tool_call"), vec![Some("stage".to_owned())]);
    assert_eq!(parent_of("repair_round"), vec![Some("stage".to_owned())]);
    let calls = parent_of("ai_call");
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls
            .iter()
            .filter(|p| p.as_deref() == Some("repair_round"))
            .count(),
        1,
        "the repair call nests in its round"
    );
}
