//! `tools/call`: the arguments read with their types checked (a wrong one is
//! a tool error naming it, never a default in its place), the tool run, and
//! its outcome made into an MCP result.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::exec::Command;
use super::files::Files;
use super::rpc::INVALID_PARAMS;
use super::{Engine, ROOTS_WAIT};

/// The longest wait an argument may ask for: an hour.
const MAX_WAIT_MS: u64 = 3_600_000;

/// A tool's arguments, read with their types checked.
struct Args<'a>(&'a serde_json::Map<String, Value>);

impl Args<'_> {
    fn string(&self, name: &str) -> Result<Option<&str>, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(format!("{name} must be a string")),
        }
    }

    fn boolean(&self, name: &str) -> Result<Option<bool>, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(_) => Err(format!("{name} must be true or false")),
        }
    }

    fn integer(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .filter(|n| (min..=max).contains(n))
                .map(Some)
                .ok_or_else(|| format!("{name} must be an integer from {min} to {max}")),
        }
    }

    fn required<T>(value: Result<Option<T>, String>, name: &str, what: &str) -> Result<T, String> {
        value?.ok_or_else(|| format!("{name} is required: {what}"))
    }

    fn wait(&self, default: u64) -> Result<Duration, String> {
        let ms = self.integer("yield_time_ms", 0, MAX_WAIT_MS)?.unwrap_or(default);
        Ok(Duration::from_millis(ms))
    }

    fn tokens(&self) -> Result<usize, String> {
        let tokens = self.integer("max_output_tokens", 1, u64::from(u32::MAX))?.unwrap_or(10_000);
        Ok(usize::try_from(tokens).unwrap_or(usize::MAX))
    }

    fn session(&self) -> Result<u32, String> {
        let id = Args::required(
            self.integer("session_id", 0, u64::from(u32::MAX)),
            "session_id",
            "the session ID exec_command named",
        )?;
        Ok(u32::try_from(id).unwrap_or(u32::MAX))
    }
}

/// `tools/call`: the result, or a protocol error (unknown tool, no name).
pub(super) async fn call(
    engine: &Engine,
    params: &Value,
    started: &Mutex<Option<u32>>,
    limit: usize,
    roots: Option<Vec<PathBuf>>,
) -> Result<Value, (i64, String)> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err((INVALID_PARAMS, "tools/call needs a tool name".to_owned()));
    };
    let empty = serde_json::Map::new();
    let call = Call { engine, started, limit, roots };
    let outcome = match params.get("arguments") {
        None | Some(Value::Null) => run(&call, name, &Args(&empty)).await,
        Some(Value::Object(arguments)) => run(&call, name, &Args(arguments)).await,
        Some(_) => Some(Err("arguments must be an object".to_owned())),
    };
    match outcome {
        Some(outcome) => Ok(result(outcome)),
        None => Err((INVALID_PARAMS, format!("unknown tool: {name}"))),
    }
}

/// One call: the engine, where it records the session it starts, the
/// message limit, and its own roots (a modern call's) if it has them.
struct Call<'a> {
    engine: &'a Engine,
    started: &'a Mutex<Option<u32>>,
    limit: usize,
    roots: Option<Vec<PathBuf>>,
}

impl Call<'_> {
    /// The call's roots, or those the client named for the connection.
    async fn roots(&self) -> Result<Vec<PathBuf>, String> {
        match &self.roots {
            Some(roots) => Ok(roots.clone()),
            None => roots(self.engine).await,
        }
    }
}

/// The tool `name`'s outcome; `None` for a tool that does not exist.
async fn run(
    call: &Call<'_>,
    name: &str,
    args: &Args<'_>,
) -> Option<Result<(String, Value), String>> {
    let engine = call.engine;
    let outcome = match name {
        "exec_command" => exec_command(call, args).await,
        "write_stdin" => write_stdin(engine, args).await,
        "kill_session" => match args.session() {
            Ok(id) => engine.exec.kill(id).await,
            Err(problem) => Err(problem),
        },
        "read_file" | "write_file" | "list_dir" => file_tool(call, name, args).await,
        _ => return None,
    };
    Some(outcome)
}

