//! Today's `networkProxy` (with `managedNetwork` and `enforceManagedNetwork`)
//! of `process/start`, made into a `sandbox.network` policy: its
//! `proxy.domains` (pattern → `allow` | `deny` | `none`) become the allow and
//! deny lists, `**.NAME` both NAME and `*.NAME`. What cannot be honoured as
//! asked is refused naming it, never widened: `mode: "limited"` (only GET,
//! HEAD and OPTIONS upstream), a bare `*`, `enabled: false`. The rest is not
//! needed here (docs/dialect.md): `managedNetwork`'s ports are the server's
//! own, the sandbox refuses Unix sockets whatever `unixSockets` allows, and
//! the proxy never reaches this host (`allowLocalBinding`).

use serde_json::{Map, Value};

use crate::protocol::{ErrorObject, NetworkPolicy};

/// The policy `networkProxy` asks for; `None` when it is absent or null.
pub(super) fn policy(
    object: &mut Map<String, Value>,
) -> Result<Option<NetworkPolicy>, ErrorObject> {
    let bad = |what: String| {
        ErrorObject::invalid_params(format!(
            "invalid params for process/start: networkProxy {what}"
        ))
    };
    // The server's own ports replace the client's, as upstream's do.
    object.remove("managedNetwork");
    let enforce = object.remove("enforceManagedNetwork");
    let launch = match object.remove("networkProxy") {
        None | Some(Value::Null) => {
            if matches!(enforce, Some(Value::Bool(true))) {
                return Err(ErrorObject::invalid_params(
                    "invalid params for process/start: enforceManagedNetwork without networkProxy names no hosts to reach; send networkProxy, or no enforcement",
                ));
            }
            return Ok(None);
        }
        Some(Value::Object(launch)) => launch,
        Some(_) => return Err(bad("must be an object".to_owned())),
    };
    let Some(Value::Object(proxy)) = launch.get("proxy") else {
        return Err(bad("proxy must be an object".to_owned()));
    };
    if proxy.get("enabled") == Some(&Value::Bool(false)) {
        return Err(bad("proxy.enabled is false: a disabled proxy cannot be launched".to_owned()));
    }
    match proxy.get("mode").and_then(Value::as_str) {
        None | Some("full") => {}
        Some(mode) => {
            return Err(bad(format!(
                "proxy.mode {mode:?} is not supported: this server's proxy carries every method (\"full\")"
            )))
        }
    }
    let mut policy = NetworkPolicy::default();
    let domains = match proxy.get("domains") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(domains)) => domains.clone(),
        Some(_) => return Err(bad("proxy.domains must be an object".to_owned())),
    };
    for (pattern, decision) in domains {
        let list = match decision.as_str() {
            Some("allow") => &mut policy.allow,
            Some("deny") => &mut policy.deny,
            Some("none") => continue,
            _ => {
                return Err(bad(format!("proxy.domains[{pattern:?}] must be allow, deny or none")))
            }
        };
        if pattern.trim() == "*" {
            return Err(bad(
                "proxy.domains \"*\" cannot be honoured here: name the hosts, or give the sandbox full network".to_owned(),
            ));
        }
        match pattern.strip_prefix("**.") {
            Some(name) => list.extend([name.to_owned(), format!("*.{name}")]),
            None => list.push(pattern),
        }
    }
    Ok(Some(policy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Result<Option<NetworkPolicy>, ErrorObject> {
        let Value::Object(mut object) = value else { unreachable!() };
        policy(&mut object)
    }

    #[test]
    fn domains_become_allow_and_deny_lists() {
        let asked = json!({
            "managedNetwork": {"loopbackPorts": [1, 2], "allowLocalBinding": false},
            "enforceManagedNetwork": true,
            "networkProxy": {"proxy": {"enabled": true, "mode": "full", "domains": {
                "**.github.com": "allow", "pypi.org": "allow", "evil.example.com": "deny", "old.org": "none"
            }}, "policyDecisionTimeoutMs": 1000}
        });
        let policy = map(asked).unwrap().unwrap();
        assert_eq!(policy.allow, ["github.com", "*.github.com", "pypi.org"]);
        assert_eq!(policy.deny, ["evil.example.com"]);
        assert!(!policy.ask);
        assert_eq!(
            map(json!({"managedNetwork": null, "enforceManagedNetwork": false})).unwrap(),
            None
        );
    }

    #[test]
    fn what_would_widen_is_refused() {
        let refused = |value: Value| map(value).err().map(|e| e.message);
        assert_eq!(
            refused(json!({"networkProxy": {"proxy": {"enabled": true, "mode": "limited"}}})).as_deref(),
            Some("invalid params for process/start: networkProxy proxy.mode \"limited\" is not supported: this server's proxy carries every method (\"full\")")
        );
        assert_eq!(
            refused(json!({"networkProxy": {"proxy": {"enabled": true, "domains": {"*": "allow"}}}})).as_deref(),
            Some("invalid params for process/start: networkProxy proxy.domains \"*\" cannot be honoured here: name the hosts, or give the sandbox full network")
        );
        assert_eq!(
            refused(json!({"enforceManagedNetwork": true})).as_deref(),
            Some("invalid params for process/start: enforceManagedNetwork without networkProxy names no hosts to reach; send networkProxy, or no enforcement")
        );
    }
}
