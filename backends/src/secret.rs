//! A credential that cannot leak by accident (SPEC R3): the type lives in the shared language
//! ([`verdict_proto::secret`]), so a client of the API holds its token the same way.

pub use verdict_proto::secret::Secret;
