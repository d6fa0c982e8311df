//! Repository snapshots at a commit (SPEC E1). Temporary interface stub: the repository work
//! replaces this file with the real implementation.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;
use verdict_proto::wire::RepositoryRef;

use crate::BoxFuture;

pub trait RepositorySource: Send + Sync + std::fmt::Debug {
    fn snapshot<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Snapshot, RepoError>>;
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    root: PathBuf,
    commit: String,
}

impl Snapshot {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn commit(&self) -> &str {
        &self.commit
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("repository: {0}")]
pub struct RepoError(pub String);

impl RepoError {
    pub fn is_retryable(&self) -> bool {
        false
    }
}
