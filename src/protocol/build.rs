//! Constructors of the params a client builds: the structs are `#[non_exhaustive]`
//! so fields can be added, and these are how code outside the crate makes them.

use std::path::PathBuf;

use super::methods::*;
use super::Base64;

impl InitializeParams {
    /// `initialize` from `client_name`.
    pub fn new(client_name: impl Into<String>) -> InitializeParams {
        InitializeParams {
            client_name: client_name.into(),
            resume_session_id: None,
            takeover: false,
            resumable: false,
            network_decisions: false,
        }
    }

    /// Says that this client answers `network/decide` (sandboxes whose
    /// network policy asks about unlisted hosts).
    pub fn network_decisions(mut self) -> InitializeParams {
        self.network_decisions = true;
        self
    }

    /// Says that this client resumes a dropped connection's session, so the
    /// server keeps it detached instead of killing it.
    pub fn resumable(mut self) -> InitializeParams {
        self.resumable = true;
        self
    }

    /// Reattach the detached session `session_id` instead of starting a new one.
    pub fn resume(mut self, session_id: impl Into<String>) -> InitializeParams {
        self.resume_session_id = Some(session_id.into());
        self
    }

    /// With [`InitializeParams::resume`]: close the session's connection if
    /// it is still attached (this client knows it is dead).
    pub fn takeover(mut self) -> InitializeParams {
        self.takeover = true;
        self
    }
}

impl ReadParams {
    /// Everything retained for `process_id`, without waiting.
    pub fn new(process_id: impl Into<String>) -> ReadParams {
        ReadParams { process_id: process_id.into(), ..ReadParams::default() }
    }

    /// Only chunks after `seq`.
    pub fn after_seq(mut self, seq: u64) -> ReadParams {
        self.after_seq = Some(seq);
        self
    }

    /// At most `bytes` of chunks (the first chunk always comes).
    pub fn max_bytes(mut self, bytes: u64) -> ReadParams {
        self.max_bytes = Some(bytes);
        self
    }

    /// Wait up to `ms` for output or exit when there is nothing to return.
    pub fn wait_ms(mut self, ms: u64) -> ReadParams {
        self.wait_ms = Some(ms);
        self
    }
}

impl WriteParams {
    /// Writes `bytes` to `process_id`'s stdin.
    pub fn new(process_id: impl Into<String>, bytes: impl Into<Vec<u8>>) -> WriteParams {
        WriteParams {
            process_id: process_id.into(),
            chunk: Base64(bytes.into()),
            close_stdin: false,
            write_id: None,
        }
    }

    /// Tags the write with `id`, so that sending it again never applies it twice.
    pub fn write_id(mut self, id: impl Into<String>) -> WriteParams {
        self.write_id = Some(id.into());
        self
    }

    /// Closes stdin after the bytes.
    pub fn close_stdin(mut self) -> WriteParams {
        self.close_stdin = true;
        self
    }
}

impl TerminateParams {
    /// SIGKILL at once.
    pub fn new(process_id: impl Into<String>) -> TerminateParams {
        TerminateParams { process_id: process_id.into(), grace_ms: None }
    }

    /// SIGTERM first, SIGKILL after `ms`.
    pub fn grace_ms(mut self, ms: u64) -> TerminateParams {
        self.grace_ms = Some(ms);
        self
    }
}

impl SignalParams {
    /// `signal` by name (`SIGINT`, `interrupt`, ...) to `process_id`'s group.
    pub fn new(process_id: impl Into<String>, signal: impl Into<String>) -> SignalParams {
        SignalParams { process_id: process_id.into(), signal: signal.into() }
    }
}

impl ResizeParams {
    /// Resizes `process_id`'s terminal.
    pub fn new(process_id: impl Into<String>, rows: u16, cols: u16) -> ResizeParams {
        ResizeParams { process_id: process_id.into(), rows, cols }
    }
}

impl PathParams {
    /// `path`, following symlinks as the method does by default.
    pub fn new(path: impl Into<PathBuf>) -> PathParams {
        PathParams { path: path.into(), follow_symlinks: None }
    }

    /// fs/getMetadata: describe a final symlink itself.
    pub fn no_follow(mut self) -> PathParams {
        self.follow_symlinks = Some(false);
        self
    }
}

impl ReadFileParams {
    /// The whole file.
    pub fn new(path: impl Into<PathBuf>) -> ReadFileParams {
        ReadFileParams { path: path.into(), offset: None, length: None, follow_symlinks: None }
    }

    /// The bytes `offset..offset + length`.
    pub fn range(mut self, offset: u64, length: u64) -> ReadFileParams {
        self.offset = Some(offset);
        self.length = Some(length);
        self
    }
}

impl WriteFileParams {
    /// Replaces the file with `data` (atomically).
    pub fn new(path: impl Into<PathBuf>, data: &[u8]) -> WriteFileParams {
        WriteFileParams {
            path: path.into(),
            data_base64: Base64::encode_bytes(data),
            append: false,
            follow_symlinks: None,
        }
    }

    /// Appends instead of replacing.
    pub fn append(mut self) -> WriteFileParams {
        self.append = true;
        self
    }
}

impl CreateDirectoryParams {
    /// Creates `path` and its missing parents.
    pub fn new(path: impl Into<PathBuf>) -> CreateDirectoryParams {
        CreateDirectoryParams { path: path.into(), recursive: None }
    }
}

impl RemoveParams {
    /// Removes `path` (recursively; a missing path is not an error).
    pub fn new(path: impl Into<PathBuf>) -> RemoveParams {
        RemoveParams { path: path.into(), recursive: None, force: None, follow_symlinks: None }
    }
}

impl CopyParams {
    /// Copies `source` to `destination`; a directory needs `recursive`.
    pub fn new(
        source: impl Into<PathBuf>,
        destination: impl Into<PathBuf>,
        recursive: bool,
    ) -> CopyParams {
        CopyParams { source_path: source.into(), destination_path: destination.into(), recursive }
    }
}

impl RenameParams {
    /// Renames `source` to `destination`.
    pub fn new(source: impl Into<PathBuf>, destination: impl Into<PathBuf>) -> RenameParams {
        RenameParams { source_path: source.into(), destination_path: destination.into() }
    }
}
