//! Whether the state store has room for more work (issue 14): a store near its memory limit
//! takes no new tasks, so the tasks already accepted keep the room they need to finish. The
//! scheduler asks before admitting a task and answers `503 overloaded` with `Retry-After`.

use std::fmt;

/// A state store that can be too full to take new work.
pub trait Capacity: Send + Sync + fmt::Debug {
    /// Why new work should wait right now — the store near or at its memory limit, in words
    /// that name the limit and the fix — or `None`. Answers from what the store last measured;
    /// never waits on I/O, so it can sit on the path of every submission.
    fn pressure(&self) -> Option<String>;
}
