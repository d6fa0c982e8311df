//! The chaos suite's checker, in the manner of Jepsen's total-queue checker: from the outside
//! only — the API's task documents and events, the fake provider's request and answer log, the
//! dead-letter queue — it proves every submitted task reached exactly one terminal state (none
//! lost, none duplicated) and no stage was paid twice, and prints the table.
//!
//! A provider call is identified from the recorded request by (task, stage, turn): the task by
//! the number in its title (every stage's prompt carries the pull-request title), the stage by
//! the model (one per stage kind in the scenario configuration) and, for reviewers, the diff
//! files fenced in the prompt, and the turn by the number of messages in the conversation (a
//! repair round or a tool turn adds messages; a re-run of the same attempt does not). A call is
//! paid when the fake answered it 200; 429s and requests a killed worker abandoned before the
//! answer cost nothing. The same call paid twice is a stage paid twice: the response journal
//! (SPEC E7) should have answered the second time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use verdict_api::document::{TaskDocument, TaskState};
use verdict_proto::wire::EventType;
use verdict_testkit::scenario::{REVIEWER, SUMMARY, TRIAGE, VALIDATOR};
use verdict_testkit::{Answer, RecordedRequest};

use crate::faults::{Fault, KILL_WORKER, Poison};
use crate::workload::{End, Submitted, task_number};

/// A fault "explains" what happened this long before it began (a call in flight when a worker
/// was killed started up to 2 s earlier) or after it was over (recovery).
const BEFORE: Duration = Duration::from_millis(2500);
const AFTER: Duration = Duration::from_secs(3);
/// A call answered this close before its worker was killed may have died with the answer
/// before it could be journaled: paying for it again cannot be avoided, so it is shown but does
/// not fail the run.
const UNJOURNALED: Duration = Duration::from_millis(100);
/// A killed worker's stages must be asked of the provider again within its claim TTL plus this
/// (issue 34: the lease lapses, a deferred delivery comes back within a delay queue's hop).
const RESUME_SLACK: Duration = Duration::from_secs(4);

/// Everything the checker reads.
#[derive(Debug)]
pub(crate) struct Evidence<'a> {
    pub tasks: &'a [Submitted],
    /// Task records in the store that no client was given.
    pub unclaimed: Vec<String>,
    /// What the fault injector saw that fails the run.
    pub problems: &'a [String],
    /// Each submitted task's document, or why it could not be read.
    pub documents: BTreeMap<String, Result<TaskDocument, String>>,
    pub requests: Vec<RecordedRequest>,
    pub answers: Vec<Answer>,
    pub faults: &'a [Fault],
    pub missed_faults: &'a [String],
    /// The poison message's fate, when the scenario published one.
    pub poison: Option<&'a Poison>,
    /// Dead letters left on the queue at the end: (task and stage when it is a stage request,
    /// reason).
    pub dead_letters: Vec<(Option<(String, String)>, String)>,
    /// `verdict_stage_deliveries_total` by result, over the workers alive at the end.
    pub deliveries: BTreeMap<String, f64>,
    pub started: Instant,
    pub end: End,
    pub workers: usize,
    /// Whether the scheduler process was still running at the end.
    pub scheduler_alive: bool,
    pub submit_retries: usize,
    pub took: Duration,
    /// `worker.claim_ttl_seconds` of the pool.
    pub claim_ttl: Duration,
}

/// One provider call (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Call {
    task: usize,
    stage: String,
    turn: usize,
}

/// A lost task and what the checker knows of its end.
#[derive(Debug)]
struct Lost {
    id: String,
    n: usize,
    submitted: Duration,
    state: String,
    stuck: Vec<String>,
    cause: String,
}

/// A call answered 200 more than once.
#[derive(Debug)]
struct PaidTwice {
    call: Call,
    id: String,
    answered_at: Vec<Duration>,
    same_request: bool,
    cause: String,
    /// First answered right before a worker was killed (see `UNJOURNALED`).
    unavoidable: bool,
}

#[derive(Debug)]
pub(crate) struct Report {
    table: String,
    failures: Vec<String>,
}

