//! Placeholder until the unified-diff parser lands.
