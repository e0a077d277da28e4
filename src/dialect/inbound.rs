//! Requests in today's dialect made into this server's own (v0 and Part B) params.
//!
//! A request speaks today's dialect when it writes a path as a file URI or
//! uses one of today's shapes (an `envPolicy`, a sandbox context, `metadata`);
//! the core then sees plain paths (or their base64 twins, for names that are
//! not UTF-8), a complete `env`, and a `{"mode": ...}` sandbox. What today's
//! client may send but this server cannot honour is refused naming the field.

use serde_json::{Map, Value};

use super::contexts::{self, Confinement};
use super::uri::PATH_KEYS;
use super::{env, uri, Dialect, Numbering};
use crate::protocol::{Base64, ErrorObject, NetworkPolicy, Sandbox};

/// fs methods that change the file system (confined by a managed sandbox context).
const FS_WRITES: [&str; 5] =
    ["fs/writeFile", "fs/createDirectory", "fs/remove", "fs/copy", "fs/rename"];
/// process/start fields of today's client that have no equivalent here.
const UNSUPPORTED: [(&str, &str); 1] =
    [("shellSnapshot", "no shell state is cached here; start the shell itself")];

/// A request made ready for the core.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) params: Value,
    pub(crate) dialect: Dialect,
    /// How a process/start numbers its events: today's counter only for a file URI cwd.
    pub(crate) numbering: Numbering,
    /// An fs call under a sandbox context: an access list confines every
    /// call; the older writable roots confine writes only.
    pub(crate) confine: Option<FsConfine>,
}

/// How an fs call under a sandbox context is confined.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FsConfine {
    pub(crate) sandbox: Sandbox,
    /// The call changes the file system (its paths must be writable).
    pub(crate) writes: bool,
}

/// Translates the params of `method`.
pub(crate) fn translate(method: &str, params: Value) -> Result<Inbound, ErrorObject> {
    let Value::Object(mut object) = params else {
        return Ok(Inbound {
            params,
            dialect: Dialect::V0,
            numbering: Numbering::Output,
            confine: None,
        });
    };
    let mut dialect = Dialect::V0;
    let uri_cwd = object.get("cwd").and_then(Value::as_str).is_some_and(uri::is_uri);
    let numbering = if uri_cwd { Numbering::Counter } else { Numbering::Output };
    for key in PATH_KEYS {
        let Some(Value::String(text)) = object.get(key) else { continue };
        if !uri::is_uri(text) {
            continue;
        }
        dialect = Dialect::Today;
        let path = uri::to_path(text).map_err(|e| {
            ErrorObject::invalid_params(format!("invalid params for {method}: {key}: {e}"))
        })?;
        match path.into_os_string().into_string() {
            Ok(path) => {
                object.insert(key.to_owned(), Value::String(path));
            }
            Err(raw) if key != "cwd" => {
                object.remove(key);
                let bytes = std::os::unix::ffi::OsStringExt::into_vec(raw);
                object.insert(
                    format!("{key}Base64"),
                    serde_json::to_value(Base64(bytes)).unwrap_or_default(),
                );
            }
            Err(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "invalid params for {method}: cwd {text} is not UTF-8"
                )))
            }
        }
    }
    if method == "process/start" || method.starts_with("fs/") {
        check_sandbox_shape(method, &mut object)?;
    }
    let mut confine = None;
    if method == "process/start" {
        start_fields(&mut object, &mut dialect)?;
    } else if method.starts_with("fs/") {
        // Only today's context shape is translated; anything else stays as
        // v0 left it (fs/watch reads its own `{"mode": ...}`, others ignore it).
        let context = object.get("sandbox").is_some_and(contexts::is_context);
        if let Some(sandbox) = context.then(|| object.remove("sandbox")).flatten() {
            dialect = Dialect::Today;
            let replace = object.get("mode").and_then(Value::as_str) == Some("replace");
            let writes = FS_WRITES.contains(&method) || (method == "fs/open" && replace);
            // A context that only keeps the network confines no fs call.
            let confinement = match contexts::confinement(method, &sandbox, None)? {
                Some(Confinement::Files(sandbox)) => Some(*sandbox),
                Some(Confinement::NetworkOnly) | None => None,
            };
            if confinement.is_some() && method == "fs/watch" {
                // Fails closed: a watch would report changes the context keeps from it.
                return Err(ErrorObject::invalid_params(
                    "invalid params for fs/watch: a sandbox context cannot confine a watch here; watch without one, or with {\"mode\": \"restricted\", \"readableRoots\": [...]}",
                ));
            }
            confine = confinement
                .filter(|sandbox| writes || sandbox.access.is_some())
                .map(|sandbox| FsConfine { sandbox, writes });
        }
    }
    Ok(Inbound { params: Value::Object(object), dialect, numbering, confine })
}

