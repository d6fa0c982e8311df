//! Placeholder: filled in by the providers work.
