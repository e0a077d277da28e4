//! Today's `sandbox` contexts (`FileSystemSandboxContext`) made into this
//! server's Part B sandbox (`{"mode": "restricted", ...}`, see PROTOCOL.md).
//!
//! - `permissions.type` `disabled`: no sandbox. `external{network}`: the
//!   file system is confined elsewhere; here only the network, when it is
//!   restricted (everything writable, no network).
//! - `managed{file_system, network}`: `file_system` `unrestricted`, or
//!   `restricted` whose only grant is a `root` write, confines the network
//!   alone; any other `restricted` list becomes an access list, each entry
//!   expanded as upstream does ([`entries`]): `.git`, `.agents` and `.codex`
//!   stay read-only beneath every writable entry, and deny globs are passed on
//!   as absolute patterns. The older strings `readOnly` and `workspaceWrite`
//!   are still read: writes only beneath cwd and the workspace roots.
//! - `network` `restricted`/`disabled`/false/`{"enabled": false}` or absent:
//!   no network; `enabled`/true/`{"enabled": true}`: the host's.
//! - A Windows sandbox level or private desktop is refused naming the field.
//!
//! Paths come as file URIs; `policyContext {cwd, workspaceRoots}` wins over
//! the older top-level `cwd` and `workspaceRoots`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::uri;
use crate::protocol::{Access, AccessEntry, ErrorObject, Sandbox};

/// What `minimal` names on Linux: the system directories a program needs
/// (the missing ones grant nothing).
const MINIMAL: [&str; 8] =
    ["/bin", "/sbin", "/usr", "/etc", "/lib", "/lib64", "/nix/store", "/run/current-system/sw"];
/// Names kept read-only beneath every writable entry.
const KEEP_READ_ONLY: [&str; 3] = [".git", ".agents", ".codex"];
/// The prefix of a glob that stands for each workspace root.
const PROJECT_ROOTS_GLOB: &str = "codex-project-roots://";

type Bad<'a> = &'a dyn Fn(String) -> ErrorObject;

/// Whether `sandbox` is written in today's shape rather than `{"mode": ...}`.
pub(crate) fn is_context(sandbox: &Value) -> bool {
    sandbox.as_object().is_some_and(|o| !o.contains_key("mode"))
}

/// The confinement `context` asks for (of `method`, for messages), or
/// `None` for none. `process_cwd` is the policy's cwd when the context has none.
pub(crate) fn confinement(
    method: &str,
    context: &Value,
    process_cwd: Option<&Path>,
) -> Result<Option<Confinement>, ErrorObject> {
    let bad = |what: String| {
        ErrorObject::invalid_params(format!("invalid params for {method}: sandbox.{what}"))
    };
    let Some(context) = context.as_object() else {
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
        "disabled" => Ok(None),
        "external" => Ok((!network(permissions, &bad)?).then_some(Confinement::NetworkOnly)),
        "managed" => managed(context, permissions, process_cwd, &bad),
        other => Err(bad(format!(
            "permissions type {other:?} is unknown (expected managed, disabled or external)"
        ))),
    }
}

/// What a context asks of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Confinement {
    /// The files as the sandbox says (and its network).
    Files(Box<Sandbox>),
    /// Every file writable, no network: nothing for an fs call to check.
    NetworkOnly,
}

impl Confinement {
    /// The sandbox a process runs under.
    pub(crate) fn sandbox(self) -> Sandbox {
        match self {
            Confinement::Files(sandbox) => *sandbox,
            Confinement::NetworkOnly => Sandbox::access([AccessEntry {
                path: "/".into(),
                access: Access::Write,
                optional: false,
                make: false,
            }]),
        }
    }
}

