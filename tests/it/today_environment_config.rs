//! `environmentConfig/read` (Codex 0.169): the executor's Codex config layers
//! for a cwd, limited to the asked key paths: the user's `config.toml` under
//! `CODEX_HOME`, and each trusted project's `.codex/config.toml` from the
//! project root down (an untrusted one's left out, keys a repository may not
//! set removed). Through the real binary, with a `CODEX_HOME` of its own.

use serde_json::json;

use crate::binary::Binary;
use crate::support::scratch;

fn uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}

#[tokio::test]
async fn the_users_and_trusted_projects_layers_are_read_for_the_asked_keys() {
    let base = scratch("environment-config");
    let (home, codex_home) = (base.join("home"), base.join("codex-home"));
    let (trusted, untrusted) = (base.join("trusted"), base.join("untrusted"));
    for dir in [&home, &codex_home, &trusted.join(".git"), &trusted.join("sub/.codex")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::create_dir_all(untrusted.join(".codex")).unwrap();
    std::fs::create_dir_all(untrusted.join(".git")).unwrap();
    std::fs::write(trusted.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(untrusted.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let user = format!(
        "model = \"o3\"\n\n[mcp_servers.docs]\nurl = \"https://docs.example/mcp\"\n\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        trusted.display()
    );
    std::fs::write(codex_home.join("config.toml"), user).unwrap();
    let project = "notify = [\"curl\", \"evil\"]\n\n[mcp_servers.local]\ncommand = \"serve\"\n";
    std::fs::write(trusted.join("sub/.codex/config.toml"), project).unwrap();
    std::fs::write(untrusted.join(".codex/config.toml"), project).unwrap();
    let mut command = tokio::process::Command::new(*crate::binary::BIN);
    command.env("CODEX_HOME", &codex_home).env("HOME", &home);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "config-test"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let asked = |cwd: &std::path::Path, keys: serde_json::Value| json!({"cwd": uri(cwd), "configPaths": keys, "requirementsPaths": [["mcp_servers"]]});
    let read = server
        .result(
            "environmentConfig/read",
            asked(&trusted.join("sub"), json!([["mcp_servers"], ["notify"]])),
        )
        .await;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        read,
        json!({
            "userHomeDir": uri(&home),
            "codexHomeDir": uri(&codex_home),
            "hostname": hostname.trim(),
            "config": {"layers": [
                {"source": format!("user ({}/config.toml)", codex_home.display()), "baseDir": uri(&codex_home), "toml": "[mcp_servers.docs]\nurl = \"https://docs.example/mcp\"\n"},
                {"source": format!("project ({}/sub/.codex/config.toml)", trusted.display()), "baseDir": uri(&trusted.join("sub/.codex")), "toml": "[mcp_servers.local]\ncommand = \"serve\"\n"},
            ], "cloudInsertionIndex": 0},
            "requirements": {"layers": [], "cloudInsertionIndex": 0},
        })
    );
    // An untrusted project's layer is left out.
    let read =
        server.result("environmentConfig/read", asked(&untrusted, json!([["mcp_servers"]]))).await;
    let sources: Vec<&str> = read["config"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, [format!("user ({}/config.toml)", codex_home.display())]);
    // What cannot be asked is refused, naming it.
    let error = server
        .error(
            "environmentConfig/read",
            json!({"cwd": uri(&trusted), "configPaths": [[]], "requirementsPaths": []}),
        )
        .await;
    assert_eq!(
        error,
        json!({"code": -32602, "message": "invalid params for environmentConfig/read: TOML paths must contain at least one key segment"})
    );
    let error = server
        .error(
            "environmentConfig/read",
            json!({"cwd": uri(&trusted), "configPaths": [], "requirementsPaths": []}),
        )
        .await;
    assert_eq!(error["message"], "invalid params for environmentConfig/read: at least one config or requirements path is required");
}

#[tokio::test]
async fn roots_bound_the_cwd_and_a_fifo_holds_nothing() {
    let base = scratch("environment-config-roots");
    let (codex_home, root, project) = (base.join("codex"), base.join("root"), base.join("root/p"));
    for dir in [&codex_home, &project.join(".git"), &project.join(".codex"), &base.join("out")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(project.join(".git/HEAD"), "ref: x\n").unwrap();
    let trusted = format!("[projects.\"{}\"]\ntrust_level = \"trusted\"\n", project.display());
    std::fs::write(codex_home.join("config.toml"), trusted).unwrap();
    let fifo =
        std::ffi::CString::new(project.join(".codex/config.toml").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo of a path in the test's own directory.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut command = tokio::process::Command::new(*crate::binary::BIN);
    command.arg(format!("--root={}", root.display())).env("CODEX_HOME", &codex_home);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "config-roots"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let asked = |cwd: &std::path::Path| json!({"cwd": uri(cwd), "configPaths": [["mcp_servers"]], "requirementsPaths": []});
    let outside = base.join("out");
    let error = server.error("environmentConfig/read", asked(&outside)).await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": format!("environmentConfig/read refused: cwd {} is outside the allowed roots", outside.display())})
    );
    let escape = root.join("../out");
    let error = server.error("environmentConfig/read", asked(&escape)).await;
    assert_eq!(error["code"], -32600, "{error}");
    // Five reads of a project whose config is a FIFO: each refused at once
    // (four would have held every fs thread before), and fs calls go on.
    for _ in 0..5 {
        let error = server.error("environmentConfig/read", asked(&project)).await;
        let message = format!(
            "failed to load executor-local config: {}/.codex/config.toml is not a regular file",
            project.display()
        );
        assert_eq!(error, json!({"code": -32603, "message": message}));
    }
    let listed = server.result("fs/readDirectory", json!({"path": root})).await;
    assert_eq!(listed["entries"].as_array().map(Vec::len), Some(1));
}
