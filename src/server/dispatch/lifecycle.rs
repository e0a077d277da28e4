//! The connection's lifecycle: `initialize`, and which requests may come before it.

use super::{Phase, State};
use crate::protocol::{
    Capabilities, EnvironmentConfigRead, EnvironmentInfo, EnvironmentStatus, ErrorObject,
    InitializeParams, InitializeResult, Method, RequestId, ServerInfo, SessionEnd, FEATURES,
    METHODS, NOTIFICATIONS, PROTOCOL_VERSION,
};
use crate::sessions::ClaimError;

impl State {
    /// The lifecycle check of A.2 for every method but `initialize`.
    pub(super) fn check_ready(&self, method: &str) -> Result<(), ErrorObject> {
        let area = match method {
            EnvironmentInfo::NAME => "environment info",
            EnvironmentStatus::NAME => "environment status",
            EnvironmentConfigRead::NAME => "environment config",
            SessionEnd::NAME => "session",
            m if m.starts_with("tunnel/") => "tunnel",
            m if m.starts_with("ports/") => "ports",
            m if m.starts_with("http/") => "http",
            m if m.starts_with("fs/") => "filesystem",
            _ => "exec",
        };
        match self.phase {
            Phase::New => Err(ErrorObject::invalid_request(format!(
                "client must call initialize before using {area} methods"
            ))),
            Phase::Initializing => Err(ErrorObject::invalid_request(format!(
                "client must send initialized before using {area} methods"
            ))),
            Phase::Ready => Ok(()),
        }
    }

    /// `initialize`: the result now, or `None` when it resumes another
    /// session (which answers once it has the link).
    pub(super) fn initialize(
        &mut self,
        id: &RequestId,
        params: InitializeParams,
    ) -> Result<Option<InitializeResult>, ErrorObject> {
        if self.phase != Phase::New {
            return Err(ErrorObject::invalid_request(
                "initialize may only be sent once per connection",
            ));
        }
        tracing::info!(client = %params.client_name, "initialize");
        self.resumable = params.resumable;
        self.table.take_network_decisions(params.network_decisions);
        if let Some(resume) = params.resume_session_id {
            let claimed = match &self.sessions {
                Some(sessions) => sessions.claim(&resume, params.takeover),
                // Over stdio a session ends with its connection: nothing to resume.
                None => Err(ClaimError::Unknown(resume.clone())),
            };
            let wake = claimed.map_err(|error| error.to_error())?;
            self.claimed = Some((wake, id.clone(), resume.into()));
            return Ok(None);
        }
        self.phase = Phase::Initializing;
        Ok(Some(self.initialize_result()))
    }

    pub(super) fn initialize_result(&self) -> InitializeResult {
        InitializeResult {
            protocol_version: PROTOCOL_VERSION.to_owned(),
            server_info: Some(ServerInfo {
                name: env!("CARGO_PKG_NAME").to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            }),
            capabilities: Some(Capabilities {
                methods: METHODS.iter().map(|m| (*m).to_owned()).collect(),
                notifications: NOTIFICATIONS.iter().map(|n| (*n).to_owned()).collect(),
                features: FEATURES.iter().map(|f| (*f).to_owned()).collect(),
            }),
            session_id: Some(self.session_id.to_string()),
            environment_info: Some(crate::dialect::environment_info(self.table.prepend_path())),
        }
    }
}
