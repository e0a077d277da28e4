//! Upstream's WebSocket auth flags, read into an [`Auth`]: `--ws-auth
//! capability-token` with `--ws-token-file` or `--ws-token-sha256`,
//! `--ws-auth signed-bearer-token` with `--ws-shared-secret-file` (and
//! `--ws-issuer`, `--ws-audience`, `--ws-max-clock-skew-seconds`), and our
//! older `--token-file` (an alias of a capability token's file).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::listen::{parse_sha256, Auth, SignedBearer, MIN_SHARED_SECRET_BYTES};

/// The flags, as clap reads them.
#[derive(Debug, Default, Args)]
pub(super) struct WsAuthFlags {
    /// With --listen ws://: how upgrades authenticate (Authorization: Bearer TOKEN).
    #[arg(long, value_enum, value_name = "MODE")]
    ws_auth: Option<WsAuthMode>,
    /// With --ws-auth capability-token: the file holding the token (one trailing newline trimmed; mode 0600).
    #[arg(long, value_name = "FILE")]
    ws_token_file: Option<PathBuf>,
    /// With --ws-auth capability-token: the token's SHA-256, in hex, instead of a file.
    #[arg(long, value_name = "HEX")]
    ws_token_sha256: Option<String>,
    /// With --ws-auth signed-bearer-token: the file holding the HS256 secret (mode 0600).
    #[arg(long, value_name = "FILE")]
    ws_shared_secret_file: Option<PathBuf>,
    /// With --ws-auth signed-bearer-token: the `iss` tokens must carry.
    #[arg(long, value_name = "ISSUER")]
    ws_issuer: Option<String>,
    /// With --ws-auth signed-bearer-token: the `aud` tokens must name.
    #[arg(long, value_name = "AUDIENCE")]
    ws_audience: Option<String>,
    /// With --ws-auth signed-bearer-token: tolerance on `exp` and `nbf`, in seconds.
    #[arg(long, value_name = "N")]
    ws_max_clock_skew_seconds: Option<u64>,
    /// The same as --ws-auth capability-token --ws-token-file FILE.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WsAuthMode {
    CapabilityToken,
    SignedBearerToken,
}

impl WsAuthFlags {
    /// Whether any of the flags was given.
    pub(super) fn any(&self) -> bool {
        self.ws_auth.is_some()
            || self.ws_token_file.is_some()
            || self.ws_token_sha256.is_some()
            || self.ws_shared_secret_file.is_some()
            || self.ws_issuer.is_some()
            || self.ws_audience.is_some()
            || self.ws_max_clock_skew_seconds.is_some()
            || self.token_file.is_some()
    }

    /// The auth these flags configure; an error names the flag that is wrong.
    pub(super) fn auth(&self) -> Result<Auth, String> {
        let mode = match (self.ws_auth, &self.token_file) {
            (None, Some(_)) | (Some(WsAuthMode::CapabilityToken), _) => {
                Some(WsAuthMode::CapabilityToken)
            }
            (mode, _) => mode,
        };
        let signed_only = self.ws_shared_secret_file.is_some()
            || self.ws_issuer.is_some()
            || self.ws_audience.is_some()
            || self.ws_max_clock_skew_seconds.is_some();
        let capability_only = self.ws_token_file.is_some() || self.ws_token_sha256.is_some();
        match mode {
            None if signed_only || capability_only => Err(
                "--ws-token-file, --ws-token-sha256 and --ws-shared-secret-file need --ws-auth capability-token or signed-bearer-token".to_owned(),
            ),
            None => Ok(Auth::OwnerOnly),
            Some(WsAuthMode::CapabilityToken) => {
                if signed_only {
                    return Err("--ws-shared-secret-file, --ws-issuer, --ws-audience and --ws-max-clock-skew-seconds belong to --ws-auth signed-bearer-token".to_owned());
                }
                let files: Vec<&PathBuf> =
                    self.ws_token_file.iter().chain(self.token_file.iter()).collect();
                match (files.as_slice(), &self.ws_token_sha256) {
                    ([file], None) => Ok(Auth::capability(&read_secret(file, "--ws-token-file")?)),
                    ([], Some(hex)) => Ok(Auth::Capability { sha256: parse_sha256(hex)? }),
                    _ => Err("--ws-auth capability-token needs exactly one of --ws-token-file FILE and --ws-token-sha256 HEX".to_owned()),
                }
            }
            Some(WsAuthMode::SignedBearerToken) => {
                if capability_only {
                    return Err("--ws-token-file and --ws-token-sha256 belong to --ws-auth capability-token".to_owned());
                }
                let Some(file) = &self.ws_shared_secret_file else {
                    return Err("--ws-auth signed-bearer-token needs --ws-shared-secret-file FILE".to_owned());
                };
                let secret = read_secret(file, "--ws-shared-secret-file")?;
                if secret.len() < MIN_SHARED_SECRET_BYTES {
                    return Err(format!(
                        "--ws-shared-secret-file {}: the secret is {} bytes; an HS256 key needs at least {MIN_SHARED_SECRET_BYTES} (256 bits, RFC 7518 section 3.2)",
                        file.display(),
                        secret.len()
                    ));
                }
                let skew = self.ws_max_clock_skew_seconds.map(Duration::from_secs);
                Ok(Auth::Signed(SignedBearer {
                    secret: secret.into_bytes(),
                    issuer: self.ws_issuer.clone(),
                    audience: self.ws_audience.clone(),
                    max_clock_skew: skew.unwrap_or(crate::listen::DEFAULT_CLOCK_SKEW),
                }))
            }
        }
    }
}

/// A secret file's content less one trailing newline: opened once, then
/// checked on that descriptor (a regular file of this user that no one else
/// may read), then read from it. Refused when empty, or when it begins or
/// ends with white space (a bearer token never does: HTTP trims it).
fn read_secret(path: &Path, flag: &str) -> Result<String, String> {
    use std::io::Read;
    let named = |e: std::io::Error| format!("{flag} {}: {e}", path.display());
    let mut file = std::fs::File::open(path).map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    let uid = crate::listen::euid();
    if !meta.is_file() || meta.uid() != uid {
        return Err(format!(
            "{flag} {}: the file must be a regular file of uid {uid} (it is uid {})",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{flag} {}: the file is readable by others (mode {:o}); make it 0600",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(named)?;
    let text = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if text.is_empty() {
        return Err(format!("{flag} {}: the file is empty", path.display()));
    }
    if text.trim() != text {
        return Err(format!(
            "{flag} {}: the secret begins or ends with white space, which a bearer token cannot carry",
            path.display()
        ));
    }
    Ok(text.to_owned())
}