/// Refuses a `sandbox` that would otherwise be ignored, leaving the call
/// unconfined: one that is not an object, one mixing v0's `mode` with a
/// context's `permissions`, and a v0 sandbox on an fs call that cannot
/// apply one (all but fs/watch; `{"mode": "none"}` asks for nothing).
fn check_sandbox_shape(method: &str, object: &mut Map<String, Value>) -> Result<(), ErrorObject> {
    let refuse = |what: &str| {
        ErrorObject::invalid_params(format!("invalid params for {method}: sandbox {what}"))
    };
    match object.get("sandbox") {
        None => Ok(()),
        Some(Value::Null) => {
            object.remove("sandbox");
            Ok(())
        }
        Some(Value::Object(sandbox)) => {
            let Some(mode) = sandbox.get("mode") else { return Ok(()) };
            if sandbox.contains_key("permissions") {
                return Err(refuse(
                    "holds both `mode` (a v0 sandbox) and `permissions` (a sandbox context); send one",
                ));
            }
            let applies = !method.starts_with("fs/") || method == "fs/watch";
            if applies || mode == "none" {
                return Ok(());
            }
            Err(refuse(&format!(
                "{{\"mode\": {mode}}} cannot confine {method} (only process/start and fs/watch take one); confine it with a sandbox context (`permissions`)"
            )))
        }
        Some(_) => Err(refuse("must be an object")),
    }
}

/// process/start's fields of today's dialect: `envPolicy`, a sandbox
/// context, `metadata`, and the refused ones.
fn start_fields(object: &mut Map<String, Value>, dialect: &mut Dialect) -> Result<(), ErrorObject> {
    for (field, why) in UNSUPPORTED {
        if object.get(field).is_some_and(|v| !v.is_null()) {
            return Err(ErrorObject::invalid_params(format!(
                "invalid params for process/start: {field} is not supported by exec-server: {why}"
            )));
        }
        object.remove(field);
    }
    let network = super::network_proxy::policy(object)?;
    if network.is_some() {
        *dialect = Dialect::Today;
    }
    // Exported to the process (CODEX_THREAD_ID, CODEX_TOOL_CALL_ID).
    if object.get("metadata").is_some_and(|m| !m.is_null()) {
        *dialect = Dialect::Today;
    }
    if let Some(policy) = object.remove("envPolicy").filter(|p| !p.is_null()) {
        *dialect = Dialect::Today;
        let given = match object.remove("env") {
            None | Some(Value::Null) => Default::default(),
            Some(env) => serde_json::from_value(env).map_err(|e| {
                ErrorObject::invalid_params(format!("invalid params for process/start: env: {e}"))
            })?,
        };
        // Variables that are not UTF-8 cannot be passed in this model: skipped.
        let server = std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        });
        let built = env::apply(policy, server, given)?;
        object.insert("env".into(), serde_json::to_value(built).unwrap_or_default());
    }
    if let Some(sandbox) = object.get("sandbox").filter(|s| contexts::is_context(s)) {
        *dialect = Dialect::Today;
        let cwd = object.get("cwd").and_then(Value::as_str).map(std::path::Path::new);
        match contexts::confinement("process/start", sandbox, cwd)?.map(Confinement::sandbox) {
            Some(policy) => {
                let policy = serde_json::to_value(&policy).map_err(|e| {
                    let named = contexts::non_utf8(&policy).map_or(e.to_string(), |path| {
                        format!("root {} is not UTF-8", path.display())
                    });
                    ErrorObject::invalid_params(format!(
                        "invalid params for process/start: sandbox {named}"
                    ))
                })?;
                object.insert("sandbox".into(), policy)
            }
            None => object.remove("sandbox"),
        };
    }
    if let Some(network) = network {
        with_network(object, network)?;
    }
    Ok(())
}

