//! verdict's task owner: intake, pipelines, degradation policy, publication and progress streams.
//!
//! Empty until the distributed-pool issue lands; the crate exists now so the workspace has its final
//! shape and the dependency direction (scheduler → proto, never proto → scheduler) is fixed early.