/// A tool result: the text, and the structured content of a success.
fn result(outcome: Result<(String, Value), String>) -> Value {
    match outcome {
        Ok((text, structured)) => json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "isError": false
        }),
        Err(message) => json!({"content": [{"type": "text", "text": message}], "isError": true}),
    }
}

async fn exec_command(call: &Call<'_>, args: &Args<'_>) -> Result<(String, Value), String> {
    let cmd = Args::required(args.string("cmd"), "cmd", "the shell command to run")?;
    let command = Command {
        cmd: cmd.to_owned(),
        workdir: args.string("workdir")?.map(PathBuf::from),
        tty: args.boolean("tty")?.unwrap_or(false),
        yield_time: args.wait(10_000)?,
        max_output_tokens: args.tokens()?,
        shell: args.string("shell")?.map(str::to_owned),
        login: args.boolean("login")?.unwrap_or(true),
    };
    let roots = call.roots().await?;
    call.engine.exec.exec_command(command, &roots, call.started).await
}

async fn write_stdin(engine: &Engine, args: &Args<'_>) -> Result<(String, Value), String> {
    let id = args.session()?;
    let chars = args.string("chars")?.unwrap_or("");
    engine.exec.write_stdin(id, chars, args.wait(250)?, args.tokens()?).await
}

async fn file_tool(
    call: &Call<'_>,
    name: &str,
    args: &Args<'_>,
) -> Result<(String, Value), String> {
    let limit = call.limit;
    let path = PathBuf::from(Args::required(
        args.string("path"),
        "path",
        "an absolute path beneath the roots",
    )?);
    let files = current_files(call.engine, call.roots().await?).await?;
    match name {
        "read_file" => {
            let offset = args.integer("offset", 1, u64::from(u32::MAX))?.unwrap_or(1);
            let lines = args.integer("limit", 1, u64::from(u32::MAX))?;
            let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            files.read(&path, as_usize(offset), lines.map(as_usize)).await
        }
        "write_file" => {
            let content = Args::required(args.string("content"), "content", "the file's text")?;
            if content.len() > limit {
                return Err(format!(
                    "content of {} bytes is over the limit of {limit}",
                    content.len()
                ));
            }
            files.write(&path, content).await
        }
        _ => {
            let depth = args.integer("depth", 1, 64)?.unwrap_or(2);
            files.list(&path, usize::try_from(depth).unwrap_or(64)).await
        }
    }
}

/// The roots of the moment, once the client has named them.
async fn roots(engine: &Engine) -> Result<Vec<PathBuf>, String> {
    let mut roots = engine.roots.subscribe();
    let named = tokio::time::timeout(ROOTS_WAIT, roots.wait_for(Option::is_some)).await;
    match named {
        Ok(Ok(roots)) => Ok(roots.clone().unwrap_or_default()),
        _ => Err(format!(
            "the client has not answered roots/list within {ROOTS_WAIT:?}: nothing runs before it names its roots"
        )),
    }
}

/// The file tools for `roots` (made again when they changed).
async fn current_files(engine: &Engine, roots: Vec<PathBuf>) -> Result<Arc<Files>, String> {
    if roots.is_empty() {
        return Err(
            "no roots: the client named none that exists here, so the file tools have nowhere to work"
                .to_owned(),
        );
    }
    let current = engine.files.lock().await.clone();
    if let Some(current) = current.filter(|f| f.roots() == roots.as_slice()) {
        return Ok(current);
    }
    // Made without the lock held (it starts a server); the last made wins.
    let made = Arc::new(Files::new(roots).await?);
    *engine.files.lock().await = Some(made.clone());
    Ok(made)
}