/// The start's sandbox, its network made `policy`: a start without one
/// gets every file writable and only the policy's hosts (the hosts are
/// enforced, so there must be a sandbox to enforce them in).
fn with_network(object: &mut Map<String, Value>, policy: NetworkPolicy) -> Result<(), ErrorObject> {
    let policy = serde_json::to_value(policy).unwrap_or_default();
    let unconfined = match object.get("sandbox") {
        None | Some(Value::Null) => true,
        Some(sandbox) => sandbox.get("mode").and_then(Value::as_str) == Some("none"),
    };
    if unconfined {
        let open = Confinement::NetworkOnly.sandbox();
        object.insert("sandbox".into(), serde_json::to_value(open).unwrap_or_default());
    }
    match object.get_mut("sandbox").and_then(Value::as_object_mut) {
        Some(sandbox) if sandbox.get("mode").and_then(Value::as_str) == Some("restricted") => {
            sandbox.insert("network".into(), policy);
            Ok(())
        }
        _ => Err(ErrorObject::invalid_params(
            "invalid params for process/start: networkProxy needs a restricted sandbox or none; the server's own (hostDefault) cannot take its hosts",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    #[test]
    fn uris_become_paths_or_base64_twins() {
        let inbound = translate(
            "fs/copy",
            json!({"sourcePath": "file:///a%20b", "destinationPath": "file:///t/%FF"}),
        )
        .unwrap();
        assert_eq!(inbound.dialect, Dialect::Today);
        assert_eq!(
            inbound.params,
            json!({"sourcePath": "/a b", "destinationPathBase64": "L3Qv/w=="})
        );
        let plain = translate("fs/getMetadata", json!({"path": "/x"})).unwrap();
        assert_eq!((plain.dialect, plain.params), (Dialect::V0, json!({"path": "/x"})));
        let error = translate("fs/readFile", json!({"path": "file://host/x"})).unwrap_err();
        assert_eq!(error.message, "invalid params for fs/readFile: path: file URI \"file://host/x\" names host \"host\"; only local paths are served");
    }

    #[test]
    fn start_fields_are_translated_or_refused() {
        let inbound = translate(
            "process/start",
            json!({"cwd": "file:///w", "envPolicy": {"inherit": "none", "set": {"A": "1"}}, "env": {"B": "2"},
                   "metadata": {"threadId": "t"}, "shellSnapshot": null,
                   "sandbox": {"permissions": {"type": "managed", "file_system": "workspaceWrite"}, "cwd": "file:///w"}}),
        )
        .unwrap();
        assert_eq!(
            inbound.params,
            json!({"cwd": "/w", "env": {"A": "1", "B": "2"}, "metadata": {"threadId": "t"}, "sandbox": {"mode": "restricted", "writableRoots": ["/w"], "network": false}})
        );
        let error =
            translate("process/start", json!({"shellSnapshot": {"scopeId": "s"}})).unwrap_err();
        assert_eq!(error.message, "invalid params for process/start: shellSnapshot is not supported by exec-server: no shell state is cached here; start the shell itself");
        assert!(translate("process/start", json!({"enforceManagedNetwork": true})).is_err());
        let proxied = json!({"argv": ["true"], "sandbox": null, "networkProxy": {"proxy": {"enabled": true, "domains": {"pypi.org": "allow"}}}});
        let inbound = translate("process/start", proxied).unwrap();
        assert_eq!(
            inbound.params["sandbox"]["network"],
            json!({"allow": ["pypi.org"], "deny": []})
        );
        assert_eq!(inbound.params["sandbox"]["access"], json!([{"path": "/", "access": "write"}]));
        let disabled =
            translate("process/start", json!({"sandbox": {"permissions": {"type": "disabled"}}}))
                .unwrap();
        assert_eq!(disabled.params, json!({}));
    }

    #[test]
    fn fs_contexts_confine_writes_only() {
        let context = json!({"permissions": {"type": "managed", "file_system": "workspaceWrite"}, "cwd": "file:///w"});
        let write =
            translate("fs/writeFile", json!({"path": "file:///w/f", "sandbox": context.clone()}))
                .unwrap();
        let sandbox = Sandbox::restricted(["/w"]).network(false);
        assert_eq!(write.confine, Some(FsConfine { sandbox, writes: true }));
        let read =
            translate("fs/readFile", json!({"path": "file:///etc/hosts", "sandbox": context}))
                .unwrap();
        assert_eq!((read.confine, read.params), (None, json!({"path": "/etc/hosts"})));
        // A v0 shape is left alone, as v0 did.
        let v0 = translate("fs/readFile", json!({"path": "/x", "sandbox": {"mode": "none"}}));
        assert_eq!(v0.unwrap().params, json!({"path": "/x", "sandbox": {"mode": "none"}}));
        let refused = |method: &str, sandbox: Value| {
            translate(method, json!({"path": "/x", "sandbox": sandbox})).unwrap_err().message
        };
        assert_eq!(
            refused("fs/readFile", json!("readOnly")),
            "invalid params for fs/readFile: sandbox must be an object"
        );
        assert_eq!(
            refused("process/start", json!({"mode": "none", "permissions": {"type": "managed"}})),
            "invalid params for process/start: sandbox holds both `mode` (a v0 sandbox) and `permissions` (a sandbox context); send one"
        );
        assert_eq!(
            refused("fs/writeFile", json!({"mode": "restricted", "writableRoots": ["/w"]})),
            "invalid params for fs/writeFile: sandbox {\"mode\": \"restricted\"} cannot confine fs/writeFile (only process/start and fs/watch take one); confine it with a sandbox context (`permissions`)"
        );
        assert!(
            translate("fs/watch", json!({"path": "/x", "sandbox": {"mode": "restricted"}})).is_ok()
        );
        assert!(translate("process/write", json!({"sandbox": 5})).is_ok(), "not a field there");
        let read_only = json!({"permissions": {"type": "managed", "file_system": "readOnly"}});
        let open = json!({"handleId": "h", "path": "/etc/hosts", "sandbox": read_only.clone()});
        assert_eq!(translate("fs/open", open).unwrap().confine, None, "reading stays free");
        let replace =
            json!({"handleId": "h", "path": "/w/f", "mode": "replace", "sandbox": read_only});
        let sandbox = Sandbox::restricted(Vec::<PathBuf>::new()).network(false);
        let confine = translate("fs/open", replace).unwrap().confine;
        assert_eq!(confine, Some(FsConfine { sandbox, writes: true }));
    }

    #[test]
    fn a_watch_under_a_context_is_refused() {
        let context = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [{"path": {"type": "path", "path": "file:///d"}, "access": "read"}]}}});
        let error = translate("fs/watch", json!({"path": "file:///d", "sandbox": context}));
        assert!(error.unwrap_err().message.starts_with(
            "invalid params for fs/watch: a sandbox context cannot confine a watch here"
        ));
        let free = json!({"permissions": {"type": "disabled"}});
        assert!(translate("fs/watch", json!({"path": "file:///d", "sandbox": free})).is_ok());
    }

    #[test]
    fn fs_access_lists_confine_every_call() {
        let context = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [{"path": {"type": "path", "path": "file:///d"}, "access": "read"}]}}});
        let read = translate("fs/readFile", json!({"path": "file:///d/f", "sandbox": context}));
        let confine = read.unwrap().confine.unwrap();
        assert!(!confine.writes);
        assert_eq!(
            confine.sandbox.access,
            Some(vec![crate::protocol::AccessEntry {
                path: "/d".into(),
                access: crate::protocol::Access::Read,
                optional: false,
                make: false,
            }])
        );
    }
}
