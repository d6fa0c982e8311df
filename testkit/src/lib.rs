//! Test and benchmark kit: a fake LLM provider server (filled in by the providers work).
