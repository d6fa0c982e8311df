//! Intake probes (issue 34): while a fault lasts, a review is submitted through the API every
//! [`EVERY`], as a client without idempotency keys would — each refusal waited out for its
//! `Retry-After` and the review submitted again until it is accepted — so the suite can say how
//! long intake refused, and that every refusal said when to come back. The accepted reviews are
//! followed to their end like the workload's.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};

use crate::pool::TOKEN;
use crate::workload::{Submitted, title};

/// Between two probes.
const EVERY: Duration = Duration::from_millis(750);
/// The wait after a refusal that named none (which fails the run).
const UNNAMED_WAIT: Duration = Duration::from_secs(1);
/// One probe's submissions end by then, accepted or not.
const PATIENCE: Duration = Duration::from_secs(120);

/// What one submission over HTTP was answered.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub retry_after: Option<String>,
    /// The task id, when it was accepted.
    pub id: Option<String>,
}

/// One submission straight over HTTP, to read its status, code and `Retry-After`.
pub(crate) async fn submit_once(
    api_url: &str,
    submission: &ReviewSubmission,
) -> Result<Answer, String> {
    let response = reqwest::Client::new()
        .post(format!("{api_url}/v1/reviews"))
        .bearer_auth(TOKEN)
        .json(submission)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| format!("the submission failed: {e}"))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    Ok(Answer {
        status,
        code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
        message: body["error"]["message"].as_str().unwrap_or("").to_owned(),
        retry_after,
        id: body["id"].as_str().map(str::to_owned),
    })
}

/// A refused submission.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    /// Since the start of the run.
    pub at: Duration,
    pub answer: Answer,
}

/// What the probes of one fault saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub accepted: Vec<Submitted>,
    pub refusals: Vec<Refusal>,
    /// Answers that were neither an acceptance nor a refusal to wait out.
    pub failures: Vec<String>,
    /// Submissions made, accepted or not.
    pub submissions: usize,
}

impl Seen {
    /// Refusals that did not say when to come back.
    pub(crate) fn unnamed(&self) -> impl Iterator<Item = &Refusal> {
        self.refusals
            .iter()
            .filter(|r| r.answer.retry_after.is_none())
    }

    /// From the first refusal to the last, or `None` when intake never refused.
    pub(crate) fn refused_window(&self) -> Option<(Duration, Duration)> {
        let first = self.refusals.iter().map(|r| r.at).min()?;
        let last = self.refusals.iter().map(|r| r.at).max()?;
        Some((first, last))
    }

    /// The line the fault's table row ends with.
    pub(crate) fn summary(&self) -> String {
        let waits: std::collections::BTreeSet<&str> = self
            .refusals
            .iter()
            .filter_map(|r| r.answer.retry_after.as_deref())
            .collect();
        let codes: std::collections::BTreeSet<String> = self
            .refusals
            .iter()
            .map(|r| format!("{} {}", r.answer.status, r.answer.code))
            .collect();
        let window = match self.refused_window() {
            Some((first, last)) if first == last => format!(
                "intake refused once (+{:.1}s): 1 of {} submissions answered {}, Retry-After {}; {} without one",
                first.as_secs_f64(),
                self.submissions,
                codes.into_iter().collect::<Vec<_>>().join(" / "),
                waits.into_iter().collect::<Vec<_>>().join("/"),
                self.unnamed().count()
            ),
            Some((first, last)) => format!(
                "intake refused for {:.1} s (+{:.1}s .. +{:.1}s): {} of {} submissions answered {}, Retry-After {}; {} without one",
                (last - first).as_secs_f64(),
                first.as_secs_f64(),
                last.as_secs_f64(),
                self.refusals.len(),
                self.submissions,
                codes.into_iter().collect::<Vec<_>>().join(" / "),
                waits.into_iter().collect::<Vec<_>>().join("/"),
                self.unnamed().count()
            ),
            None => format!("intake never refused ({} submissions)", self.submissions),
        };
        format!("{window}; {} probe reviews accepted", self.accepted.len())
    }
}