fn managed(
    context: &Map<String, Value>,
    permissions: &Value,
    process_cwd: Option<&Path>,
    bad: Bad<'_>,
) -> Result<Option<Confinement>, ErrorObject> {
    let network = network(permissions, bad)?;
    let policy_context = context.get("policyContext").and_then(Value::as_object);
    let field = |name: &str| policy_context.and_then(|p| p.get(name)).or_else(|| context.get(name));
    let cwd = match field("cwd").and_then(Value::as_str) {
        Some(text) => Some(path_of(text, "cwd", bad)?),
        None => process_cwd.map(Path::to_path_buf),
    };
    let mut workspace = paths_of(field("workspaceRoots"), "workspaceRoots", bad)?;
    let file_system = permissions.get("file_system").or_else(|| permissions.get("fileSystem"));
    let (kind, object) = match file_system {
        None => return Err(bad("permissions.file_system is missing".into())),
        Some(Value::String(kind)) => (kind.as_str(), None),
        Some(Value::Object(object)) => {
            (object.get("type").and_then(Value::as_str).unwrap_or_default(), Some(object))
        }
        Some(_) => return Err(bad("permissions.file_system must be a string or an object".into())),
    };
    let writes_workspace = match kind {
        "unrestricted" => return Ok((!network).then_some(Confinement::NetworkOnly)),
        "restricted" => {
            let object =
                object.ok_or_else(|| bad("permissions.file_system.entries is missing".into()))?;
            return restricted(object, cwd.as_deref(), &workspace, network, bad);
        }
        "readOnly" | "read-only" => false,
        "workspaceWrite" | "workspace-write" => true,
        other => {
            return Err(bad(format!(
                "permissions.file_system {other:?} is unknown (expected restricted or unrestricted)"
            )))
        }
    };
    let mut writable = Vec::new();
    if writes_workspace {
        let cwd = cwd.ok_or_else(needs_cwd)?;
        writable.push(cwd);
        writable.append(&mut workspace);
        let extra = object.and_then(|o| o.get("writableRoots").or_else(|| o.get("writable_roots")));
        writable.extend(paths_of(extra, "file_system.writableRoots", bad)?);
    }
    writable.dedup();
    Ok(Some(Confinement::Files(Box::new(Sandbox::restricted(writable).network(network)))))
}

/// A `restricted` file system: its entries as an access list.
fn restricted(
    object: &Map<String, Value>,
    cwd: Option<&Path>,
    workspace: &[PathBuf],
    network: bool,
    bad: Bad<'_>,
) -> Result<Option<Confinement>, ErrorObject> {
    let list = object
        .get("entries")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("permissions.file_system.entries must be an array".into()))?;
    let mut access = Vec::new();
    let mut globs = Vec::new();
    for (index, entry) in list.iter().enumerate() {
        let name = format!("permissions.file_system.entries[{index}]");
        entries(entry, cwd, workspace, &mut access, &mut globs, &|what| {
            bad(format!("{name}.{what}"))
        })?;
    }
    let depth = match object.get("glob_scan_max_depth") {
        None | Some(Value::Null) => None,
        Some(value) => {
            Some(value.as_u64().filter(|d| *d > 0).and_then(|d| u32::try_from(d).ok()).ok_or_else(
                || {
                    bad("permissions.file_system.glob_scan_max_depth must be a positive integer"
                        .into())
                },
            )?)
        }
    };
    let full_write = access.iter().any(|e| e.path == Path::new("/") && e.access == Access::Write)
        && access.iter().all(|e| e.access == Access::Write)
        && globs.is_empty();
    if full_write {
        return Ok((!network).then_some(Confinement::NetworkOnly));
    }
    // As upstream: the cwd's own `.codex`, when the cwd is a writable entry,
    // is kept read-only even when it does not exist yet (made then), unless
    // a write entry names it; resolved by real paths with the rest.
    if let Some(cwd) = cwd {
        let path = cwd.join(".codex");
        access.push(AccessEntry { path, access: Access::Read, optional: false, make: true });
    }
    let mut sandbox = Sandbox::access(access).network(network);
    sandbox.keep_read_only = Some(KEEP_READ_ONLY.iter().map(|n| n.to_string()).collect());
    if !globs.is_empty() {
        sandbox.deny_globs = Some(globs);
        sandbox.glob_scan_max_depth = depth;
    }
    Ok(Some(Confinement::Files(Box::new(sandbox))))
}