impl Report {
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// Why the run failed; empty when it passed.
    pub(crate) fn failures(&self) -> &[String] {
        &self.failures
    }
}

/// The model of each stage kind in the scenario configuration.
fn stage_kind(model: &str) -> Option<&'static str> {
    [
        (TRIAGE, "triage"),
        (SUMMARY, "summary"),
        (REVIEWER, "reviewer"),
        (VALIDATOR, "validator"),
    ]
    .into_iter()
    .find(|(m, _)| *m == model)
    .map(|(_, kind)| kind)
}

/// The boundary tokens of a request (P7: `<<<END UNTRUSTED <token>>>>`), which differ per
/// attempt.
fn boundary_tokens(raw: &str) -> BTreeSet<String> {
    raw.match_indices("<<<END UNTRUSTED ")
        .filter_map(|(i, m)| {
            let rest = &raw[i + m.len()..];
            let token: String = rest
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            (token.len() >= 16).then_some(token)
        })
        .collect()
}

/// The request with its boundary tokens replaced: equal for two attempts asking the same.
fn normalised(raw: &str) -> String {
    boundary_tokens(raw)
        .iter()
        .fold(raw.to_owned(), |text, token| {
            text.replace(token.as_str(), "«boundary»")
        })
}

/// The call a request makes, when it is one of the workload's.
pub(crate) fn call_of(request: &RecordedRequest) -> Option<Call> {
    let kind = stage_kind(request.model.as_deref()?)?;
    let task = task_number(&request.raw_body)?;
    let stage = if kind == "reviewer" {
        let files: BTreeSet<&str> = request
            .raw_body
            .match_indices("<<<UNTRUSTED diff of ")
            .filter_map(|(i, m)| request.raw_body[i + m.len()..].split(' ').next())
            .collect();
        format!(
            "reviewer[{}]",
            files.into_iter().collect::<Vec<_>>().join(",")
        )
    } else {
        kind.to_owned()
    };
    Some(Call {
        task,
        stage,
        turn: request.messages().len(),
    })
}

fn secs(d: Duration) -> String {
    format!("+{:.1}s", d.as_secs_f64())
}

/// The fault whose window (widened by `BEFORE`/`AFTER`) holds `at`, else the last one before it.
fn fault_near(faults: &[Fault], at: Duration) -> String {
    let within = faults
        .iter()
        .filter(|f| f.at.saturating_sub(BEFORE) <= at && at <= f.until + AFTER)
        .min_by_key(|f| f.at.abs_diff(at));
    match within {
        Some(f) => f.name.to_owned(),
        None => match faults.iter().rfind(|f| f.at <= at) {
            Some(f) => format!("none at that moment (after {} at {})", f.name, secs(f.at)),
            None => "none (before the first fault)".to_owned(),
        },
    }
}

