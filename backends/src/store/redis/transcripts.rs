//! Per-attempt transcripts on Redis (SPEC O4): one key per attempt with the retention TTL, and a
//! per-task index so they can be read back without scanning the keyspace.
//!
//! Most of a transcript is text other transcripts hold too: the system prompt (stage policy and
//! output contract) of every attempt of a stage kind, the tools offered, a file two attempts
//! read. Every system or tool message and tool output of at least [`SHARED_MIN_BYTES`], and a
//! tool list as long, is therefore stored once, by content hash (`text:{sha256}`, a zstd frame, its TTL renewed by each
//! transcript that uses it), and the transcript keeps a reference; the transcript itself is a
//! zstd frame of its JSON. Before hashing, each of the attempt's random boundary tokens (P7) in a
//! text is replaced by a placeholder and its place noted in the reference: otherwise every
//! prompt would be new text to every attempt, and nothing would be shared. Transcripts written
//! before any of this (plain JSON, or a frame of a whole transcript) still read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::packed::{pack, unpack, unpack_text};
use super::{RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::{StoreError, content_hash};
use crate::store::{TranscriptError, TranscriptStore};
use verdict_proto::chat::Role;
use verdict_proto::transcript::{Transcript, TranscriptEntry};

/// Texts this long or longer are stored once by content hash; shorter ones stay inline, where a
/// reference and a key of their own would cost more than they save.
pub(super) const SHARED_MIN_BYTES: usize = 1024;

/// What a transcript key holds: the transcript with its long texts emptied, and where each goes.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Stored {
    pub transcript: Transcript,
    shared: Vec<SharedText>,
    /// The hash of the shared text holding `tools_offered` as JSON, when it was long enough to
    /// share: every attempt of a stage kind offers the same tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tools: Option<String>,
}

/// A long text taken out of a transcript: its place and its content hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SharedText {
    /// The entry's index in `entries`.
    entry: usize,
    /// The message's index in a call's `new_messages`; `None`: a tool call's output.
    message: Option<usize>,
    hash: String,
    /// Where the shared text's placeholders stand for boundary tokens: `[byte offset in the
    /// shared text, index in the transcript's boundary_tokens]`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    boundaries: Vec<[usize; 2]>,
}

/// What stands for a boundary token in a shared text. A text may hold it literally: only the
/// offsets a reference names are replaced back.
const PLACEHOLDER: &str = "\u{ab}boundary\u{bb}";

/// `text` with every occurrence of each of `tokens` replaced by [`PLACEHOLDER`], and where each
/// was (see [`SharedText::boundaries`]).
fn normalise(text: &str, tokens: &[String]) -> (String, Vec<[usize; 2]>) {
    let mut found: Vec<(usize, usize)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .flat_map(|(i, t)| text.match_indices(t.as_str()).map(move |(at, _)| (at, i)))
        .collect();
    if found.is_empty() {
        return (text.to_owned(), Vec::new());
    }
    found.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut boundaries = Vec::with_capacity(found.len());
    let mut last = 0;
    for (at, i) in found {
        if at < last {
            continue; // overlaps the token just replaced
        }
        out.push_str(&text[last..at]);
        boundaries.push([out.len(), i]);
        out.push_str(PLACEHOLDER);
        last = at + tokens[i].len();
    }
    out.push_str(&text[last..]);
    (out, boundaries)
}

/// [`normalise`] undone; a reference that does not fit the text (only by tampering) leaves the
/// placeholders where it does not.
fn denormalise(shared: &str, boundaries: &[[usize; 2]], tokens: &[String]) -> String {
    let mut out = String::with_capacity(shared.len());
    let mut last = 0;
    for &[at, i] in boundaries {
        let fits = at >= last
            && shared
                .get(at..)
                .is_some_and(|rest| rest.starts_with(PLACEHOLDER))
            && i < tokens.len();
        if !fits {
            continue;
        }
        out.push_str(&shared[last..at]);
        out.push_str(&tokens[i]);
        last = at + PLACEHOLDER.len();
    }
    out.push_str(&shared[last..]);
    out
}

/// What [`take_shared`] moved out of a transcript.
struct Taken {
    refs: Vec<SharedText>,
    texts: HashMap<String, String>,
    tools: Option<String>,
}

