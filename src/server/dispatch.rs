//! Connection state and request dispatch: lifecycle checks, params decoding, one match over methods.

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::fs::{self, Follow, Roots};
use crate::process::{ProcessTable, ReadOutcome};
use crate::protocol::*;
use crate::transport::Frame;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing yet.
    New,
    /// `initialize` answered, `initialized` not yet received.
    Initializing,
    /// Handshake done.
    Ready,
}

/// Everything one connection owns.
pub(super) struct State {
    phase: Phase,
    roots: Roots,
    pub(super) table: ProcessTable,
}

impl State {
    pub(super) fn new(roots: Roots, table: ProcessTable) -> State {
        State { phase: Phase::New, roots, table }
    }

    /// Handles one input frame; replies go to `out`.
    pub(super) async fn on_frame(&mut self, frame: Frame, out: &mut Vec<Message>) {
        let line = match frame {
            Frame::Line(line) => line,
            Frame::TooLong { limit } => {
                tracing::warn!(limit, "discarded a message over the size limit");
                out.push(malformed(format!(
                    "message is longer than the limit of {limit} bytes (--max-message-bytes); it was discarded"
                )));
                return;
            }
        };
        let message = Message::decode(&line);
        // A line can be tens of MiB: free it before handling the message.
        drop(line);
        match message {
            Err(error) => {
                tracing::warn!(%error, "malformed message");
                out.push(malformed(error.to_string()));
            }
            Ok(Message::Request(request)) => {
                let id = request.id.clone();
                if let Some(result) = self.on_request(request).await {
                    out.push(Message::Response(Response { id, result }));
                }
            }
            Ok(Message::Notification(notification)) => {
                if let Some(error) = self.on_notification(notification) {
                    out.push(error);
                }
            }
            Ok(Message::Response(response)) => {
                tracing::warn!(id = %response.id, "ignoring a response sent to the server");
            }
        }
    }

    fn on_notification(&mut self, notification: Notification) -> Option<Message> {
        let method = notification.method;
        if method == Initialized::NAME {
            match self.phase {
                Phase::Initializing => self.phase = Phase::Ready,
                Phase::New => tracing::warn!("ignoring initialized before initialize"),
                Phase::Ready => tracing::warn!("ignoring a repeated initialized"),
            }
            None
        } else if METHODS.contains(&method.as_str()) {
            tracing::warn!(%method, "request without id");
            Some(malformed(format!("{method} is a request and needs an id")))
        } else {
            tracing::warn!(%method, "ignoring unknown notification");
            None
        }
    }

