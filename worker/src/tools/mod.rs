//! The read-only repository tools (SPEC E1). Placeholder: filled in by the repository work.
