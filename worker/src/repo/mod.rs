//! Repository snapshots at a commit (SPEC E1): what the read-only tools and `exec` agents see.
//! Placeholder: filled in by the repository work.
