//! A commit's files as a repository source lists them: what intake classifies and shards for a
//! scan (SPEC S4, X4), and what the workers' tools list.

/// One file of a commit, as a repository source lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Repository-relative, `/`-separated.
    pub path: String,
    pub bytes: u64,
    /// The content has a NUL byte in its first 8000 bytes.
    pub binary: bool,
    /// A symbolic link (its `bytes` are the target's length); tools never follow them.
    pub symlink: bool,
}
