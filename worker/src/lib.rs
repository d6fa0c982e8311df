//! verdict's stateless stage executor: turns one stage request into exactly one classified outcome.
//!
//! Empty until the stage-executor issue lands; the crate exists now so the workspace has its final
//! shape and the dependency direction (worker → proto, never proto → worker) is fixed from the start.
