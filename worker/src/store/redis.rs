//! Placeholder: Redis stores land with the store work.
