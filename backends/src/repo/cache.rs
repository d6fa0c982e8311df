//! The size-bounded snapshot cache: snapshots are expensive to make and cheap to keep, until the
//! disk fills up. All snapshots together stay under `max_bytes` (the sum of their file sizes);
//! when a new one would exceed it, the least recently used snapshots that nobody holds are
//! evicted. A snapshot in use is never evicted: a snapshot larger than the whole budget is still
//! served, and evicted when its last user releases it.
//!
//! Sizes and last use live in memory; a restarted worker rebuilds them by scanning the directory
//! (last use = the snapshot directory's mtime, which every use refreshes). The bound assumes one
//! process owns the directory: two workers sharing it would each respect the bound for what they
//! know, and one could evict a snapshot the other is using. Give each worker its own cache dir.
//!
//! On-disk layout under the cache root: `snapshots/<key>` (complete trees only), `tmp/` (trees
//! being built, renamed into `snapshots/` when complete), `trash/` (evicted trees being deleted).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::RepoError;

/// Trees in `tmp/` older than this are leftovers of a crashed worker, not work in progress.
const STALE_TMP_AGE: Duration = Duration::from_secs(3600);

/// What the cache holds and has done since it was opened (for metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Snapshots on disk.
    pub snapshots: usize,
    /// Their total size (sum of file sizes).
    pub bytes: u64,
    /// The configured bound.
    pub max_bytes: u64,
    /// Snapshots currently in use (never evicted).
    pub leased: usize,
    /// Requests served by a snapshot already on disk.
    pub hits: u64,
    /// Snapshots this process built.
    pub materialised: u64,
    /// Snapshots evicted to stay under the bound.
    pub evicted: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct SnapshotCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    snapshots_dir: PathBuf,
    tmp_dir: PathBuf,
    trash_dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    total_bytes: u64,
    /// A logical clock: larger is more recent. Wall-clock times only order the start-up scan.
    clock: u64,
    stats: CacheStats,
}

#[derive(Debug)]
struct Entry {
    bytes: u64,
    last_use: u64,
    leases: usize,
}

/// Keeps one snapshot from being evicted while it is alive.
#[derive(Debug)]
pub(crate) struct Lease {
    inner: Arc<Inner>,
    key: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.inner.release(&self.key);
    }
}

impl SnapshotCache {
    /// Opens (creating if needed) the cache under `root`, forgets half-built and half-deleted
    /// trees, and registers the complete snapshots already there, evicting down to `max_bytes`.
    /// Blocking: call it at start-up or from a blocking task.
    pub(crate) fn open(root: &Path, max_bytes: u64) -> Result<SnapshotCache, RepoError> {
        let snapshots_dir = root.join("snapshots");
        let tmp_dir = root.join("tmp");
        let trash_dir = root.join("trash");
        for dir in [&snapshots_dir, &tmp_dir, &trash_dir] {
            std::fs::create_dir_all(dir).map_err(RepoError::io("create directory", dir))?;
        }
        remove_children(&trash_dir, |_| true);
        let now = SystemTime::now();
        remove_children(&tmp_dir, |meta| {
            meta.modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > STALE_TMP_AGE)
        });