    /// The result of a request, or `None` when it was parked (a waiting read).
    async fn on_request(&mut self, request: Request) -> Option<Result<Value, ErrorObject>> {
        let Request { id, method, params } = request;
        if !METHODS.contains(&method.as_str()) {
            return Some(Err(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("unknown method {method}"),
            )));
        }
        if method == Initialize::NAME {
            return Some(call::<Initialize>(params, |p| self.initialize(p)));
        }
        let area = if method.starts_with("fs/") { "filesystem" } else { "exec" };
        match self.phase {
            Phase::New => {
                return Some(Err(ErrorObject::invalid_request(format!(
                    "client must call initialize before using {area} methods"
                ))))
            }
            Phase::Initializing => {
                return Some(Err(ErrorObject::invalid_request(format!(
                    "client must send initialized before using {area} methods"
                ))))
            }
            Phase::Ready => {}
        }
        let roots = &self.roots;
        let table = &mut self.table;
        let result = match method.as_str() {
            ProcessStart::NAME => call::<ProcessStart>(params, |p| {
                ProcessTable::check_cwd(&p.cwd)?;
                roots.check_absolute(&p.cwd, Follow::All)?;
                table.start(p)
            }),
            ProcessRead::NAME => {
                let params = match decode::<ProcessRead>(params) {
                    Ok(params) => params,
                    Err(error) => return Some(Err(error)),
                };
                match table.read(id, params, Instant::now()) {
                    Ok(ReadOutcome::Ready(result)) => encode(Ok(result)),
                    Ok(ReadOutcome::Parked) => return None,
                    Err(error) => Err(error),
                }
            }
            ProcessWrite::NAME => call::<ProcessWrite>(params, |p| table.write(p)),
            ProcessTerminate::NAME => {
                call::<ProcessTerminate>(params, |p| Ok(table.terminate(p, Instant::now())))
            }
            ProcessSignal::NAME => call::<ProcessSignal>(params, |p| table.signal(p)),
            ProcessResize::NAME => {
                call::<ProcessResize>(params, |p| table.resize(p).map(|()| Empty {}))
            }
            ProcessList::NAME => call::<ProcessList>(params, |_| Ok(table.list())),
            ReadFile::NAME => match decode::<ReadFile>(params) {
                Ok(p) => encode(fs::read_file(roots, p).await),
                Err(error) => Err(error),
            },
            WriteFile::NAME => match decode::<WriteFile>(params) {
                Ok(p) => encode(fs::write_file(roots, p).await),
                Err(error) => Err(error),
            },
            CreateDirectory::NAME => match decode::<CreateDirectory>(params) {
                Ok(p) => encode(fs::create_directory(roots, p).await),
                Err(error) => Err(error),
            },
            GetMetadata::NAME => match decode::<GetMetadata>(params) {
                Ok(p) => encode(fs::get_metadata(roots, p).await),
                Err(error) => Err(error),
            },
            ReadDirectory::NAME => match decode::<ReadDirectory>(params) {
                Ok(p) => encode(fs::read_directory(roots, p).await),
                Err(error) => Err(error),
            },
            Remove::NAME => match decode::<Remove>(params) {
                Ok(p) => encode(fs::remove(roots, p).await),
                Err(error) => Err(error),
            },
            Copy::NAME => match decode::<Copy>(params) {
                Ok(p) => encode(fs::copy(roots, p).await),
                Err(error) => Err(error),
            },
            Rename::NAME => match decode::<Rename>(params) {
                Ok(p) => encode(fs::rename(roots, p).await),
                Err(error) => Err(error),
            },
            other => Err(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("method {other} is listed but not dispatched"),
            )),
        };
        Some(result)
    }

    fn initialize(&mut self, params: InitializeParams) -> Result<InitializeResult, ErrorObject> {
        if self.phase != Phase::New {
            return Err(ErrorObject::invalid_request(
                "initialize may only be sent once per connection",
            ));
        }
        tracing::info!(client = %params.client_name, "initialize");
        self.phase = Phase::Initializing;
        Ok(InitializeResult {
            protocol_version: PROTOCOL_VERSION.to_owned(),
            server_info: Some(ServerInfo {
                name: env!("CARGO_PKG_NAME").to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            }),
            capabilities: Some(Capabilities {
                methods: METHODS.iter().map(|m| (*m).to_owned()).collect(),
                notifications: NOTIFICATIONS.iter().map(|n| (*n).to_owned()).collect(),
            }),
        })
    }
}

/// Decodes params (absent or null counts as `{}`), else -32602 with the decoder's message.
fn decode<M: Method>(params: Value) -> Result<M::Params, ErrorObject> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Object(_) => params,
        other => {
            return Err(ErrorObject::invalid_params(format!(
                "invalid params for {}: expected an object, got {}",
                M::NAME,
                json_kind(&other)
            )))
        }
    };
    serde_json::from_value(params)
        .map_err(|e| ErrorObject::invalid_params(format!("invalid params for {}: {e}", M::NAME)))
}

fn encode<T: Serialize>(result: Result<T, ErrorObject>) -> Result<Value, ErrorObject> {
    result.and_then(|value| {
        serde_json::to_value(value)
            .map_err(|e| ErrorObject::internal(format!("failed to encode the result: {e}")))
    })
}

fn call<M: Method>(
    params: Value,
    handler: impl FnOnce(M::Params) -> Result<M::Result, ErrorObject>,
) -> Result<Value, ErrorObject> {
    decode::<M>(params).and_then(handler).map(Ok).and_then(encode)
}

/// The reply to a line that is not a usable message: id -1, -32600.
fn malformed(message: String) -> Message {
    Message::Response(Response {
        id: RequestId::from(-1),
        result: Err(ErrorObject::invalid_request(message)),
    })
}