/// Probes running until [`Probes::stop`].
pub(crate) struct Probes {
    stop: watch::Sender<bool>,
    seen: Arc<Mutex<Seen>>,
    running: tokio::task::JoinHandle<()>,
}

impl Probes {
    /// Starts probing: reviews numbered from `first` (their titles carry the number, as the
    /// workload's do).
    pub(crate) fn start(api_url: &str, repository: &str, first: usize, started: Instant) -> Probes {
        let (stop, stopped) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let running = tokio::spawn(launch(
            api_url.to_owned(),
            repository.to_owned(),
            first,
            started,
            seen.clone(),
            stopped,
        ));
        Probes {
            stop,
            seen,
            running,
        }
    }

    /// How many probes were accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .accepted
            .len()
    }

    /// Waits until `n` probes were accepted, for at most `limit`.
    pub(crate) async fn await_accepted(&self, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.accepted() < n {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    /// Stops launching probes, waits for those in flight to be accepted, and returns what they
    /// saw.
    pub(crate) async fn stop(self) -> Seen {
        let _ = self.stop.send(true);
        let _ = self.running.await;
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Launches a probe every [`EVERY`] until `stopped`, then waits for them all.
async fn launch(
    api_url: String,
    repository: String,
    first: usize,
    started: Instant,
    seen: Arc<Mutex<Seen>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut probes = JoinSet::new();
    for n in first.. {
        let submission = ReviewSubmission {
            repository: repository.clone(),
            base: "main".into(),
            head: "feature/coupons".into(),
            pipeline: Some("multi".into()),
            title: Some(title(n)),
            options: SubmissionOptions::default(),
            ..ReviewSubmission::default()
        };
        probes.spawn(probe(api_url.clone(), submission, n, started, seen.clone()));
        let next = tokio::time::sleep(EVERY);
        tokio::select! {
            () = next => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
    }
    while probes.join_next().await.is_some() {}
}

/// Submits one review until it is accepted, waiting out each refusal's `Retry-After`.
async fn probe(
    api_url: String,
    submission: ReviewSubmission,
    n: usize,
    started: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    let give_up = Instant::now() + PATIENCE;
    let record = |f: &mut dyn FnMut(&mut Seen)| {
        f(&mut seen.lock().unwrap_or_else(PoisonError::into_inner));
    };
    while Instant::now() < give_up {
        let at = started.elapsed();
        let answer = submit_once(&api_url, &submission).await;
        record(&mut |s| s.submissions += 1);
        match answer {
            Ok(Answer {
                status: 202,
                id: Some(id),
                ..
            }) => {
                record(&mut |s| {
                    s.accepted.push(Submitted {
                        n,
                        id: id.clone(),
                        at,
                    });
                });
                return;
            }
            Ok(answer) if answer.status == 429 || answer.status == 503 => {
                let wait = answer
                    .retry_after
                    .as_deref()
                    .and_then(|s| s.parse().ok())
                    .map_or(UNNAMED_WAIT, Duration::from_secs);
                record(&mut |s| {
                    s.refusals.push(Refusal {
                        at,
                        answer: answer.clone(),
                    });
                });
                tokio::time::sleep(wait).await;
            }
            Ok(answer) => {
                record(&mut |s| {
                    s.failures.push(format!(
                        "probe #{n} answered {} {}: {}",
                        answer.status, answer.code, answer.message
                    ));
                });
                return;
            }
            Err(e) => {
                // The scheduler did not answer (it is a process of its own and stays up):
                // noted, and made again.
                record(&mut |s| s.failures.push(format!("probe #{n}: {e}")));
                tokio::time::sleep(UNNAMED_WAIT).await;
            }
        }
    }
    record(&mut |s| {
        s.failures
            .push(format!("probe #{n} was not accepted within {PATIENCE:?}"));
    });
}