        let mut found = Vec::new();
        let listing = std::fs::read_dir(&snapshots_dir)
            .map_err(RepoError::io("list directory", &snapshots_dir))?;
        for dirent in listing.flatten() {
            let Some(key) = dirent.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let path = dirent.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !is_snapshot_key(&key) || !meta.is_dir() {
                continue;
            }
            let bytes = tree_bytes(&path).map_err(RepoError::io("measure snapshot", &path))?;
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, key, bytes));
        }
        found.sort();

        let mut state = State::default();
        state.stats.max_bytes = max_bytes;
        for (_, key, bytes) in found {
            state.clock += 1;
            state.total_bytes += bytes;
            let entry = Entry {
                bytes,
                last_use: state.clock,
                leases: 0,
            };
            state.entries.insert(key, entry);
        }
        let inner = Arc::new(Inner {
            snapshots_dir,
            tmp_dir,
            trash_dir,
            max_bytes,
            state: Mutex::new(state),
        });
        let doomed = inner.evict_over_budget(&mut inner.lock());
        purge(doomed);
        Ok(SnapshotCache { inner })
    }

    /// Where the snapshot named `key` lives once complete.
    pub(crate) fn path_for(&self, key: &str) -> PathBuf {
        self.inner.snapshots_dir.join(key)
    }

    /// Where trees are built before they are renamed into place (same filesystem).
    pub(crate) fn tmp_dir(&self) -> &Path {
        &self.inner.tmp_dir
    }

    /// A lease on the snapshot `key` if it is on disk.
    pub(crate) fn acquire(&self, key: &str) -> Option<Lease> {
        let path = self.path_for(key);
        let mut state = self.inner.lock();
        state.clock += 1;
        let clock = state.clock;
        let entry = state.entries.get_mut(key)?;
        if !path.is_dir() {
            // Removed behind our back (an operator cleaning up): forget it and rebuild.
            let bytes = entry.bytes;
            if entry.leases == 0 {
                state.entries.remove(key);
                state.total_bytes -= bytes;
            }
            return None;
        }
        entry.leases += 1;
        entry.last_use = clock;
        state.stats.hits += 1;
        drop(state);
        touch(&path);
        Some(self.lease(key))
    }

    /// Registers the complete snapshot `key` (already renamed into [`Self::path_for`]) with its
    /// size, leased once for the caller, and evicts unleased snapshots to make room.
    /// `materialised` says whether this process built it (or adopted one another process built).
    pub(crate) fn insert(&self, key: &str, bytes: u64, materialised: bool) -> Lease {
        let mut state = self.inner.lock();
        state.clock += 1;
        let clock = state.clock;
        if materialised {
            state.stats.materialised += 1;
        }
        match state.entries.get_mut(key) {
            Some(entry) => {
                entry.leases += 1;
                entry.last_use = clock;
            }
            None => {
                state.total_bytes += bytes;
                let entry = Entry {
                    bytes,
                    last_use: clock,
                    leases: 1,
                };
                state.entries.insert(key.to_owned(), entry);
            }
        }
        let doomed = self.inner.evict_over_budget(&mut state);
        drop(state);
        purge(doomed);
        touch(&self.path_for(key));
        self.lease(key)
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let state = self.inner.lock();
        CacheStats {
            snapshots: state.entries.len(),
            bytes: state.total_bytes,
            leased: state.entries.values().filter(|e| e.leases > 0).count(),
            ..state.stats
        }
    }

    fn lease(&self, key: &str) -> Lease {
        Lease {
            inner: Arc::clone(&self.inner),
            key: key.to_owned(),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic (every update is a few plain assignments).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends one lease. The release counts as a use: a snapshot held until now is recent.
    fn release(&self, key: &str) {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        let released = state.entries.get_mut(key).map(|entry| {
            entry.leases = entry.leases.saturating_sub(1);
            entry.last_use = clock;
        });
        let doomed = self.evict_over_budget(&mut state);
        drop(state);
        purge(doomed);
        if released.is_some() {
            touch(&self.snapshots_dir.join(key));
        }
    }

    /// Evicts least-recently-used unleased snapshots until the total fits the budget (or only
    /// leased ones are left). Moving a tree to `trash/` happens under the lock, so a concurrent
    /// request for the same key cannot find it half-deleted; the slow deletion happens later.
    fn evict_over_budget(&self, state: &mut State) -> Vec<PathBuf> {
        let mut doomed = Vec::new();
        while state.total_bytes > self.max_bytes {
            let victim = state
                .entries
                .iter()
                .filter(|(_, e)| e.leases == 0)
                .min_by_key(|(_, e)| e.last_use)
                .map(|(k, _)| k.clone());
            let Some(key) = victim else { break };
            if let Some(entry) = state.entries.remove(&key) {
                state.total_bytes -= entry.bytes;
                state.stats.evicted += 1;
            }
            let from = self.snapshots_dir.join(&key);
            let to = self
                .trash_dir
                .join(format!("{key}-{:016x}", rand::random::<u64>()));
            match std::fs::rename(&from, &to) {
                Ok(()) => doomed.push(to),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %from.display(), error = %e, "cannot move an evicted snapshot to the trash; deleting it in place");
                    doomed.push(from);
                }
            }
        }
        doomed
    }
}

/// Deletes evicted trees off the async threads when a runtime is there to take the work.
fn purge(doomed: Vec<PathBuf>) {
    if doomed.is_empty() {
        return;
    }
    let delete = move || {
        for path in doomed {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete an evicted snapshot");
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn_blocking(delete)),
        Err(_) => delete(),
    }
}

/// Refreshes a snapshot's mtime so a restarted worker sees the same recency order. Best effort:
/// a wrong order after a restart costs a rebuild, not correctness.
fn touch(path: &Path) {
    if let Ok(dir) = std::fs::File::open(path) {
        let _ = dir.set_modified(SystemTime::now());
    }
}

