//! The soft task deadline (SPEC E2): never a hard cancel, never a tool-round limit — past the
//! deadline, the next AI call is asked for a final answer from what was already collected, with
//! tools disabled, and that stays in force for the rest of the task.

use verdict_proto::Language;

/// One task's soft deadline, as seen by one stage attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftDeadline {
    deadline_unix_ms: u64,
    finalised: bool,
}

impl SoftDeadline {
    pub fn new(deadline_unix_ms: u64) -> SoftDeadline {
        SoftDeadline {
            deadline_unix_ms,
            finalised: false,
        }
    }

    pub fn deadline_unix_ms(&self) -> u64 {
        self.deadline_unix_ms
    }

    pub fn reached(&self, now_unix_ms: u64) -> bool {
        now_unix_ms >= self.deadline_unix_ms
    }

    /// Whether the finalise message has been added: from then on every call goes without tools.
    pub fn is_finalised(&self) -> bool {
        self.finalised
    }

    /// Returns true exactly once: the first time it is asked after the deadline. The caller then
    /// adds [`finalise_message`] before the next call.
    pub fn take_finalisation(&mut self, now_unix_ms: u64) -> bool {
        if self.finalised || !self.reached(now_unix_ms) {
            return false;
        }
        self.finalised = true;
        true
    }
}

/// The one user message added when the deadline is reached.
pub fn finalise_message(language: Language) -> &'static str {
    language.pick(
        "The time budget for this task has been reached. Do not call any more tools. Using only the information you have already collected, give your final answer now, in exactly the required output format.",
        "本任务的时间预算已经用完。不要再调用任何工具。请仅根据你已经收集到的信息，立即按要求的输出格式给出最终答案。",
    )
}

/// The tool result given to a tool call the model made after the deadline.
pub fn not_executed_message(language: Language) -> &'static str {
    language.pick(
        "Not executed: the time budget for this task was reached, so no more tools run. Give your final answer from the information already collected.",
        "未执行：本任务的时间预算已经用完，不再运行任何工具。请根据已经收集到的信息给出最终答案。",
    )
}

/// The tool result given to a tool call when the stage offers no tools at all.
pub fn no_tools_message(language: Language) -> &'static str {
    language.pick(
        "Not executed: no tools are available for this task. Answer from the material provided.",
        "未执行：本任务不提供任何工具。请根据已提供的材料作答。",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalisation_happens_once_and_only_after_the_deadline() {
        let mut d = SoftDeadline::new(1_000);
        assert!(!d.take_finalisation(999));
        assert!(!d.is_finalised());
        assert!(d.take_finalisation(1_000));
        assert!(d.is_finalised());
        assert!(!d.take_finalisation(5_000), "the message is added once");
    }
}