pub(crate) fn check(e: &Evidence<'_>) -> Report {
    let since = |at: Instant| at.saturating_duration_since(e.started);
    let answers: BTreeMap<usize, &Answer> = e.answers.iter().map(|a| (a.seq, a)).collect();
    let id_of: BTreeMap<usize, &str> = e.tasks.iter().map(|t| (t.n, t.id.as_str())).collect();

    // The workload's calls, each with its requests in arrival order.
    let mut calls: BTreeMap<Call, Vec<&RecordedRequest>> = BTreeMap::new();
    for r in &e.requests {
        if let Some(call) = call_of(r) {
            calls.entry(call).or_default().push(r);
        }
    }
    let status_of = |r: &RecordedRequest| answers.get(&r.seq).map(|a| a.status);

    // Stages paid twice.
    let mut paid_twice = Vec::new();
    for (call, requests) in &calls {
        let paid: Vec<&&RecordedRequest> = requests
            .iter()
            .filter(|r| status_of(r) == Some(200))
            .collect();
        if paid.len() < 2 {
            continue;
        }
        let answered_at: Vec<Duration> = paid
            .iter()
            .filter_map(|r| answers.get(&r.seq).map(|a| since(a.at)))
            .collect();
        let first = normalised(&paid[0].raw_body);
        let unavoidable = e.faults.iter().any(|f| {
            f.name == KILL_WORKER
                && f.at.saturating_sub(UNJOURNALED) <= answered_at[0]
                && answered_at[0] <= f.at + Duration::from_millis(50)
        });
        paid_twice.push(PaidTwice {
            unavoidable,
            call: call.clone(),
            id: id_of.get(&call.task).copied().unwrap_or("?").to_owned(),
            same_request: paid.iter().all(|r| normalised(&r.raw_body) == first),
            cause: fault_near(e.faults, answered_at[0]),
            answered_at,
        });
    }

    // States, lost and duplicated tasks.
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut incomplete_kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    for t in e.tasks {
        let doc = match e.documents.get(&t.id) {
            Some(Ok(doc)) => doc,
            other => {
                let why = match other {
                    Some(Err(why)) => why.clone(),
                    _ => "not read".to_owned(),
                };
                lost.push(Lost {
                    id: t.id.clone(),
                    n: t.n,
                    submitted: t.at,
                    state: format!("unknown ({why})"),
                    stuck: Vec::new(),
                    cause: "unknown to the API".to_owned(),
                });
                continue;
            }
        };
        let finished: Vec<_> = doc
            .events
            .iter()
            .filter(|ev| ev.kind == EventType::TaskFinished)
            .collect();
        if finished.len() > 1 {
            duplicated.push(format!(
                "#{:03} {} ended {} times: {}",
                t.n,
                t.id,
                finished.len(),
                finished
                    .iter()
                    .map(|ev| ev.message.as_str())
                    .collect::<Vec<_>>()
                    .join(" / ")
            ));
        }
        if doc.state.is_terminal() {
            *by_state.entry(doc.state.as_str()).or_default() += 1;
            if doc.state == TaskState::Incomplete {
                let kind = doc
                    .failure_kind
                    .map_or_else(|| "no kind".to_owned(), |k| k.as_str().to_owned());
                *incomplete_kinds.entry(kind).or_default() += 1;
            }
            if finished.is_empty() {
                duplicated.push(format!(
                    "#{:03} {} is {} without a task-finished event",
                    t.n,
                    t.id,
                    doc.state.as_str()
                ));
            }
            continue;
        }
        let stuck: Vec<String> = doc
            .stages
            .iter()
            .filter(|s| s.status != "done")
            .map(|s| format!("{} {}", s.id, s.status))
            .collect();
        lost.push(Lost {
            id: t.id.clone(),
            n: t.n,
            submitted: t.at,
            state: doc.state.as_str().to_owned(),
            stuck,
            cause: lost_cause(e, t.n, &calls, &answers),
        });
    }

    let mut failures = Vec::new();
    if !lost.is_empty() {
        failures.push(format!("{} task(s) lost", lost.len()));
    }
    if !duplicated.is_empty() {
        failures.push(format!("{} task(s) duplicated", duplicated.len()));
    }
    let avoidable = paid_twice.iter().filter(|p| !p.unavoidable).count();
    if avoidable > 0 {
        failures.push(format!("{avoidable} stage call(s) paid twice"));
    }
    if let Some(Err(why)) = e.poison.map(Poison::verdict) {
        failures.push(format!("the poison message: {why}"));
    }
    for m in e.missed_faults {
        failures.push(format!("fault not injected: {m}"));
    }
    if !e.scheduler_alive {
        failures.push("the scheduler process died".to_owned());
    }
    if !e.unclaimed.is_empty() {
        failures.push(format!(
            "{} task record(s) no client was given",
            e.unclaimed.len()
        ));
    }
    failures.extend(e.problems.iter().cloned());

    let resumed = resumed_after_kill(e, &calls, &answers);
    let late: Vec<&Duration> = resumed
        .iter()
        .filter(|d| **d > e.claim_ttl + RESUME_SLACK)
        .collect();
    if let Some(latest) = late.iter().max() {
        failures.push(format!(
            "{} stage call(s) of a killed worker were asked again only {:.1} s after the kill, past the claim TTL of {:?} + {RESUME_SLACK:?}",
            late.len(),
            latest.as_secs_f64(),
            e.claim_ttl
        ));
    }

    let mut table = table(
        e,
        &by_state,
        &incomplete_kinds,
        &lost,
        &duplicated,
        &paid_twice,
    );
    if let (Some(first), Some(last)) = (resumed.iter().min(), resumed.iter().max()) {
        let _ = writeln!(
            table,
            "  resumed after kill -9 worker: {} stage call(s) it had in flight asked again {:.1}-{:.1} s after the kill (worker.claim_ttl_seconds = {})",
            resumed.len(),
            first.as_secs_f64(),
            last.as_secs_f64(),
            e.claim_ttl.as_secs()
        );
    }
    Report { table, failures }
}

