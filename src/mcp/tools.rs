//! The tools MCP clients see, shaped as Codex's unified exec and file tools
//! (models are trained on these names, arguments and texts), each with an
//! input and an output schema.

use serde_json::{json, Value};

/// The output schema of the three exec tools (their `structuredContent`).
fn exec_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "chunk_id": {"type": "string"},
            "wall_time_seconds": {"type": "number"},
            "exit_code": {"type": ["integer", "null"], "description": "Set once the process exited."},
            "session_id": {"type": ["integer", "null"], "description": "Set while the process runs: pass it to write_stdin."},
            "original_token_count": {"type": "integer"},
            "output": {"type": "string"},
            "truncated": {"type": "boolean"}
        },
        "required": ["chunk_id", "wall_time_seconds", "exit_code", "session_id", "original_token_count", "output", "truncated"]
    })
}

/// `tools/list`'s result.
pub(crate) fn list() -> Value {
    json!({"tools": [
        {
            "name": "exec_command",
            "description": "Runs a command in a shell, sandboxed (writes only beneath the client's roots). Waits up to yield_time_ms for it to finish, then returns its output; a command still running gets a session ID for write_stdin.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "cmd": {"type": "string", "description": "The shell command to run."},
                    "workdir": {"type": "string", "description": "The directory to run it in (default: the first root)."},
                    "tty": {"type": "boolean", "description": "Run it in a pseudo-terminal (default false)."},
                    "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for output before answering (default 10000)."},
                    "max_output_tokens": {"type": "integer", "minimum": 1, "description": "Output beyond this many tokens (about 4 bytes each) keeps its head and tail (default 10000)."},
                    "shell": {"type": "string", "description": "The shell (default: $SHELL, else /bin/bash, else /bin/sh)."},
                    "login": {"type": "boolean", "description": "Run it in a login shell, -lc (default true)."}
                },
                "required": ["cmd"],
                "additionalProperties": false
            },
            "outputSchema": exec_output()
        },
        {
            "name": "write_stdin",
            "description": "Writes characters to a running session's stdin (empty: just poll), waits up to yield_time_ms, and returns the output since the last answer.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "session_id": {"type": "integer", "description": "The session exec_command named."},
                    "chars": {"type": "string", "description": "What to write (may be empty)."},
                    "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for output (default 250)."},
                    "max_output_tokens": {"type": "integer", "minimum": 1, "description": "As for exec_command (default 10000)."}
                },
                "required": ["session_id"],
                "additionalProperties": false
            },
            "outputSchema": exec_output()
        },
        {
            "name": "kill_session",
            "description": "Ends a running session: the process and everything it started.",
            "inputSchema": {
                "type": "object",
                "properties": {"session_id": {"type": "integer"}},
                "required": ["session_id"],
                "additionalProperties": false
            },
            "outputSchema": exec_output()
        },
        {
            "name": "read_file",
            "description": "Reads lines of a text file beneath the roots, each as `L<number>: <text>`.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "An absolute path."},
                    "offset": {"type": "integer", "minimum": 1, "description": "The first line, from 1 (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Lines to read (default 2000)."}
                },
                "required": ["path"],
                "additionalProperties": false
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "lines": {"type": "array", "items": {"type": "string"}},
                    "total_lines": {"type": "integer"}
                },
                "required": ["lines", "total_lines"]
            }
        },
        {
            "name": "write_file",
            "description": "Writes a file beneath the roots (created or replaced).",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "An absolute path."},
                    "content": {"type": "string"}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            },
            "outputSchema": {
                "type": "object",
                "properties": {"bytes_written": {"type": "integer"}},
                "required": ["bytes_written"]
            }
        },
        {
            "name": "list_dir",
            "description": "Lists a directory beneath the roots, to a depth (directories end in /).",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "An absolute path."},
                    "depth": {"type": "integer", "minimum": 1, "description": "Levels to descend (default 2)."}
                },
                "required": ["path"],
                "additionalProperties": false
            },
            "outputSchema": {
                "type": "object",
                "properties": {"entries": {"type": "array", "items": {"type": "string"}}},
                "required": ["entries"]
            }
        }
    ]})
}
