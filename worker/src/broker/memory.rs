//! Placeholder: the in-memory broker lands with the broker work.