/// Every long text of `transcript`, moved out and replaced by an empty string, and its tools
/// offered, when long: the references and the texts by hash.
fn take_shared(transcript: &mut Transcript) -> Taken {
    let mut refs = Vec::new();
    let mut texts = HashMap::new();
    let tokens = transcript.boundary_tokens.clone();
    let mut take = |text: &mut String, entry: usize, message: Option<usize>| {
        if text.len() >= SHARED_MIN_BYTES {
            let (shared, boundaries) = normalise(&std::mem::take(text), &tokens);
            let hash = content_hash(shared.as_bytes());
            texts.insert(hash.clone(), shared);
            refs.push(SharedText {
                entry,
                message,
                hash,
                boundaries,
            });
        }
    };
    for (i, entry) in transcript.entries.iter_mut().enumerate() {
        match entry {
            TranscriptEntry::Call { new_messages, .. } => {
                for (m, message) in new_messages.iter_mut().enumerate() {
                    // What other tasks show too: the system prompt (policy and contract) and
                    // the files tools read. A user message is the task's own material (its
                    // diff, an invalid answer to repair): shared with nothing, it is cheaper in
                    // the transcript, where sealing compresses it with the task's other texts.
                    if matches!(message.role, Role::System | Role::Tool) {
                        take(&mut message.content, i, Some(m));
                    }
                }
            }
            TranscriptEntry::ToolCall { output, .. } => take(output, i, None),
            _ => {}
        }
    }
    let mut tools = None;
    if !transcript.tools_offered.is_empty() {
        // serde_json of our own types cannot fail; an empty text would only stay inline.
        let json = serde_json::to_string(&transcript.tools_offered).unwrap_or_default();
        if json.len() >= SHARED_MIN_BYTES {
            let hash = content_hash(json.as_bytes());
            texts.insert(hash.clone(), json);
            transcript.tools_offered.clear();
            tools = Some(hash);
        }
    }
    Taken { refs, texts, tools }
}

/// Puts the shared texts back; one that is gone (it cannot outlive a transcript that names it,
/// unless removed by hand) reads as a note saying so.
fn restore_shared(stored: &mut Stored, texts: &HashMap<String, String>) {
    let Stored {
        transcript,
        shared: refs,
        tools,
    } = stored;
    if let Some(hash) = tools {
        // Gone or unreadable, the tools are left out; the rest of the transcript still reads.
        if let Some(json) = texts.get(hash.as_str()) {
            transcript.tools_offered = serde_json::from_str(json).unwrap_or_default();
        }
    }
    for r in refs.iter() {
        let text = texts.get(&r.hash).map_or_else(
            || format!("[shared text {} is no longer stored]", r.hash),
            |shared| denormalise(shared, &r.boundaries, &transcript.boundary_tokens),
        );
        match (transcript.entries.get_mut(r.entry), r.message) {
            (Some(TranscriptEntry::Call { new_messages, .. }), Some(m)) => {
                if let Some(message) = new_messages.get_mut(m) {
                    message.content = text;
                }
            }
            (Some(TranscriptEntry::ToolCall { output, .. }), None) => *output = text,
            _ => {}
        }
    }
}

impl RedisStore {
    /// The set of task `task_id`'s transcript keys.
    pub(super) fn transcripts_index(&self, task_id: &str) -> String {
        self.tagged_key("transcripts", task_id, None)
    }