/// One entry of a `restricted` list, expanded into access entries (a
/// special path may name several, or none) or deny globs.
fn entries(
    entry: &Value,
    cwd: Option<&Path>,
    workspace: &[PathBuf],
    access_list: &mut Vec<AccessEntry>,
    globs: &mut Vec<String>,
    bad: Bad<'_>,
) -> Result<(), ErrorObject> {
    let access = match entry.get("access").and_then(Value::as_str) {
        Some("read") => Access::Read,
        Some("write") => Access::Write,
        Some("deny" | "none") => Access::Deny,
        other => {
            return Err(bad(format!(
                "access {} is unknown (expected read, write, deny or none)",
                other.map_or("(missing)".to_owned(), |o| format!("{o:?}"))
            )))
        }
    };
    let optional = match entry.get("missing_path_behavior") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "skip" => true,
        Some(other) => {
            return Err(bad(format!("missing_path_behavior {other} is unknown (expected skip)")))
        }
    };
    let path = entry.get("path").ok_or_else(|| bad("path is missing".into()))?;
    let mut push =
        |path: PathBuf| access_list.push(AccessEntry { path, access, optional, make: false });
    match path.get("type").and_then(Value::as_str) {
        Some("path") => {
            let text = path
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("path.path must be a string".into()))?;
            push(path_of(text, "path.path", bad)?);
        }
        Some("glob_pattern") => {
            let pattern = path
                .get("pattern")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("path.pattern must be a string".into()))?;
            if access != Access::Deny {
                let grants = if access == Access::Read { "read" } else { "write" };
                return Err(bad(format!(
                    "path glob_pattern {pattern:?} grants {grants}; globs can only deny here"
                )));
            }
            // A glob is text: a base that is not UTF-8 cannot prefix it
            // (a lossy one would name a path that does not exist, hiding nothing).
            let base = |dir: &Path| {
                dir.to_str().map(str::to_owned).ok_or_else(|| {
                    bad(format!(
                        "path glob_pattern {pattern:?} cannot be taken from {}, which is not UTF-8",
                        dir.display()
                    ))
                })
            };
            if let Some(sub) = pattern.strip_prefix(PROJECT_ROOTS_GLOB) {
                for root in workspace {
                    globs.push(format!("{}/{}", base(root)?, sub.trim_start_matches('/')));
                }
            } else if pattern.starts_with('/') {
                globs.push(pattern.to_owned());
            } else {
                let cwd = cwd.ok_or_else(needs_cwd)?;
                globs.push(format!("{}/{pattern}", base(cwd)?));
            }
        }
        Some("special") => {
            let value = path.get("value").ok_or_else(|| bad("path.value is missing".into()))?;
            let subpath = value.get("subpath").and_then(Value::as_str);
            match value.get("kind").and_then(Value::as_str) {
                Some("root") => push("/".into()),
                Some("minimal") => MINIMAL.iter().for_each(|dir| push(dir.into())),
                Some("project_roots" | "current_working_directory") => {
                    if cwd.is_none() {
                        return Err(needs_cwd());
                    }
                    for root in workspace {
                        match subpath {
                            Some(sub) => push(root.join(sub.trim_start_matches('/'))),
                            None => push(root.clone()),
                        }
                    }
                }
                Some("tmpdir") => {
                    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
                    if let Some(dir) = tmpdir.filter(|d| d.is_absolute()) {
                        push(dir);
                    }
                }
                Some("slash_tmp") => push("/tmp".into()),
                Some("unknown") => {}
                other => {
                    return Err(bad(format!(
                        "path.value.kind {} is unknown (expected root, minimal, project_roots, tmpdir, slash_tmp or unknown)",
                        other.map_or("(missing)".to_owned(), |o| format!("{o:?}"))
                    )))
                }
            }
        }
        other => {
            return Err(bad(format!(
                "path.type {} is unknown (expected path, glob_pattern or special)",
                other.map_or("(missing)".to_owned(), |o| format!("{o:?}"))
            )))
        }
    }
    Ok(())
}

fn network(permissions: &Value, bad: Bad<'_>) -> Result<bool, ErrorObject> {
    Ok(match permissions.get("network") {
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
    })
}

/// The first path of `sandbox` that is not UTF-8 (the wire cannot carry it).
pub(crate) fn non_utf8(sandbox: &Sandbox) -> Option<&Path> {
    let roots = sandbox.writable_roots.iter().chain(&sandbox.readable_roots).flatten();
    let entries = sandbox.access.iter().flatten().map(|e| &e.path);
    roots.chain(entries).map(PathBuf::as_path).find(|path| path.to_str().is_none())
}

fn needs_cwd() -> ErrorObject {
    ErrorObject::invalid_request(
        "file system sandbox context with dynamic permissions requires cwd",
    )
}

fn paths_of(list: Option<&Value>, name: &str, bad: Bad<'_>) -> Result<Vec<PathBuf>, ErrorObject> {
    let Some(list) = list.filter(|l| !l.is_null()) else { return Ok(Vec::new()) };
    let items = list.as_array().ok_or_else(|| bad(format!("{name} must be an array")))?;
    items
        .iter()
        .map(|item| {
            let text = item.as_str().ok_or_else(|| bad(format!("{name} holds a non-string")))?;
            path_of(text, name, bad)
        })
        .collect()
}