/// The sum of the sizes of the regular files under `root` (symlinks are not followed).
pub(crate) fn tree_bytes(root: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry?;
        if entry.file_type().is_file() {
            total = total.saturating_add(entry.metadata()?.len());
        }
    }
    Ok(total)
}

/// `<64 hex: sha256 of the URL>-<40 or 64 hex: the commit>`: anything else in `snapshots/` is
/// not ours and is left alone.
pub(crate) fn is_snapshot_key(name: &str) -> bool {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match name.split_once('-') {
        Some((url, commit)) => {
            url.len() == 64 && hex(url) && matches!(commit.len(), 40 | 64) && hex(commit)
        }
        None => false,
    }
}

fn remove_children(dir: &Path, doomed: impl Fn(&std::fs::Metadata) -> bool) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for dirent in listing.flatten() {
        let path = dirent.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if doomed(&meta) {
            let removed = if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = removed {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a leftover from the snapshot cache");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> String {
        format!("{}-{}", "a".repeat(64), format!("{n:02x}").repeat(20))
    }

    fn make(cache: &SnapshotCache, key: &str, bytes: usize) -> Lease {
        let path = cache.path_for(key);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("f"), vec![b'x'; bytes]).unwrap();
        cache.insert(key, tree_bytes(&path).unwrap(), true)
    }

    #[test]
    fn keys_are_recognised() {
        assert!(is_snapshot_key(&key(1)));
        assert!(!is_snapshot_key("a-b"));
        assert!(!is_snapshot_key(&format!(
            "{}-{}",
            "A".repeat(64),
            "0".repeat(40)
        )));
        assert!(!is_snapshot_key(&"a".repeat(64)));
    }

    #[test]
    fn evicts_least_recently_used_unleased_first() {
        let root = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::open(root.path(), 250).unwrap();
        drop(make(&cache, &key(1), 100));
        drop(make(&cache, &key(2), 100));
        drop(cache.acquire(&key(1)).unwrap()); // key 1 is now the most recent
        let held = make(&cache, &key(3), 100);
        assert!(cache.path_for(&key(1)).is_dir());
        assert!(!cache.path_for(&key(2)).exists(), "key 2 was the LRU");
        assert!(cache.path_for(&key(3)).is_dir());
        let stats = cache.stats();
        assert_eq!((stats.snapshots, stats.bytes, stats.evicted), (2, 200, 1));
        assert_eq!((stats.leased, stats.hits, stats.materialised), (1, 1, 3));
        drop(held);
    }

    #[test]
    fn an_oversized_snapshot_is_served_then_evicted_on_release() {
        let root = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::open(root.path(), 50).unwrap();
        let big = make(&cache, &key(1), 100);
        assert!(cache.path_for(&key(1)).is_dir(), "leased: never evicted");
        let again = cache.acquire(&key(1)).unwrap();
        drop(big);
        assert!(cache.path_for(&key(1)).is_dir(), "still one lease left");
        drop(again);
        assert!(!cache.path_for(&key(1)).exists());
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn reopening_scans_sizes_and_cleans_leftovers() {
        let root = tempfile::tempdir().unwrap();
        {
            let cache = SnapshotCache::open(root.path(), 1000).unwrap();
            drop(make(&cache, &key(1), 10));
            drop(make(&cache, &key(2), 20));
        }
        std::fs::create_dir_all(root.path().join("trash/old")).unwrap();
        std::fs::create_dir_all(root.path().join("snapshots/not-ours")).unwrap();
        let cache = SnapshotCache::open(root.path(), 1000).unwrap();
        let stats = cache.stats();
        assert_eq!((stats.snapshots, stats.bytes), (2, 30));
        assert!(!root.path().join("trash/old").exists());
        assert!(root.path().join("snapshots/not-ours").exists());
        assert!(cache.acquire(&key(2)).is_some());

        // Reopening with a smaller bound evicts down to it.
        drop(cache);
        let cache = SnapshotCache::open(root.path(), 25).unwrap();
        assert_eq!(cache.stats().snapshots, 1);
    }

    #[test]
    fn a_tree_deleted_behind_our_back_is_a_miss() {
        let root = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::open(root.path(), 1000).unwrap();
        drop(make(&cache, &key(1), 10));
        std::fs::remove_dir_all(cache.path_for(&key(1))).unwrap();
        assert!(cache.acquire(&key(1)).is_none());
        assert_eq!(cache.stats().snapshots, 0);
    }
}
