//! Standard padded base64 for the wire: SIMD for the bulk, the `base64` crate for the last group and every error.

use base64::Engine as _;

/// Appends the standard padded base64 of `bytes` to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    base64_simd::STANDARD.encode_append(bytes, out);
}

/// Decodes standard padded base64. All but the last 4-character group go
/// through the SIMD decoder (whole groups without padding, so no trailing-bit
/// rule applies there); the last group and any error go through the `base64`
/// crate, so results and error messages are exactly its own.
pub(crate) fn decode(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
    let engine = base64::engine::general_purpose::STANDARD;
    let bulk = text.len().saturating_sub(4) / 4 * 4;
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    if base64_simd::STANDARD_NO_PAD.decode_append(&text[..bulk], &mut bytes).is_err() {
        return engine.decode(text);
    }
    match engine.decode(&text[bulk..]) {
        Ok(tail) => {
            bytes.extend_from_slice(&tail);
            Ok(bytes)
        }
        Err(_) => engine.decode(text),
    }
}
