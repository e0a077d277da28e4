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
    /// The session to write to, while it runs.
    pub(crate) session_id: Option<u32>,
    /// The output since the last answer (lossy UTF-8 for the text).
    pub(crate) output: &'a [u8],
    /// Bytes of output before `output` that were not kept (over the buffer).
    pub(crate) dropped: usize,
    pub(crate) max_output_tokens: usize,
}

impl Answer<'_> {
    /// The text and the structured content.
    pub(crate) fn render(&self) -> (String, Value) {
        let total = self.output.len() + self.dropped;
        let tokens = total.div_ceil(BYTES_PER_TOKEN);
        let limit = self.max_output_tokens.saturating_mul(BYTES_PER_TOKEN);
        let (output, truncated) = cut(self.output, self.dropped, limit);
        let chunk_id = chunk_id();
        let status = match (self.exit_code, self.session_id) {
            (Some(code), _) => format!("Process exited with code {code}"),
            (None, Some(id)) => format!("Process running with session ID {id}"),
            (None, None) => "Process running".to_owned(),
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

/// `output` within `limit` bytes: its head and its tail around a marker that
/// says how many tokens were cut (bytes dropped before it count as cut).
fn cut(output: &[u8], dropped: usize, limit: usize) -> (String, bool) {
    if output.len() <= limit && dropped == 0 {
        return (String::from_utf8_lossy(output).into_owned(), false);
    }
    let keep = limit.min(output.len());
    let (head, tail) = (keep / 2, keep - keep / 2);
    let cut_bytes = dropped + output.len() - head - tail;
    let marker = format!("\n…{} tokens truncated…\n", cut_bytes.div_ceil(BYTES_PER_TOKEN));
    let text = format!(
        "{}{marker}{}",
        String::from_utf8_lossy(&output[..head]),
        String::from_utf8_lossy(&output[output.len() - tail..])
    );
    (text, true)
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
            session_id: Some(3),
            output: b"hello\n",
            dropped: 0,
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
        let (text, truncated) = cut(&output, 0, 20);
        assert!(truncated);
        assert_eq!(text, "abcdefghij\n…20 tokens truncated…\nmnopqrstuv");
    }
}
