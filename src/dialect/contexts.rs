//! Today's `sandbox` contexts (`FileSystemSandboxContext`) mapped onto this
//! server's sandbox policy, where they mean the same thing.
//!
//! - `permissions.type: "disabled"`: no sandbox.
//! - `managed` with `file_system` `readOnly` or `workspaceWrite` (a string or
//!   `{"type": ...}`, with optional `writableRoots`): writes only beneath the
//!   context's cwd, its workspace roots and those writable roots (none for
//!   readOnly); `network` `restricted`/`disabled`/false/`{"enabled": false}`
//!   or absent: no network; `enabled`/true/`{"enabled": true}`: the host's.
//!   That is [`crate::protocol::SandboxMode::Restricted`].
//! - Anything else is refused naming the field: `external` permissions,
//!   another file-system policy, a Windows sandbox level or private desktop.
//!
//! Paths come as file URIs; `policyContext {cwd, workspaceRoots}` wins over
//! the older top-level `cwd` and `workspaceRoots`.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::uri;
use crate::protocol::ErrorObject;

/// What a context asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Confinement {
    /// No sandbox.
    None,
    /// Writes only beneath these; the network only if `network`.
    Restricted { writable: Vec<PathBuf>, network: bool },
}

impl Confinement {
    /// As this server's `sandbox` param of process/start (None: no sandbox);
    /// a root that is not UTF-8 cannot be written there and is refused.
    pub(crate) fn to_sandbox(&self) -> Result<Option<Value>, ErrorObject> {
        match self {
            Confinement::None => Ok(None),
            Confinement::Restricted { writable, network } => {
                let roots = writable
                    .iter()
                    .map(|root| {
                        root.to_str().map(str::to_owned).ok_or_else(|| {
                            ErrorObject::invalid_params(format!(
                                "invalid params for process/start: sandbox root {} is not UTF-8",
                                root.display()
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(json!({"mode": "restricted", "writableRoots": roots, "network": network})))
            }
        }
    }
}

/// Whether `sandbox` is written in today's shape rather than `{"mode": ...}`.
pub(crate) fn is_context(sandbox: &Value) -> bool {
    sandbox.as_object().is_some_and(|o| !o.contains_key("mode"))
}

/// The confinement context `sandbox` asks for (of `method`, for messages).
pub(crate) fn confinement(method: &str, sandbox: &Value) -> Result<Confinement, ErrorObject> {
    let bad = |what: String| {
        ErrorObject::invalid_params(format!("invalid params for {method}: sandbox.{what}"))
    };
    let Some(context) = sandbox.as_object() else {
        return Err(bad("must be an object".into()));
    };
    match context.get("windowsSandboxLevel").and_then(Value::as_str) {
        None | Some("disabled") => {}
        Some(level) => {
            return Err(bad(format!(
                "windowsSandboxLevel {level:?} is Windows-only; this server runs on Linux"
            )))
        }
    }
    if context.get("windowsSandboxPrivateDesktop").and_then(Value::as_bool) == Some(true) {
        return Err(bad(
            "windowsSandboxPrivateDesktop is Windows-only; this server runs on Linux".into()
        ));
    }
    let permissions =
        context.get("permissions").ok_or_else(|| bad("permissions is missing".into()))?;
    let kind = permissions.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "disabled" => Ok(Confinement::None),
        "managed" => managed(context, permissions, &bad),
        "external" => Err(bad(
            "permissions type \"external\" (a sandbox applied outside the server) has no equivalent here; use managed or disabled".into(),
        )),
        other => Err(bad(format!("permissions type {other:?} is unknown (expected managed, disabled or external)"))),
    }
}

fn managed(
    context: &Map<String, Value>,
    permissions: &Value,
    bad: &dyn Fn(String) -> ErrorObject,
) -> Result<Confinement, ErrorObject> {
    let file_system = permissions.get("file_system").or_else(|| permissions.get("fileSystem"));
    let (policy, extra_roots) = match file_system {
        None => return Err(bad("permissions.file_system is missing".into())),
        Some(Value::String(policy)) => (policy.as_str(), None),
        Some(Value::Object(object)) => (
            object.get("type").and_then(Value::as_str).unwrap_or_default(),
            object.get("writableRoots").or_else(|| object.get("writable_roots")),
        ),
        Some(_) => return Err(bad("permissions.file_system must be a string or an object".into())),
    };
    let writes = match policy {
        "readOnly" | "read-only" => false,
        "workspaceWrite" | "workspace-write" => true,
        other => {
            return Err(bad(format!(
                "permissions.file_system {other:?} cannot be expressed here (readOnly and workspaceWrite can)"
            )))
        }
    };
    let network = match permissions.get("network") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(enabled)) => *enabled,
        Some(Value::String(s)) if s == "restricted" || s == "disabled" => false,
        Some(Value::String(s)) if s == "enabled" => true,
        Some(Value::Object(o)) if o.get("enabled").and_then(Value::as_bool).is_some() => {
            o.get("enabled").and_then(Value::as_bool) == Some(true)
        }
        Some(other) => {
            return Err(bad(format!("permissions.network {other} cannot be expressed here")))
        }
    };
    let mut writable = Vec::new();
    if writes {
        let policy_context = context.get("policyContext").and_then(Value::as_object);
        let field =
            |name: &str| policy_context.and_then(|p| p.get(name)).or_else(|| context.get(name));
        let cwd = field("cwd").and_then(Value::as_str).ok_or_else(|| {
            ErrorObject::invalid_params(
                "file system sandbox context with dynamic permissions requires cwd",
            )
        })?;
        writable.push(path_of(cwd, "cwd", bad)?);
        for (name, list) in [
            ("workspaceRoots", field("workspaceRoots")),
            ("file_system.writableRoots", extra_roots),
        ] {
            let Some(list) = list else { continue };
            let items = list.as_array().ok_or_else(|| bad(format!("{name} must be an array")))?;
            for item in items {
                let text =
                    item.as_str().ok_or_else(|| bad(format!("{name} holds a non-string")))?;
                writable.push(path_of(text, name, bad)?);
            }
        }
    }
    writable.dedup();
    Ok(Confinement::Restricted { writable, network })
}

/// A path given as a file URI (or, leniently, an absolute path).
fn path_of(
    text: &str,
    name: &str,
    bad: &dyn Fn(String) -> ErrorObject,
) -> Result<PathBuf, ErrorObject> {
    if uri::is_uri(text) {
        return uri::to_path(text).map_err(|e| bad(format!("{name}: {e}")));
    }
    if text.starts_with('/') {
        return Ok(PathBuf::from(text));
    }
    Err(bad(format!("{name}: {text:?} is not a file URI")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confine(sandbox: Value) -> Result<Confinement, String> {
        confinement("process/start", &sandbox).map_err(|e| e.message)
    }

    #[test]
    fn contexts_map_onto_policies() {
        assert_eq!(confine(json!({"permissions": {"type": "disabled"}})), Ok(Confinement::None));
        let workspace = json!({
            "permissions": {"type": "managed", "file_system": "workspaceWrite", "network": "restricted"},
            "cwd": "file:///old", "workspaceRoots": ["file:///old"],
            "policyContext": {"cwd": "file:///w", "workspaceRoots": ["file:///w", "file:///x"]},
        });
        let expected =
            Confinement::Restricted { writable: vec!["/w".into(), "/x".into()], network: false };
        assert_eq!(confine(workspace), Ok(expected));
        let read_only = json!({"permissions": {"type": "managed", "file_system": {"type": "readOnly"}, "network": {"enabled": true}}});
        assert_eq!(
            confine(read_only),
            Ok(Confinement::Restricted { writable: vec![], network: true })
        );
    }

    #[test]
    fn what_has_no_equivalent_is_refused_by_name() {
        let no_cwd = json!({"permissions": {"type": "managed", "file_system": "workspaceWrite"}});
        assert_eq!(
            confine(no_cwd),
            Err("file system sandbox context with dynamic permissions requires cwd".into())
        );
        let windows =
            json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "elevated"});
        assert_eq!(
            confine(windows),
            Err("invalid params for process/start: sandbox.windowsSandboxLevel \"elevated\" is Windows-only; this server runs on Linux".into())
        );
        assert!(
            confine(json!({"permissions": {"type": "external", "network": "enabled"}})).is_err()
        );
        let full = json!({"permissions": {"type": "managed", "file_system": "dangerFullAccess"}});
        assert!(confine(full)
            .unwrap_err()
            .contains("file_system \"dangerFullAccess\" cannot be expressed"));
    }
}
