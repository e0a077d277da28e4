//! The start of a notification line in the server's own form, read without
//! a JSON parser (the fast paths of `process/output` and `tunnel/data`).

/// `line` as `PREFIX` `ID","seq":` `N` and the rest, with a plain id (no
/// escapes or control characters) and a seq that is JSON (digits, no
/// leading zero): the id, the seq's digits and what follows them; None for
/// anything else (the general path decides).
pub(super) fn id_and_seq<'a>(
    line: &'a [u8],
    prefix: &[u8],
) -> Option<(&'a str, &'a str, &'a [u8])> {
    let rest = line.strip_prefix(prefix)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let (id, rest) = rest.split_at(end);
    if id.iter().any(|&b| b == b'\\' || b < 0x20) {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?;
    let rest = rest.strip_prefix(br#"","seq":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // No digits, or a leading zero (not JSON: the general path refuses it).
    if digits == 0 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let (seq, rest) = rest.split_at(digits);
    Some((id, std::str::from_utf8(seq).ok()?, rest))
}
