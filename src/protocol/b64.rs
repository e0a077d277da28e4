//! Standard padded base64 for the wire: SIMD for the bulk, the `base64` crate for the last group and every error.

use base64::Engine as _;

const CRATE: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The length of the padded base64 of `n` bytes.
pub(crate) fn encoded_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

/// Appends the standard padded base64 of `bytes` to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    base64_simd::STANDARD.encode_append(bytes, out);
}

/// The standard padded base64 of `bytes`.
pub(crate) fn encode(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}

/// Whether `text` is standard padded base64 that [`decode`] accepts.
pub(crate) fn is_valid(text: &[u8]) -> bool {
    let (bulk, last) = split(text);
    base64_simd::STANDARD_NO_PAD.check(bulk).is_ok() && CRATE.decode(last).is_ok()
}

/// All but the last 4-character group (whole groups without padding, so no
/// trailing-bit rule applies there), and the rest.
fn split(text: &[u8]) -> (&[u8], &[u8]) {
    text.split_at(text.len().saturating_sub(4) / 4 * 4)
}

/// Decodes standard padded base64. The bulk goes through the SIMD decoder; the
/// last group and any error go through the `base64` crate, so results and
/// error messages are exactly its own.
pub(crate) fn decode(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
    let (bulk, last) = split(text);
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    if base64_simd::STANDARD_NO_PAD.decode_append(bulk, &mut bytes).is_err() {
        return CRATE.decode(text);
    }
    match CRATE.decode(last) {
        Ok(tail) => {
            bytes.extend_from_slice(&tail);
            Ok(bytes)
        }
        Err(_) => CRATE.decode(text),
    }
}

/// [`decode`], reusing the text's own buffer for the bytes: no second
/// allocation for a large payload. The text is checked before it is touched,
/// so an error is still the crate's own for the original text.
pub(crate) fn decode_owned(text: String) -> Result<Vec<u8>, base64::DecodeError> {
    let (bulk, last) = split(text.as_bytes());
    let (Ok(tail), Ok(())) = (CRATE.decode(last), base64_simd::STANDARD_NO_PAD.check(bulk)) else {
        return decode(text.as_bytes());
    };
    let bulk_len = bulk.len();
    let mut buffer = text.into_bytes();
    let decoded = match base64_simd::STANDARD_NO_PAD.decode_inplace(&mut buffer[..bulk_len]) {
        Ok(decoded) => decoded.len(),
        // Cannot happen: the same decoder's check passed above. Should it,
        // the text is partly overwritten, so the error names the damaged text.
        Err(_) => return decode(&buffer),
    };
    buffer.truncate(decoded);
    buffer.extend_from_slice(&tail);
    Ok(buffer)
}