/// For each worker killed mid-stage: how long after the kill each provider call it had in
/// flight — asked before the kill and never answered — was asked again.
fn resumed_after_kill(
    e: &Evidence<'_>,
    calls: &BTreeMap<Call, Vec<&RecordedRequest>>,
    answers: &BTreeMap<usize, &Answer>,
) -> Vec<Duration> {
    let since = |at: Instant| at.saturating_duration_since(e.started);
    let mut resumed = Vec::new();
    for kill in e.faults.iter().filter(|f| f.name == KILL_WORKER) {
        for requests in calls.values() {
            let abandoned = requests
                .iter()
                .any(|r| since(r.at) < kill.at && !answers.contains_key(&r.seq));
            let again = requests
                .iter()
                .map(|r| since(r.at))
                .find(|at| *at > kill.at);
            if let (true, Some(again)) = (abandoned, again) {
                resumed.push(again - kill.at);
            }
        }
    }
    resumed
}

/// Why a lost task stopped: its last call and the fault in effect then, and a dead letter that
/// names it.
fn lost_cause(
    e: &Evidence<'_>,
    n: usize,
    calls: &BTreeMap<Call, Vec<&RecordedRequest>>,
    answers: &BTreeMap<usize, &Answer>,
) -> String {
    let since = |at: Instant| at.saturating_duration_since(e.started);
    let id = e.tasks.iter().find(|t| t.n == n).map(|t| t.id.as_str());
    let dead: Vec<String> = e
        .dead_letters
        .iter()
        .filter(|(about, _)| about.as_ref().map(|(task, _)| task.as_str()) == id)
        .map(|(about, reason)| {
            let stage = about.as_ref().map_or("?", |(_, s)| s.as_str());
            format!("{stage} dead-lettered ({reason})")
        })
        .collect();
    let last = calls
        .iter()
        .filter(|(c, _)| c.task == n)
        .flat_map(|(c, rs)| rs.iter().map(move |r| (c, *r)))
        .max_by_key(|(_, r)| r.seq);
    let mut cause = match last {
        None => "no provider call at all".to_owned(),
        Some((call, r)) => match answers.get(&r.seq) {
            None => format!(
                "last call {} sent at {} and never answered (abandoned); fault: {}",
                call.stage,
                secs(since(r.at)),
                fault_near(e.faults, since(r.at))
            ),
            Some(a) => format!(
                "last call {} answered {} at {}; fault: {}",
                call.stage,
                a.status,
                secs(since(a.at)),
                fault_near(e.faults, since(a.at))
            ),
        },
    };
    if !dead.is_empty() {
        let _ = write!(cause, "; {}", dead.join(", "));
    }
    cause
}

