//! What the git source remembers between requests so intake runs no git process it does not need
//! (issue 11: child processes were most of intake's cost): per mirror, when its last fetch of
//! every ref began and what names resolved to since; and the changes between commit pairs.
//!
//! Both are sound by construction. A name's resolution depends only on the mirror's refs, which
//! change only by a fetch, and each fetch forgets the names; a change between two full commit ids
//! depends only on those immutable commits. Callers hold the mirror's lock while they read and
//! write a mirror's entries, so a fetch cannot slip between a lookup and the resolution it stands
//! for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use std::time::Instant;

use super::Change;

/// A mirror's fetch generation: when its last successful fetch of every ref began, and what
/// revisions resolved to since.
#[derive(Debug, Default)]
struct Generation {
    fetched: Option<Instant>,
    names: HashMap<String, String>,
}

/// Names per mirror; a name resolves to a commit until the mirror is fetched again.
#[derive(Debug, Default)]
pub(super) struct Resolved(Mutex<HashMap<PathBuf, Generation>>);

impl Resolved {
    /// Whether `mirror` was fetched by a fetch that began at or after `since`: that fetch shows
    /// the remote as it was at `since` or later, exactly what a fetch of the caller's own would
    /// show (decision 166).
    pub(super) fn fetched_since(&self, mirror: &Path, since: Instant) -> bool {
        let mirrors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        mirrors
            .get(mirror)
            .and_then(|g| g.fetched)
            .is_some_and(|began| began >= since)
    }

    /// A fetch that began at `began` succeeded: the refs may have moved, so every name is
    /// resolved again. An older fetch finishing late changes nothing it did not already see.
    pub(super) fn record_fetch(&self, mirror: &Path, began: Instant) {
        let mut mirrors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = mirrors.entry(mirror.to_path_buf()).or_default();
        if generation.fetched.is_none_or(|last| last < began) {
            generation.fetched = Some(began);
        }
        generation.names.clear();
    }

    /// The commit `revision` resolved to in `mirror` since its last fetch.
    pub(super) fn name(&self, mirror: &Path, revision: &str) -> Option<String> {
        let mirrors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        mirrors.get(mirror)?.names.get(revision).cloned()
    }

    pub(super) fn remember(&self, mirror: &Path, revision: &str, commit: &str) {
        let mut mirrors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let names = &mut mirrors.entry(mirror.to_path_buf()).or_default().names;
        // Bounded by the names asked for between two fetches; a mirror asked for ever more names
        // without a fetch (distinct SHAs only) starts over rather than growing without bound.
        if names.len() >= MAX_NAMES_PER_MIRROR {
            names.clear();
        }
        names.insert(revision.to_owned(), commit.to_owned());
    }
}

/// The most names one mirror remembers between fetches.
const MAX_NAMES_PER_MIRROR: usize = 4096;

/// Which change: a mirror and the two resolved commits, before the merge base is taken.
type PairKey = (PathBuf, String, String);

/// Changes between commit pairs, the least recently used dropped beyond a byte budget.
#[derive(Debug)]
pub(super) struct Changes {
    max_bytes: usize,
    inner: Mutex<ChangesInner>,
}

#[derive(Debug, Default)]
struct ChangesInner {
    entries: HashMap<PairKey, (Change, u64)>,
    bytes: usize,
    tick: u64,
}

impl Changes {
    pub(super) fn new(max_bytes: usize) -> Changes {
        Changes {
            max_bytes,
            inner: Mutex::new(ChangesInner::default()),
        }
    }

    /// The change from `base` to `head` in `mirror`, if it is still remembered.
    pub(super) fn get(&self, mirror: &Path, base: &str, head: &str) -> Option<Change> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.tick += 1;
        let tick = inner.tick;
        let key = (mirror.to_path_buf(), base.to_owned(), head.to_owned());
        let (change, used) = inner.entries.get_mut(&key)?;
        *used = tick;
        Some(change.clone())
    }

    /// Remembers `change` as the change from `base` to `head`, dropping the least recently used
    /// entries while the total is over budget; a change larger than the whole budget is not kept.
    pub(super) fn put(&self, mirror: &Path, base: &str, head: &str, change: &Change) {
        let size = weight(change);
        if size > self.max_bytes {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.tick += 1;
        let tick = inner.tick;
        let key = (mirror.to_path_buf(), base.to_owned(), head.to_owned());
        if let Some((old, _)) = inner.entries.insert(key, (change.clone(), tick)) {
            inner.bytes -= weight(&old);
        }
        inner.bytes += size;
        while inner.bytes > self.max_bytes {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some((dropped, _)) = inner.entries.remove(&oldest) {
                inner.bytes -= weight(&dropped);
            }
        }
    }
}

/// What an entry costs: its text, and a little for the key and the map.
fn weight(change: &Change) -> usize {
    change.diff.len() + change.base.len() + change.head.len() + 256
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(diff: &str) -> Change {
        Change {
            base: "b".repeat(40),
            head: "h".repeat(40),
            diff: diff.to_owned(),
        }
    }

    #[test]
    fn a_fetch_forgets_every_name_and_only_a_newer_fetch_counts() {
        let resolved = Resolved::default();
        let mirror = Path::new("/m");
        let asked = Instant::now();
        assert!(!resolved.fetched_since(mirror, asked));
        resolved.record_fetch(mirror, asked);
        assert!(resolved.fetched_since(mirror, asked));
        resolved.remember(mirror, "main", "abc");
        assert_eq!(resolved.name(mirror, "main").as_deref(), Some("abc"));
        assert_eq!(resolved.name(Path::new("/other"), "main"), None);
        let later = asked + std::time::Duration::from_millis(1);
        assert!(!resolved.fetched_since(mirror, later));
        resolved.record_fetch(mirror, later);
        assert_eq!(resolved.name(mirror, "main"), None);
        // A fetch that began earlier and finished late does not move the generation back.
        resolved.record_fetch(mirror, asked);
        assert!(resolved.fetched_since(mirror, later));
    }

    #[test]
    fn changes_stay_within_their_budget_dropping_the_least_recently_used() {
        let one = weight(&change(&"x".repeat(1000)));
        let changes = Changes::new(2 * one);
        let mirror = Path::new("/m");
        changes.put(mirror, "a", "b", &change(&"x".repeat(1000)));
        changes.put(mirror, "c", "d", &change(&"y".repeat(1000)));
        // `a..b` used after `c..d` was added: `c..d` is now the least recently used.
        assert!(changes.get(mirror, "a", "b").is_some());
        changes.put(mirror, "e", "f", &change(&"z".repeat(1000)));
        assert!(changes.get(mirror, "a", "b").is_some());
        assert!(changes.get(mirror, "c", "d").is_none());
        assert_eq!(
            changes.get(mirror, "e", "f").map(|c| c.diff.len()),
            Some(1000)
        );
        // Too large for the whole budget: served by git each time, never kept.
        changes.put(mirror, "g", "h", &change(&"w".repeat(3 * one)));
        assert!(changes.get(mirror, "g", "h").is_none());
        assert!(changes.get(mirror, "e", "f").is_some());
    }
}
