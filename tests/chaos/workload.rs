//! The chaos suite's workload: multi-stage reviews submitted through the API by a closed-loop
//! client (at most so many unfinished at once, so the faults meet tasks in every stage) and
//! followed until every one has ended or nothing has moved for a long while.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use verdict_api::document::TaskState;
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_client::client::ApiClient;
use verdict_testkit::FakeProvider;

/// Between two looks at the unfinished tasks.
const POLL: Duration = Duration::from_millis(250);

/// The title of review `n`: the number travels into every prompt of the task (the pull-request
/// title is an input of every stage), which is how the checker tells the fake provider's requests
/// apart by task.
pub(crate) fn title(n: usize) -> String {
    format!("Add percentage coupons (chaos #{n:03})")
}

/// The review number in a text that contains a [`title`].
pub(crate) fn task_number(text: &str) -> Option<usize> {
    let (_, rest) = text.split_once("(chaos #")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// One accepted submission.
#[derive(Debug, Clone)]
pub(crate) struct Submitted {
    pub n: usize,
    pub id: String,
    /// Since the start of the run.
    pub at: Duration,
}

/// Why following stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Every task was submitted and reached a terminal state.
    AllEnded,
    /// The faults were over and nothing moved (no task ended, no provider request) for the quiet
    /// period: what is left will not end.
    Quiet(Duration),
    /// The overall deadline passed.
    Deadline,
}

#[derive(Debug)]
pub(crate) struct Workload {
    client: ApiClient,
    repository: String,
    total: usize,
    max_active: usize,
    pub tasks: Vec<Submitted>,
    /// The last state seen of each task, by id.
    states: BTreeMap<String, TaskState>,
    /// Submissions refused with a retryable error (the API down with Redis), retried with the
    /// same idempotency key.
    pub submit_retries: usize,
}

impl Workload {
    pub(crate) fn new(
        client: ApiClient,
        repository: String,
        total: usize,
        max_active: usize,
    ) -> Self {
        Workload {
            client,
            repository,
            total,
            max_active,
            tasks: Vec::new(),
            states: BTreeMap::new(),
            submit_retries: 0,
        }
    }

    fn submission(&self, n: usize) -> ReviewSubmission {
        ReviewSubmission {
            repository: self.repository.clone(),
            base: "main".into(),
            head: "feature/coupons".into(),
            pipeline: Some("multi".into()),
            title: Some(title(n)),
            options: SubmissionOptions {
                idempotency_key: Some(format!("chaos-{n}")),
                ..SubmissionOptions::default()
            },
            ..ReviewSubmission::default()
        }
    }

    fn unfinished(&self) -> usize {
        self.tasks
            .iter()
            .filter(|t| !self.states.get(&t.id).is_some_and(|s| s.is_terminal()))
            .count()
    }

    /// Submits and follows until [`End`]. `faults` closes when the fault injector is done.
    pub(crate) async fn run(
        &mut self,
        fake: &FakeProvider,
        faults: &watch::Receiver<()>,
        started: Instant,
        quiet: Duration,
        deadline: Instant,
    ) -> End {
        let mut last_move = Instant::now();
        let mut last_mark = (usize::MAX, usize::MAX, usize::MAX);
        loop {
            self.refresh().await;
            while self.tasks.len() < self.total && self.unfinished() < self.max_active {
                if !self.submit_next(started).await {
                    break;
                }
            }
            let unfinished = self.unfinished();
            if self.tasks.len() == self.total && unfinished == 0 {
                return End::AllEnded;
            }
            let mark = (self.tasks.len(), unfinished, fake.request_count());
            if mark != last_mark {
                last_mark = mark;
                last_move = Instant::now();
            }
            let faults_over = faults.has_changed().is_err();
            if faults_over && last_move.elapsed() >= quiet {
                return End::Quiet(quiet);
            }
            if Instant::now() >= deadline {
                return End::Deadline;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Submits review `tasks.len()`; false when the API could not take it now.
    async fn submit_next(&mut self, started: Instant) -> bool {
        let n = self.tasks.len();
        match self.client.submit_review(&self.submission(n)).await {
            Ok(s) => {
                self.states.insert(s.id.clone(), TaskState::Queued);
                self.tasks.push(Submitted {
                    n,
                    id: s.id,
                    at: started.elapsed(),
                });
                true
            }
            Err(e)
                if e.status()
                    .is_some_and(|s| (400..500).contains(&s) && s != 429) =>
            {
                panic!("the API refused chaos review #{n}: {e}")
            }
            Err(_) => {
                self.submit_retries += 1;
                false
            }
        }
    }

    /// Reads the state of every task not known to have ended; a task the API cannot show now
    /// keeps its last known state.
    async fn refresh(&mut self) {
        let open: Vec<String> = self
            .tasks
            .iter()
            .filter(|t| !self.states.get(&t.id).is_some_and(|s| s.is_terminal()))
            .map(|t| t.id.clone())
            .collect();
        // All at once: while Redis is down each read may wait for the API's own timeout.
        let mut reads = tokio::task::JoinSet::new();
        for id in open {
            let client = self.client.clone();
            reads.spawn(async move { (client.task(&id).await, id) });
        }
        while let Some(read) = reads.join_next().await {
            if let Ok((Ok(doc), id)) = read {
                self.states.insert(id, doc.state);
            }
        }
    }
}