fn table(
    e: &Evidence<'_>,
    by_state: &BTreeMap<&'static str, usize>,
    incomplete_kinds: &BTreeMap<String, usize>,
    lost: &[Lost],
    duplicated: &[String],
    paid_twice: &[PaidTwice],
) -> String {
    let mut t = String::new();
    let count = |s: &str| by_state.get(s).copied().unwrap_or(0);
    let _ = writeln!(
        t,
        "\n== chaos suite: {} multi-stage reviews, 1 scheduler + {} workers (plus replacements), fake provider at 0.5-2 s; run took {:.0} s, ended {:?}",
        e.tasks.len(),
        e.workers,
        e.took.as_secs_f64(),
        e.end
    );
    let row = |t: &mut String, name: &str, value: usize, note: String| {
        let _ = writeln!(t, "  {name:<20} {value:>5}  {note}");
    };
    row(
        &mut t,
        "submitted",
        e.tasks.len(),
        format!("({} submissions retried)", e.submit_retries),
    );
    for s in ["completed", "skipped", "degraded"] {
        row(&mut t, s, count(s), String::new());
    }
    let kinds = incomplete_kinds
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        &mut t,
        "incomplete",
        count("incomplete"),
        if kinds.is_empty() {
            String::new()
        } else {
            format!("({kinds})")
        },
    );
    row(&mut t, "aborted", count("aborted"), String::new());
    let mut lost_states: BTreeMap<&str, usize> = BTreeMap::new();
    for l in lost {
        *lost_states.entry(l.state.as_str()).or_default() += 1;
    }
    row(
        &mut t,
        "lost",
        lost.len(),
        if lost.is_empty() {
            String::new()
        } else {
            format!(
                "({})",
                lost_states
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
    );
    row(&mut t, "duplicated", duplicated.len(), String::new());
    row(
        &mut t,
        "records unclaimed",
        e.unclaimed.len(),
        if e.unclaimed.is_empty() {
            "(task records no client was given)".to_owned()
        } else {
            format!("({})", e.unclaimed.join(", "))
        },
    );
    let unavoidable = paid_twice.iter().filter(|p| p.unavoidable).count();
    row(
        &mut t,
        "stages paid twice",
        paid_twice.len() - unavoidable,
        if unavoidable == 0 {
            String::new()
        } else {
            format!("(and {unavoidable} answered to a worker killed before it could journal them)")
        },
    );
    let _ = writeln!(t, "  faults injected");
    for f in e.faults {
        let _ = writeln!(
            t,
            "    {:>7} .. {:>7}  at request {:>3}  {}: {}",
            secs(f.at),
            secs(f.until),
            f.at_request,
            f.name,
            f.detail
        );
    }
    for m in e.missed_faults {
        let _ = writeln!(t, "    NOT INJECTED: {m}");
    }
    for p in e.problems {
        let _ = writeln!(t, "    FAILED: {p}");
    }
    let bursts: Vec<Duration> = e
        .answers
        .iter()
        .filter(|a| a.status == 429)
        .map(|a| a.at.saturating_duration_since(e.started))
        .collect();
    if let (Some(first), Some(last)) = (bursts.first(), bursts.last()) {
        let _ = writeln!(
            t,
            "    ({} answers of 429 sent between {} and {})",
            bursts.len(),
            secs(*first),
            secs(*last)
        );
    }
    let mut by_cause: BTreeMap<String, Vec<&Lost>> = BTreeMap::new();
    for l in lost {
        let fault = l
            .cause
            .rsplit_once("fault: ")
            .map_or(l.cause.as_str(), |(_, f)| f.split(';').next().unwrap_or(f));
        by_cause.entry(fault.to_owned()).or_default().push(l);
    }
    if !lost.is_empty() {
        let _ = writeln!(t, "  lost tasks, by the fault in effect at their last call");
        for (fault, tasks) in &by_cause {
            let _ = writeln!(t, "    {fault}: {}", tasks.len());
            for l in tasks {
                let _ = writeln!(
                    t,
                    "      #{:03} {} submitted {}, {} [{}] {}",
                    l.n,
                    l.id,
                    secs(l.submitted),
                    l.state,
                    l.stuck.join(", "),
                    l.cause
                );
            }
        }
    }
    for d in duplicated {
        let _ = writeln!(t, "  duplicated: {d}");
    }
    if !paid_twice.is_empty() {
        let _ = writeln!(t, "  stages paid twice");
        for p in paid_twice {
            let _ = writeln!(
                t,
                "    #{:03} {} {} turn {}: answered 200 {} times at {}; same request: {}; fault: {}{}",
                p.call.task,
                p.id,
                p.call.stage,
                p.call.turn,
                p.answered_at.len(),
                p.answered_at
                    .iter()
                    .map(|d| secs(*d))
                    .collect::<Vec<_>>()
                    .join(", "),
                if p.same_request { "yes" } else { "no" },
                p.cause,
                if p.unavoidable {
                    " (unavoidable: answered as its worker was killed)"
                } else {
                    ""
                }
            );
        }
    }
    if let Some(poison) = e.poison {
        let _ = writeln!(
            t,
            "  poison message: {}",
            poison
                .verdict()
                .unwrap_or_else(|why| format!("FAILED: {why}"))
        );
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reason) in &e.dead_letters {
        *reasons.entry(reason.as_str()).or_default() += 1;
    }
    let _ = writeln!(
        t,
        "  dead letters left at the end: {} {}",
        e.dead_letters.len(),
        reasons
            .iter()
            .map(|(r, n)| format!("({n}x {r})"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        t,
        "  provider: {} requests, {} answered ({} with 200)",
        e.requests.len(),
        e.answers.len(),
        e.answers.iter().filter(|a| a.status == 200).count()
    );
    let _ = writeln!(
        t,
        "  scheduler process at the end: {}",
        if e.scheduler_alive { "running" } else { "DIED" }
    );
    let _ = writeln!(
        t,
        "  deliveries (workers alive at the end): {}",
        e.deliveries
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    t
}

/// The checker on made-up evidence: what it counts as lost, duplicated and paid twice, and what
/// it does not (a 429, an abandoned call, an answer its worker died with).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Poison;
    use crate::workload::title;
    use serde_json::json;
    use verdict_proto::wire::ProgressEvent;

    const TOKEN_A: &str = "AAAAAAAAAAAAAAAAAAAAAAAA";
    const TOKEN_B: &str = "BBBBBBBBBBBBBBBBBBBBBBBB";

    /// A reviewer request of review `n` as a worker sends it, fenced with `token`.
    fn reviewer_request(seq: usize, n: usize, token: &str, at: Instant) -> RecordedRequest {
        let body = json!({
            "model": REVIEWER,
            "messages": [
                {"role": "system", "content": format!("policy <<<UNTRUSTED label {token}>>>")},
                {"role": "user", "content": format!(
                    "<<<UNTRUSTED pull request title {token}>>>\n{}\n<<<END UNTRUSTED {token}>>>\n<<<UNTRUSTED diff of src/a.py {token}>>>\n+x\n<<<END UNTRUSTED {token}>>>",
                    title(n)
                )},
            ],
        });
        RecordedRequest {
            seq,
            path: "/v1/chat/completions".into(),
            headers: Vec::new(),
            raw_body: body.to_string(),
            model: Some(REVIEWER.into()),
            body,
            rejection: None,
            at,
        }
    }

    fn document(id: &str, state: &str, finished_events: usize) -> TaskDocument {
        let mut doc: TaskDocument = serde_json::from_value(json!({
            "id": id, "kind": "review", "pipeline": "multi", "state": state, "stages": [],
            "timings": {"created_unix_ms": 1, "deadline_unix_ms": 2},
        }))
        .unwrap();
        doc.events = (0..finished_events)
            .map(|_| ProgressEvent {
                version: 1,
                task_id: id.into(),
                at_unix_ms: 1,
                kind: EventType::TaskFinished,
                channel: None,
                stage_id: None,
                message: "Task finished.".into(),
                data: serde_json::Value::Null,
            })
            .collect();
        doc
    }

    fn fault(name: &'static str, at: Duration) -> Fault {
        Fault {
            name,
            detail: String::new(),
            at,
            until: at + Duration::from_millis(200),
            at_request: 0,
        }
    }

    #[test]
    fn a_call_is_its_task_stage_and_turn_whatever_the_boundary_token() {
        let now = Instant::now();
        let a = reviewer_request(0, 7, TOKEN_A, now);
        let b = reviewer_request(1, 7, TOKEN_B, now);
        let call = call_of(&a).unwrap();
        assert_eq!(
            call,
            Call {
                task: 7,
                stage: "reviewer[src/a.py]".into(),
                turn: 2
            }
        );
        assert_eq!(call_of(&b), Some(call));
        assert_eq!(normalised(&a.raw_body), normalised(&b.raw_body));
        assert_ne!(call_of(&reviewer_request(2, 8, TOKEN_A, now)), call_of(&a));
    }

    #[test]
    fn lost_duplicated_and_paid_twice_are_counted_and_429s_abandoned_calls_and_dying_answers_are_not()
     {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let tasks: Vec<Submitted> = ["done", "stuck", "twice", "ghost"]
            .iter()
            .enumerate()
            .map(|(n, id)| Submitted {
                n,
                id: (*id).into(),
                at: Duration::ZERO,
            })
            .collect();
        let mut documents = BTreeMap::new();
        documents.insert("done".into(), Ok(document("done", "completed", 1)));
        documents.insert("stuck".into(), Ok(document("stuck", "running", 0)));
        documents.insert("twice".into(), Ok(document("twice", "incomplete", 2)));
        documents.insert("ghost".into(), Err("404".into()));
        let kill_at = Duration::from_secs(20);
        let faults = [
            fault(KILL_WORKER, kill_at),
            fault("kill -9 Redis", Duration::from_secs(40)),
        ];
        let requests = vec![
            // Review 0: a 429, then paid once.
            reviewer_request(0, 0, TOKEN_A, s(1)),
            reviewer_request(1, 0, TOKEN_A, s(2)),
            // Review 1: abandoned by a killed worker, then paid once.
            reviewer_request(2, 1, TOKEN_A, s(19)),
            reviewer_request(3, 1, TOKEN_B, s(21)),
            // Review 2: paid during the Redis outage and again after it.
            reviewer_request(4, 2, TOKEN_A, s(39)),
            reviewer_request(5, 2, TOKEN_B, s(45)),
            // Review 3: answered as its worker was killed, paid again.
            reviewer_request(6, 3, TOKEN_A, s(18)),
            reviewer_request(7, 3, TOKEN_B, s(22)),
        ];
        let answer = |seq, status, at| Answer { seq, status, at };
        let answers = vec![
            answer(0, 429, s(1)),
            answer(1, 200, s(3)),
            answer(3, 200, s(22)),
            answer(4, 200, s(41)),
            answer(5, 200, s(46)),
            answer(6, 200, t0 + kill_at - Duration::from_millis(30)),
            answer(7, 200, s(23)),
        ];
        let poison = Poison {
            reason: Some("not a JSON object".into()),
            ..Poison::default()
        };
        let problems = ["kill -9 the index's Redis primary: a submission at +30.0s was answered 503 unavailable without Retry-After: down".to_owned()];
        let report = check(&Evidence {
            tasks: &tasks,
            unclaimed: vec!["f00d".to_owned()],
            problems: &problems,
            documents,
            requests,
            answers,
            faults: &faults,
            missed_faults: &[],
            poison: Some(&poison),
            dead_letters: Vec::new(),
            deliveries: BTreeMap::new(),
            started: t0,
            end: End::Quiet(Duration::from_secs(45)),
            workers: 4,
            scheduler_alive: true,
            submit_retries: 0,
            took: Duration::from_secs(60),
            claim_ttl: Duration::from_secs(6),
        });
        assert_eq!(
            report.failures(),
            [
                "2 task(s) lost",
                "1 task(s) duplicated",
                "1 stage call(s) paid twice",
                "1 task record(s) no client was given",
                problems[0].as_str(),
            ],
            "{}",
            report.table()
        );
        let table = report.table();
        assert!(
            table.contains(
                "answered 200 2 times at +41.0s, +46.0s; same request: yes; fault: kill -9 Redis"
            ),
            "{table}"
        );
        assert!(
            table.contains("(and 1 answered to a worker killed before it could journal them)"),
            "{table}"
        );
        assert!(table.contains("#001 stuck submitted +0.0s, running [] last call reviewer[src/a.py] answered 200 at +22.0s"), "{table}");
        assert!(
            table.contains("#003 ghost submitted +0.0s, unknown (404)"),
            "{table}"
        );
    }
}
