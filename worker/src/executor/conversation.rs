//! What one stage attempt has said and heard so far: the conversation state the turn loop, the
//! repair loop and every AI call share — the messages, how many of them the transcript already
//! shows, the soft deadline, the boundary token, the usage and the transcript itself. It holds no
//! backend and makes no call; [`super::context::CallContext`] carries those.

use verdict_proto::evidence::Boundary;
use verdict_proto::transcript::{Transcript, TranscriptEntry};
use verdict_proto::wire::Usage;

use crate::deadline::SoftDeadline;
use crate::provider::{Message, TokenUsage};

pub(super) struct Conversation<'t> {
    /// The conversation so far (the first two messages are the prompt).
    messages: Vec<Message>,
    /// How many of `messages` the transcript has already recorded.
    recorded: usize,
    /// E2: whether the deadline has passed and the finalise message is in `messages`.
    pub deadline: SoftDeadline,
    /// The boundary token the system message declares; tool results are fenced with it.
    boundary: Boundary,
    usage: Usage,
    /// The number of the last AI call, as the transcript counts them.
    seq: u32,
    transcript: &'t mut Transcript,
}

impl<'t> Conversation<'t> {
    /// A conversation that starts with `prompt`, written to `transcript` as it goes.
    pub(super) fn new(
        prompt: Vec<Message>,
        boundary: Boundary,
        deadline: SoftDeadline,
        transcript: &'t mut Transcript,
    ) -> Conversation<'t> {
        transcript.boundary_tokens.push(boundary.token().to_owned());
        Conversation {
            messages: prompt,
            recorded: 0,
            deadline,
            boundary,
            usage: Usage::default(),
            seq: 0,
            transcript,
        }
    }

    pub(super) fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub(super) fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// The messages added since the transcript last recorded the conversation, now counted as
    /// recorded: the next call's transcript entry shows only what is new to it.
    pub(super) fn take_unrecorded(&mut self) -> Vec<Message> {
        let new = self.messages[self.recorded..].to_vec();
        self.recorded = self.messages.len();
        new
    }

    pub(super) fn boundary(&self) -> &Boundary {
        &self.boundary
    }

    /// Notes a boundary token the conversation's own does not cover (an isolated repair's) in
    /// the transcript.
    pub(super) fn note_boundary(&mut self, token: &str) {
        if !self.transcript.boundary_tokens.iter().any(|t| t == token) {
            self.transcript.boundary_tokens.push(token.to_owned());
        }
    }

    pub(super) fn record(&mut self, entry: TranscriptEntry) {
        self.transcript.entries.push(entry);
    }

    /// Numbers the next AI call.
    pub(super) fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    /// Counts one provider call and the tokens it used (none for a failed call).
    pub(super) fn count_call(&mut self, tokens: TokenUsage) {
        self.usage.calls += 1;
        self.usage.input_tokens += tokens.input_tokens;
        self.usage.output_tokens += tokens.output_tokens;
    }

    pub(super) fn usage(&self) -> Usage {
        self.usage
    }
}
