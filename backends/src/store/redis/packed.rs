//! Values compressed on their way into Redis, so that what a finished task leaves behind costs
//! its information, not its JSON's field names (issue 14): a value of [`PACK_MIN_BYTES`] or more is
//! stored as one zstd frame, a shorter one as it is. Reading tells the two apart by zstd's magic
//! number, which no JSON value starts with, so values written before compression still read.

use std::borrow::Cow;
use std::io::Read;

use crate::store::StoreError;

/// Shorter values are stored as they are: a frame's header and a small value's lack of
/// repetition would make them longer, or no shorter.
pub(super) const PACK_MIN_BYTES: usize = 128;

/// zstd's own level default: within a few per cent of level 19's size on transcripts and task
/// records, at a fraction of its CPU.
const LEVEL: i32 = 3;

/// The largest value read back, decompressed. What verdict stores is bounded by the broker's
/// message size many times over; a frame that expands past this is corrupt.
pub(super) const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;

/// The first bytes of every zstd frame; JSON never starts with them.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// `bytes` as stored at `key`: a zstd frame, or themselves when short.
pub(super) fn pack(key: &str, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    pack_at(key, bytes, LEVEL)
}

/// [`pack`] at zstd level `level`.
pub(super) fn pack_at(key: &str, bytes: &[u8], level: i32) -> Result<Vec<u8>, StoreError> {
    // A short value that looks like a frame is framed all the same, or it would read as one.
    if bytes.len() < PACK_MIN_BYTES && !bytes.starts_with(&ZSTD_MAGIC) {
        return Ok(bytes.to_vec());
    }
    zstd::bulk::compress(bytes, level).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("cannot compress: {e}"),
    })
}

/// What [`pack`] stored at `key`: a frame's content, bounded by [`MAX_UNPACKED_BYTES`], or the
/// bytes themselves.
pub(super) fn unpack<'a>(key: &str, stored: &'a [u8]) -> Result<Cow<'a, [u8]>, StoreError> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return Ok(Cow::Borrowed(stored));
    }
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let decoder = zstd::stream::read::Decoder::new(stored)
        .map_err(|e| corrupt(format!("not a zstd frame: {e}")))?;
    let mut out = Vec::new();
    decoder
        .take(MAX_UNPACKED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(format!("cannot decompress: {e}")))?;
    if out.len() as u64 > MAX_UNPACKED_BYTES {
        return Err(corrupt(format!(
            "decompresses to more than {MAX_UNPACKED_BYTES} bytes"
        )));
    }
    Ok(Cow::Owned(out))
}

/// [`unpack`], as text.
pub(super) fn unpack_text(key: &str, stored: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(unpack(key, stored)?.into_owned()).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("not UTF-8: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn long_values_shrink_short_ones_stay_and_plain_json_still_reads() {
        let json = serde_json::json!({"findings": vec!["the same finding"; 40]}).to_string();
        let stored = pack("k", json.as_bytes()).unwrap();
        assert!(stored.starts_with(&ZSTD_MAGIC) && stored.len() < json.len() / 4);
        assert_eq!(unpack("k", &stored).unwrap(), json.as_bytes());
        assert_eq!(pack("k", b"{\"a\":1}").unwrap(), b"{\"a\":1}");
        assert_eq!(unpack("k", b"{\"a\":1}").unwrap(), &b"{\"a\":1}"[..]);
    }

    #[test]
    fn a_broken_frame_is_corrupt_and_names_its_key() {
        let mut stored = pack("k", "x".repeat(4096).as_bytes()).unwrap();
        stored.truncate(stored.len() - 3);
        match unpack("result:t:s", &stored) {
            Err(StoreError::Corrupt { key, .. }) => assert_eq!(key, "result:t:s"),
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #[test]
        fn unpack_undoes_pack(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let stored = pack("k", &bytes).unwrap();
            let unpacked = unpack("k", &stored).unwrap();
            prop_assert_eq!(unpacked.as_ref(), &bytes[..]);
        }

        #[test]
        fn a_short_value_that_looks_like_a_frame_reads_back(tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut bytes = ZSTD_MAGIC.to_vec();
            bytes.extend(tail);
            let stored = pack("k", &bytes).unwrap();
            let unpacked = unpack("k", &stored).unwrap();
            prop_assert_eq!(unpacked.as_ref(), &bytes[..]);
        }

        #[test]
        fn unpack_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut framed = ZSTD_MAGIC.to_vec();
            framed.extend(bytes);
            let _ = unpack("k", &framed);
        }
    }
}