    async fn put_transcript(&self, transcript: Transcript) -> Result<(), StoreError> {
        let key = self.tagged_key(
            "transcript",
            &transcript.task_id,
            Some(&format!("{}:{}", transcript.stage_id, transcript.attempt)),
        );
        let index = self.transcripts_index(&transcript.task_id);
        let ttl = millis(self.inner.config.transcript_ttl);
        let mut transcript = transcript;
        let Taken {
            refs: shared,
            texts,
            tools,
        } = take_shared(&mut transcript);
        if !texts.is_empty() {
            // Written before the transcript that names them, one key each and each on its own
            // (different tasks' transcripts share them, so they are neither in the transcript's
            // transaction nor in one slot); a text already stored is rewritten, which renews
            // its TTL. The commands go out together on the multiplexed connection.
            let writes = texts.iter().map(|(hash, text)| async move {
                let text_key = self.key("text", hash);
                let packed = pack(&text_key, text.as_bytes())?;
                self.query::<()>(
                    "put shared transcript text",
                    &text_key,
                    Replay::Safe,
                    redis::cmd("SET")
                        .arg(&text_key)
                        .arg(packed)
                        .arg("PX")
                        .arg(ttl),
                )
                .await
            });
            futures_util::future::try_join_all(writes).await?;
        }
        let json = encode(
            &key,
            &Stored {
                transcript,
                shared,
                tools,
            },
        )?;
        let stored = pack(&key, json.as_bytes())?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&key)
            .arg(stored)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("SADD")
            .arg(&index)
            .arg(&key)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&index)
            .arg(ttl)
            .ignore();
        self.query_pipeline("put transcript", &key, Replay::Safe, &pipe)
            .await
    }

    /// The stored transcripts of a task, oldest attempt first; expired ones are simply absent.
    /// A sealed task's are in its archive, and any written since beside it.
    pub async fn transcripts_of(&self, task_id: &str) -> Result<Vec<Transcript>, StoreError> {
        let index = self.transcripts_index(task_id);
        let archive_key = self.archive_key(task_id);
        let mut pipe = redis::pipe();
        pipe.cmd("SMEMBERS")
            .arg(&index)
            .cmd("GET")
            .arg(&archive_key);
        let (keys, archived): (Vec<String>, Option<Vec<u8>>) = self
            .query_pipeline("list transcripts", &index, Replay::Safe, &pipe)
            .await?;
        let mut read: Vec<Stored> =
            super::archive::Archive::read(&archive_key, archived.as_deref())?.transcripts;
        if !keys.is_empty() {
            let stored: Vec<Option<Vec<u8>>> = self
                .query(
                    "get transcripts",
                    &index,
                    Replay::Safe,
                    redis::cmd("MGET").arg(&keys),
                )
                .await?;
            for (key, bytes) in keys.iter().zip(stored) {
                if let Some(bytes) = bytes {
                    let later = decompress(key, &bytes)?;
                    // One written since sealing replaces the sealed copy of its attempt.
                    read.retain(|s| !crate::store::same_attempt(&s.transcript, &later.transcript));
                    read.push(later);
                }
            }
        }
        if read.is_empty() {
            return Ok(Vec::new());
        }
        let hashes: Vec<String> = read
            .iter()
            .flat_map(|s| {
                s.shared
                    .iter()
                    .map(|r| r.hash.clone())
                    .chain(s.tools.clone())
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut texts = HashMap::new();
        if !hashes.is_empty() {
            let text_keys: Vec<String> = hashes.iter().map(|h| self.key("text", h)).collect();
            let stored: Vec<Option<Vec<u8>>> = self
                .query(
                    "get shared transcript texts",
                    &index,
                    Replay::Safe,
                    redis::cmd("MGET").arg(&text_keys),
                )
                .await?;
            for ((hash, key), bytes) in hashes.iter().zip(&text_keys).zip(stored) {
                if let Some(bytes) = bytes {
                    texts.insert(hash.clone(), unpack_text(key, &bytes)?);
                }
            }
        }
        let mut transcripts: Vec<Transcript> = read
            .into_iter()
            .map(|mut s| {
                restore_shared(&mut s, &texts);
                s.transcript
            })
            .collect();
        transcripts.sort_by(crate::store::reading_order);
        Ok(transcripts)
    }
}

/// A stored transcript: a packed [`Stored`] or (before shared texts) transcript, or (before
/// compression) a transcript's JSON.
pub(super) fn decompress(key: &str, stored: &[u8]) -> Result<Stored, StoreError> {
    let json = unpack(key, stored)?;
    match decode::<Stored>(key, &json) {
        Ok(s) => Ok(s),
        Err(_) => Ok(Stored {
            transcript: decode(key, &json)?,
            shared: Vec::new(),
            tools: None,
        }),
    }
}

impl TranscriptStore for RedisStore {
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>> {
        Box::pin(async move {
            self.put_transcript(transcript)
                .await
                .map_err(|e| TranscriptError(e.to_string()))
        })
    }

    fn of_task<'a>(
        &'a self,
        task_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, TranscriptError>> {
        Box::pin(async move {
            self.transcripts_of(task_id)
                .await
                .map_err(|e| TranscriptError(e.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "AAAAAAAAAAAAAAAAAAAAAAAA";
    const B: &str = "BBBBBBBBBBBBBBBBBBBBBBBB";

    #[test]
    fn two_attempts_prompts_share_one_text_whatever_their_tokens() {
        let prompt = |t: &str| format!("<<<UNTRUSTED diff {t}>>>\n+x\n<<<END UNTRUSTED {t}>>>");
        let (a, at_a) = normalise(&prompt(A), &[A.to_owned()]);
        let (b, at_b) = normalise(&prompt(B), &[B.to_owned()]);
        assert_eq!(a, b);
        assert_eq!(at_a, at_b);
        assert_eq!(denormalise(&a, &at_a, &[A.to_owned()]), prompt(A));
        assert_eq!(denormalise(&b, &at_b, &[B.to_owned()]), prompt(B));
    }

    #[test]
    fn a_placeholder_written_literally_stays_as_it_was() {
        let text = format!("{PLACEHOLDER} then {A}");
        let tokens = [A.to_owned()];
        let (shared, at) = normalise(&text, &tokens);
        assert_eq!(at.len(), 1);
        assert_eq!(denormalise(&shared, &at, &tokens), text);
        // A reference that does not fit leaves the text as stored.
        assert_eq!(denormalise(&shared, &[[3, 0]], &tokens), shared);
    }

    proptest! {
        #[test]
        fn normalising_is_undone_exactly(
            parts in proptest::collection::vec((".{0,40}", 0usize..3), 0..8),
        ) {
            let tokens = vec![A.to_owned(), B.to_owned()];
            let text: String = parts
                .iter()
                .map(|(s, t)| match t {
                    0 => s.clone(),
                    1 => format!("{s}{A}"),
                    _ => format!("{s}{B}{PLACEHOLDER}"),
                })
                .collect();
            let (shared, at) = normalise(&text, &tokens);
            prop_assert!(!shared.contains(A) && !shared.contains(B));
            prop_assert_eq!(denormalise(&shared, &at, &tokens), text);
        }
    }
}
