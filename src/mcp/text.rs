//! The text of an exec tool's answer, as Codex's unified exec writes it, and
//! its structured twin: a chunk id, the wall time, the exit or the session,
//! the original token count (about 4 bytes a token) and the output, whose
//! middle is cut when it is over the token limit.

use serde_json::{json, Value};

/// Bytes counted as one token.
const BYTES_PER_TOKEN: usize = 4;

/// What one exec answer reports.
pub(crate) struct Answer<'a> {
    pub(crate) wall: std::time::Duration,
    /// `Some(code)` when the process exited.
    pub(crate) exit_code: Option<i32>,
    /// The memory limit, when it killed a process of the command's tree.
    pub(crate) memory_limit: Option<u64>,
    /// The session to write to, while it runs.
    pub(crate) session_id: Option<u32>,
    /// The first bytes of the output since the last answer.
    pub(crate) head: &'a [u8],
    /// Its last bytes, after the head (contiguous with it when nothing was cut).
    pub(crate) tail: &'a [u8],
    /// Bytes produced since the last answer (those between head and tail included).
    pub(crate) produced: usize,
    pub(crate) max_output_tokens: usize,
}

impl Answer<'_> {
    /// The text and the structured content.
    pub(crate) fn render(&self) -> (String, Value) {
        let tokens = self.produced.div_ceil(BYTES_PER_TOKEN);
        let limit = self.max_output_tokens.saturating_mul(BYTES_PER_TOKEN);
        let (output, truncated) = cut(self.head, self.tail, self.produced, limit);
        let chunk_id = chunk_id();
        let status = match (self.exit_code, self.memory_limit, self.session_id) {
            (Some(_), Some(bytes), _) => {
                format!("Process killed: memory limit {} MiB", bytes >> 20)
            }
            (Some(code), None, _) => format!("Process exited with code {code}"),
            (None, _, Some(id)) => format!("Process running with session ID {id}"),
            (None, _, None) => "Process running".to_owned(),
        };
        let text = format!(
            "Chunk ID: {chunk_id}\nWall time: {:.4} seconds\n{status}\nOriginal token count: {tokens}\nOutput:\n{output}",
            self.wall.as_secs_f64()
        );
        let structured = json!({
            "chunk_id": chunk_id,
            "wall_time_seconds": self.wall.as_secs_f64(),
            "exit_code": self.exit_code,
            "session_id": if self.exit_code.is_some() { None } else { self.session_id },
            "original_token_count": tokens,
            "output": output,
            "truncated": truncated,
        });
        (text, structured)
    }
}

/// The output within `limit` bytes, as Codex cuts it: the first half of the
/// budget from its beginning and the second half from its end, around a
/// marker that says how many tokens were cut (bytes never kept count as cut).
/// Neither cut breaks a UTF-8 character: the head ends before one that would
/// not fit, the tail begins after one that was cut.
fn cut(head: &[u8], tail: &[u8], produced: usize, limit: usize) -> (String, bool) {
    let kept = head.len() + tail.len();
    if produced <= limit && kept == produced {
        let mut whole = head.to_vec();
        whole.extend_from_slice(tail);
        return (String::from_utf8_lossy(&whole).into_owned(), false);
    }
    let head_budget = limit / 2;
    let tail_budget = limit - head_budget;
    // The first bytes: from the head, then (when nothing was cut) the tail.
    let mut first = head[..head_budget.min(head.len())].to_vec();
    if kept == produced && first.len() < head_budget {
        first.extend_from_slice(&tail[..(head_budget - first.len()).min(tail.len())]);
    }
    // The last bytes: from the tail, then (when nothing was cut) the head's end.
    let mut last = tail[tail.len().saturating_sub(tail_budget)..].to_vec();
    if kept == produced && last.len() < tail_budget {
        let more = (tail_budget - last.len()).min(head.len() - first.len().min(head.len()));
        let mut before = head[head.len() - more..].to_vec();
        before.extend_from_slice(&last);
        last = before;
    }
    let first = &first[..char_end(&first)];
    let last = &last[char_start(&last)..];
    let cut_bytes = produced - first.len() - last.len();
    let marker = format!("\n…{} tokens truncated…\n", cut_bytes.div_ceil(BYTES_PER_TOKEN));
    let text =
        format!("{}{marker}{}", String::from_utf8_lossy(first), String::from_utf8_lossy(last));
    (text, true)
}

/// The length of `bytes` without a last character that was cut short.
fn char_end(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        // An invalid byte inside stays (shown as U+FFFD); only a cut tail goes.
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

/// Where `bytes` begins after the continuation bytes of a character cut at its start.
fn char_start(bytes: &[u8]) -> usize {
    bytes.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count()
}

/// Six hex digits, different for each answer.
fn chunk_id() -> String {
    crate::transport::new_id().chars().filter(char::is_ascii_hexdigit).take(6).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_codex_writes_them() {
        let answer = Answer {
            wall: std::time::Duration::from_millis(1002),
            exit_code: Some(0),
            memory_limit: None,
            session_id: Some(3),
            head: b"hello\n",
            tail: b"",
            produced: 6,
            max_output_tokens: 10_000,
        };
        let (text, structured) = answer.render();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("Chunk ID: ") && lines[0].len() == 16, "{text}");
        assert_eq!(
            &lines[1..],
            [
                "Wall time: 1.0020 seconds",
                "Process exited with code 0",
                "Original token count: 2",
                "Output:",
                "hello"
            ]
        );
        assert_eq!(structured["exit_code"], 0);
        assert_eq!(structured["session_id"], Value::Null);
        assert_eq!(structured["truncated"], false);
    }

    #[test]
    fn long_output_keeps_its_head_and_tail() {
        let output: Vec<u8> = (0..100).map(|i| b'a' + (i % 26) as u8).collect();
        let (text, truncated) = cut(&output[..60], &output[60..], 100, 20);
        assert!(truncated);
        assert_eq!(text, "abcdefghij\n…20 tokens truncated…\nmnopqrstuv");
        // The same when the middle was never kept.
        let (text, _) = cut(&output[..30], &output[90..], 100, 20);
        assert_eq!(text, "abcdefghij\n…20 tokens truncated…\nmnopqrstuv");
        // A short head (all of it) and a tail that was kept whole.
        let (text, _) = cut(&output[..4], &output[4..], 100, 20);
        assert_eq!(text, "abcdefghij\n…20 tokens truncated…\nmnopqrstuv");
    }

    #[test]
    fn no_character_is_broken_at_either_edge() {
        // "é" is two bytes: a budget of 5 each side falls inside one at both edges.
        let text = "aaaaéééééééébbbbé".as_bytes();
        let (shown, _) = cut(text, b"", text.len(), 10);
        assert_eq!(shown, "aaaa\n…5 tokens truncated…\nbbbé");
        // A tail that starts inside a character skips its rest.
        let text = "aaaaééééébb".as_bytes();
        let (shown, _) = cut(text, b"", text.len(), 9);
        assert_eq!(shown, "aaaa\n…2 tokens truncated…\nébb");
    }
}