/// A path given as a file URI (or, leniently, an absolute path).
fn path_of(text: &str, name: &str, bad: Bad<'_>) -> Result<PathBuf, ErrorObject> {
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
    use serde_json::json;

    fn confine(sandbox: Value) -> Result<Option<Value>, String> {
        confinement("process/start", &sandbox, None)
            .map(|s| s.map(|s| serde_json::to_value(s.sandbox()).unwrap()))
            .map_err(|e| e.message)
    }

    #[test]
    fn restricted_lists_become_access_lists() {
        let context = json!({
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "glob_scan_max_depth": 2, "entries": [
                    {"path": {"type": "special", "value": {"kind": "minimal"}}, "access": "read"},
                    {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": "src"}}, "access": "write"},
                    {"path": {"type": "special", "value": {"kind": "tmpdir"}}, "access": "write"},
                    {"path": {"type": "special", "value": {"kind": "unknown", "path": "x"}}, "access": "read"},
                    {"path": {"type": "path", "path": "file:///w/a%20b"}, "access": "none", "missing_path_behavior": "skip"},
                    {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"},
                    {"path": {"type": "glob_pattern", "pattern": "codex-project-roots://*.key"}, "access": "deny"},
                ]}},
            "cwd": "file:///c", "workspaceRoots": ["file:///w", "file:///v"],
        });
        let minimal: Vec<Value> =
            MINIMAL.iter().map(|d| json!({"path": d, "access": "read"})).collect();
        let mut access = minimal;
        access.extend([
            json!({"path": "/w/src", "access": "write"}),
            json!({"path": "/v/src", "access": "write"}),
        ]);
        let tmpdir = std::env::var("TMPDIR").ok().filter(|t| t.starts_with('/'));
        access.extend(tmpdir.map(|t| json!({"path": t, "access": "write"})));
        access.push(json!({"path": "/w/a b", "access": "deny", "optional": true}));
        access.push(json!({"path": "/c/.codex", "access": "read", "make": true}));
        assert_eq!(
            confine(context),
            Ok(Some(json!({"mode": "restricted", "network": false, "access": access,
                "denyGlobs": ["/c/**/*.env", "/w/*.key", "/v/*.key"], "globScanMaxDepth": 2,
                "keepReadOnly": [".git", ".agents", ".codex"]})))
        );
    }

    #[test]
    fn a_glob_cannot_be_taken_from_a_base_that_is_not_utf8() {
        let context = json!({
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "entries": [
                    {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"},
                ]}},
            "cwd": "file:///c%FF",
        });
        assert_eq!(
            confine(context),
            Err("invalid params for process/start: sandbox.permissions.file_system.entries[0].path glob_pattern \"**/*.env\" cannot be taken from /c\u{FFFD}, which is not UTF-8".into())
        );
    }

    #[test]
    fn full_access_confines_only_the_network() {
        let root_write = json!({"permissions": {"type": "managed", "network": "enabled", "file_system": {
            "type": "restricted", "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "write"}]}}});
        assert_eq!(confine(root_write), Ok(None));
        let unrestricted =
            json!({"permissions": {"type": "managed", "file_system": {"type": "unrestricted"}}});
        assert_eq!(
            confine(unrestricted),
            Ok(Some(json!({"mode": "restricted", "access": [{"path": "/", "access": "write"}]})))
        );
        let external = json!({"permissions": {"type": "external", "network": "enabled"}});
        assert_eq!(confine(external), Ok(None));
        assert_eq!(confine(json!({"permissions": {"type": "disabled"}})), Ok(None));
    }

    #[test]
    fn older_strings_and_refusals() {
        let workspace = json!({
            "permissions": {"type": "managed", "file_system": "workspaceWrite", "network": "restricted"},
            "cwd": "file:///old", "workspaceRoots": ["file:///old"],
            "policyContext": {"cwd": "file:///w", "workspaceRoots": ["file:///w", "file:///x"]},
        });
        assert_eq!(
            confine(workspace),
            Ok(Some(
                json!({"mode": "restricted", "writableRoots": ["/w", "/x"], "network": false})
            ))
        );
        let no_cwd = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "read"}]}}});
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
        let read_glob = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "glob_pattern", "pattern": "/w/*"}, "access": "read"}]}}});
        assert_eq!(
            confine(read_glob),
            Err("invalid params for process/start: sandbox.permissions.file_system.entries[0].path glob_pattern \"/w/*\" grants read; globs can only deny here".into())
        );
        let bad_kind = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "home"}}, "access": "read"}]}}});
        assert!(confine(bad_kind).unwrap_err().contains("kind \"home\" is unknown"));
    }
}
