//! Placeholder: in-memory stores land with the store work.
