//! Today's `restricted` permission profiles on process/start, through the
//! real binary as root and as nobody: read-only carve-outs inside a writable
//! root, masks over denied paths (and what is shown again beneath them),
//! deny globs, `minimal` and `project_roots`, symlinked roots; each attacked
//! by the process, with the tree outside snapshot before and after.

use std::path::Path;

use serde_json::{json, Value};

use crate::sandbox::{full_snapshot, run, run_started, Tree, User};

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn entry(path: Value, access: &str) -> Value {
    json!({"path": path, "access": access})
}

fn at(path: &Path) -> Value {
    json!({"type": "path", "path": uri(path)})
}

fn special(kind: &str) -> Value {
    json!({"type": "special", "value": {"kind": kind}})
}

/// A today's context with `entries` (cwd and workspace roots as given).
fn context(entries: Vec<Value>, cwd: &Path, workspace: &[&Path]) -> Value {
    let mut context = json!({
        "permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": entries}},
        "cwd": uri(cwd),
        "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false,
        "useLegacyLandlock": false,
    });
    if !workspace.is_empty() {
        context["workspaceRoots"] = workspace.iter().map(|w| uri(w)).collect();
    }
    context
}

fn start(id: &str, script: &str, cwd: &Path, sandbox: Value) -> Value {
    json!({"processId": id, "argv": ["/bin/sh", "-c", script], "cwd": uri(cwd),
           "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "arg0": null, "sandbox": sandbox})
}

/// Each attempt prints `NAME ok` or `NAME denied`; reads print what they got.
const ATTACKS: &str = r#"
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1 ok"; else echo "$1 denied"; fi; }
try git-write 'echo x >> .git/config'
try git-new 'echo x > .git/new'
try git-remove 'rm -rf .git'
try git-rename 'mv .git moved'
try git-chmod 'chmod 777 .git/config'
try secret-write 'echo x > secret/top'
try secret-new 'echo x > secret/new'
try secret-remove 'rm -rf secret'
try secret-rename 'mv secret moved'
try secret-unmount 'umount secret'
try shown-write 'echo x > secret/shown/s'
try env-write 'echo x > prod.env'
try env-remove 'rm -f prod.env'
try env-link 'ln prod.env linked.env'
try outside-read "cat $OUT/file"
try outside-write "echo x > $OUT/new"
try ordinary-write 'echo fine > made && mkdir dir && echo y > dir/f'
echo "secret: $(ls -A secret | tr '\n' ' ')"
echo "top: [$(cat secret/top 2>&1)]"
echo "shown: $(cat secret/shown/s)"
echo "env: [$(cat prod.env)] [$(cat nested/deep.env)]"
echo "git: $(cat .git/config)"
"#;

#[tokio::test]
async fn carve_outs_masks_and_deny_globs_hold_against_the_process() {
    for user in User::all() {
        let tree = Tree::new("profile-attacks", user);
        let w = &tree.w;
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::fs::write(w.join(".git/config"), "[core]").unwrap();
        std::fs::create_dir_all(w.join("secret/shown")).unwrap();
        std::fs::write(w.join("secret/top"), "top secret").unwrap();
        std::fs::write(w.join("secret/shown/s"), "shown").unwrap();
        std::fs::create_dir_all(w.join("nested")).unwrap();
        std::fs::write(w.join("prod.env"), "KEY=1").unwrap();
        std::fs::write(w.join("nested/deep.env"), "KEY=2").unwrap();
        user.own(&tree.base);
        let before_out = full_snapshot(&tree.out);
        let before_git = full_snapshot(&w.join(".git"));
        let before_secret = full_snapshot(&w.join("secret"));
        let mut server = user.ready(&[], &[]).await;
        let entries = vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
            entry(at(&w.join("secret")), "deny"),
            entry(at(&w.join("secret/shown")), "read"),
            entry(json!({"type": "glob_pattern", "pattern": "**/*.env"}), "deny"),
        ];
        let sandbox = context(entries, w, &[w]);
        let script = format!("OUT={}; {ATTACKS}", tree.out());
        let (output, code) = run(&mut server, start("a", &script, w, sandbox)).await;
        let expected = [
            "git-write denied",
            "git-new denied",
            "git-remove denied",
            "git-rename denied",
            "git-chmod denied",
            "secret-write denied",
            "secret-new denied",
            "secret-remove denied",
            "secret-rename denied",
            "secret-unmount denied",
            "shown-write denied",
            "env-write denied",
            "env-remove denied",
            "env-link denied",
            "outside-read denied",
            "outside-write denied",
            "ordinary-write ok",
            "secret: shown ",
            "top: [cat: secret/top: No such file or directory]",
            "shown: shown",
            "env: [] []",
            "git: [core]",
            "",
        ];
        assert_eq!((output.as_str(), code), (expected.join("\n").as_str(), 0), "as {user:?}");
        assert_eq!(full_snapshot(&tree.out), before_out, "outside changed, as {user:?}");
        assert_eq!(full_snapshot(&w.join(".git")), before_git, ".git changed, as {user:?}");
        assert_eq!(full_snapshot(&w.join("secret")), before_secret, "secret changed, as {user:?}");
        assert_eq!(std::fs::read_to_string(w.join("prod.env")).unwrap(), "KEY=1");
        assert_eq!(std::fs::read_to_string(w.join("dir/f")).unwrap(), "y\n");
    }
}

/// Renames that would leave what a mask or carve-out holds at a path the
/// list does not name, for the next run under the same list to find.
const RENAMES: &str = r#"
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1 ok"; else echo "$1 denied"; fi; }
try parent-rename 'mv sub moved'
try parent-swap 'mv sub/secret sub/gone'
try ro-parent-rename 'mv sub/deeper/ro-parent moved-ro'
try nested-entry-rename 'mv n n-moved'
try nested-parent-rename 'mv n/x n/y'
try plain-rename 'mv sub/plain sub/plain2 && mv sub/plain2 sub/plain'
try recreate 'mkdir -p moved/secret && echo fake > moved/secret/file'
try codex-write 'touch .codex/config.toml'
try codex-remove 'rmdir .codex'
ls -A
"#;

#[tokio::test]
async fn a_rename_cannot_carry_a_carve_out_past_the_next_run() {
    for user in User::all() {
        let tree = Tree::new("profile-renames", user);
        let w = &tree.w;
        for dir in ["sub/secret", "sub/deeper/ro-parent/ro", "sub/plain", "n/x/hidden"] {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        std::fs::write(w.join("sub/secret/file"), "secret").unwrap();
        std::fs::write(w.join("sub/deeper/ro-parent/ro/f"), "ro").unwrap();
        std::fs::write(w.join("n/x/hidden/h"), "hidden").unwrap();
        user.own(&tree.base);
        let kept = [w.join("sub/secret"), w.join("sub/deeper/ro-parent"), w.join("n/x")];
        let before: Vec<_> = kept.iter().map(|dir| full_snapshot(dir)).collect();
        let mut server = user.ready(&[], &[]).await;
        let entries = vec![
            entry(special("minimal"), "read"),
            entry(at(w), "write"),
            entry(at(&w.join("sub/secret")), "deny"),
            entry(at(&w.join("sub/deeper/ro-parent/ro")), "read"),
            entry(at(&w.join("n")), "write"),
            entry(at(&w.join("n/x/hidden")), "deny"),
        ];
        let sandbox = context(entries, w, &[]);
        let (output, code) = run(&mut server, start("a", RENAMES, w, sandbox.clone())).await;
        let expected = [
            "parent-rename denied",
            "parent-swap denied",
            "ro-parent-rename denied",
            "nested-entry-rename denied",
            "nested-parent-rename denied",
            "plain-rename ok",
            "recreate ok",
            // The cwd's .codex, missing, is made and kept read-only (as upstream).
            "codex-write denied",
            "codex-remove denied",
            ".codex",
            "moved",
            // mv copies what it cannot rename across mounts, and copying
            // what the process may read is no escape.
            "moved-ro",
            "n",
            "sub",
            "",
        ];
        assert_eq!((output.as_str(), code), (expected.join("\n").as_str(), 0), "as {user:?}");
        assert_eq!(std::fs::read_to_string(w.join("moved-ro/ro/f")).unwrap(), "ro");
        std::fs::remove_dir_all(w.join("moved")).unwrap();
        std::fs::remove_dir_all(w.join("moved-ro")).unwrap();
        let after: Vec<_> = kept.iter().map(|dir| full_snapshot(dir)).collect();
        assert_eq!(after, before, "what the list keeps changed, as {user:?}");
        // The next run under the same list still finds nothing of them.
        let script = "cat sub/secret/file n/x/hidden/h 2>&1; cat sub/deeper/ro-parent/ro/f";
        let (output, code) = run(&mut server, start("b", script, w, sandbox)).await;
        let expected = "cat: sub/secret/file: No such file or directory\ncat: n/x/hidden/h: No such file or directory\nro";
        assert_eq!((output.as_str(), code), (expected, 0), "as {user:?}");
    }
}

#[tokio::test]
async fn deny_globs_mask_any_name_and_refuse_what_a_process_could_repoint() {
    use std::os::unix::ffi::OsStrExt;
    let tree = Tree::new("profile-glob-names", User::Current);
    let w = &tree.w;
    std::fs::create_dir_all(w.join("real")).unwrap();
    std::fs::write(w.join("real/a.env"), "A=1").unwrap();
    let raw = w.join("real").join(std::ffi::OsStr::from_bytes(b"q\xff.env"));
    std::fs::write(&raw, "Q=1").unwrap();
    std::os::unix::fs::symlink("real", w.join("cur")).unwrap();
    let mut server = User::Current.ready(&[], &[]).await;
    let glob = || entry(json!({"type": "glob_pattern", "pattern": "**/*.env"}), "deny");
    let entries = vec![entry(special("minimal"), "read"), entry(at(w), "write"), glob()];
    let real = w.join("real");
    let script = "for f in *.env; do printf '[%s]' \"$(cat \"$f\")\"; done";
    let (output, code) =
        run(&mut server, start("a", script, &real, context(entries.clone(), &real, &[]))).await;
    assert_eq!((output.as_str(), code), ("[][]", 0), "both names are masked");
    // A glob taken from a cwd reached through a link the process could
    // repoint is refused, as an entry through it is (here the cwd's .codex
    // is met first).
    let linked = w.join("cur");
    let error = server
        .error("process/start", start("b", "true", &real, context(entries, &linked, &[])))
        .await;
    let through = |what: String| {
        format!(
            "{what} goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
            linked.display(),
            w.display()
        )
    };
    let codex = format!("sandbox access path {}", linked.join(".codex").display());
    assert_eq!(error["message"], through(codex));
    let access = json!({"mode": "restricted", "access": [{"path": w, "access": "write"}],
        "denyGlobs": [format!("{}/**/*.env", linked.display())]});
    let error = server.error("process/start", start("c", "true", &real, access)).await;
    let glob = format!("sandbox deny glob \"{}/**/*.env\"", linked.display());
    assert_eq!(error["message"], through(glob));
    assert_eq!(std::fs::read(&raw).unwrap(), b"Q=1");
}

#[tokio::test]
async fn a_deny_glob_that_cannot_scan_everything_refuses_the_start() {
    use std::os::unix::fs::PermissionsExt;
    if !User::all().contains(&User::Nobody) {
        return; // As root only: nobody must meet a directory it cannot read.
    }
    let tree = Tree::new("profile-glob-unreadable", User::Nobody);
    let w = &tree.w;
    User::Nobody.own(&tree.base);
    // Root's, unreadable to nobody: what it holds could match.
    let locked = w.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join("a.env"), "A=1").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut server = User::Nobody.ready(&[], &[]).await;
    let glob = entry(json!({"type": "glob_pattern", "pattern": "**/*.env"}), "deny");
    let entries = vec![entry(special("minimal"), "read"), entry(at(w), "write"), glob];
    let error =
        server.error("process/start", start("a", "true", w, context(entries, w, &[]))).await;
    assert_eq!(
        error["message"],
        format!(
            "sandbox deny glob \"{}/**/*.env\" cannot be scanned: cannot read {}: Permission denied (os error 13)",
            w.display(),
            locked.display()
        )
    );
}

#[tokio::test]
async fn a_context_that_only_keeps_the_network_works_under_root() {
    let tree = Tree::new("profile-network-only", User::Current);
    let w = &tree.w;
    std::fs::write(w.join("f"), "in the root").unwrap();
    let mut server = User::Current.ready(&["--root", tree.w()], &[]).await;
    let context = json!({"permissions": {"type": "managed", "network": "restricted",
        "file_system": {"type": "unrestricted"}}, "cwd": uri(w)});
    let read =
        server.result("fs/readFile", json!({"path": uri(&w.join("f")), "sandbox": context})).await;
    assert_eq!(crate::support::unb64(&read["dataBase64"]), b"in the root");
    let watch = json!({"path": uri(w), "sandbox": context});
    assert!(server.result("fs/watch", watch).await["watchId"].is_string());
    // The process writes anywhere it could without a sandbox, and opens no
    // IP socket.
    let script = "echo made > made; python3 -c 'import socket; socket.socket()' 2>/dev/null && echo net || echo no-net";
    let (output, code) = run(&mut server, start("a", script, w, context)).await;
    assert_eq!((output.as_str(), code), ("no-net\n", 0));
    assert_eq!(std::fs::read_to_string(w.join("made")).unwrap(), "made\n");
}

#[tokio::test]
async fn the_cwds_codex_is_kept_however_the_cwd_and_entries_are_spelled() {
    let tree = Tree::new("profile-codex", User::Current);
    let w = &tree.w;
    std::fs::create_dir_all(w.join("sub")).unwrap();
    let link = tree.base.join("link");
    std::os::unix::fs::symlink(w, &link).unwrap();
    let mut server = User::Current.ready(&[], &[]).await;
    let script = "mkdir -p .codex 2>/dev/null; touch .codex/config.toml 2>/dev/null && echo wrote || echo kept";
    let minimal = || entry(special("minimal"), "read");
    let cases = [
        ("cwd through a link", vec![minimal(), entry(at(w), "write")], link.clone(), "kept"),
        ("entry through a link", vec![minimal(), entry(at(&link), "write")], w.clone(), "kept"),
        ("cwd with ..", vec![minimal(), entry(at(w), "write")], w.join("sub/.."), "kept"),
        (
            "an explicit read entry",
            vec![minimal(), entry(at(w), "write"), entry(at(&w.join(".codex")), "read")],
            w.clone(),
            "kept",
        ),
        (
            "an explicit write entry",
            vec![minimal(), entry(at(w), "write"), entry(at(&w.join(".codex")), "write")],
            w.clone(),
            "wrote",
        ),
    ];
    for (index, (case, entries, cwd, expected)) in cases.into_iter().enumerate() {
        let _ = std::fs::remove_dir_all(w.join(".codex"));
        let id = format!("p{index}");
        let sandbox = context(entries, &cwd, &[]);
        let (output, code) = run(&mut server, start(&id, script, w, sandbox)).await;
        assert_eq!((output.as_str(), code), (format!("{expected}\n").as_str(), 0), "{case}");
        let written = w.join(".codex/config.toml").exists();
        assert_eq!(written, expected == "wrote", "{case}");
    }
}

#[tokio::test]
async fn minimal_and_project_roots_read_as_upstream_and_keep_arg0() {
    let tree = Tree::new("profile-minimal", User::Current);
    let workspace = &tree.w;
    std::fs::write(workspace.join("allowed.txt"), "allowed").unwrap();
    let mut server = User::Current.ready(&[], &[]).await;
    let entries = vec![entry(special("minimal"), "read"), entry(special("project_roots"), "read")];
    let sandbox = context(entries.clone(), workspace, &[workspace]);
    // `/bin` and `/lib` are links into `/usr` on Debian: resolved once, then confined.
    let script = format!("printf '%s\\n' \"$0\"; cat allowed.txt; cat {}/file 2>&1", tree.out());
    let mut params = start("a", &script, workspace, sandbox.clone());
    params["arg0"] = json!("custom-arg0");
    let (output, code) = run(&mut server, params).await;
    let denied = format!("cat: {}/file: Permission denied\n", tree.out());
    assert_eq!((output, code), (format!("custom-arg0\nallowed{denied}"), 1));
    // Nothing is readable when project_roots has no workspace roots: the
    // start stands, and the process says why it could not run.
    let empty = context(vec![entry(special("project_roots"), "read")], workspace, &[]);
    let started =
        server.result("process/start", start("b", "echo excluded", workspace, empty)).await;
    assert_eq!(started, json!({"processId": "b", "sandboxType": "linuxSeccomp"}));
    let (output, code) = run_started(&mut server, "b").await;
    assert_eq!(
        (output.as_str(), code),
        ("exec-server: cannot run /bin/sh: Permission denied (os error 13)\n", 127)
    );
}

#[tokio::test]
async fn a_deny_that_could_be_created_is_refused_and_unknown_shapes_are_named() {
    let tree = Tree::new("profile-refusals", User::Current);
    let w = &tree.w;
    let mut server = User::Current.ready(&[], &[]).await;
    let missing = vec![entry(at(w), "write"), entry(at(&w.join("later")), "deny")];
    let error =
        server.error("process/start", start("a", "true", w, context(missing, w, &[]))).await;
    assert_eq!(
        error["message"],
        format!(
            "sandbox deny path {} does not exist inside writable {}, so it cannot be kept hidden (it could be created); mark it optional to skip it",
            w.join("later").display(),
            w.display()
        )
    );
    let mut skip = entry(at(&w.join("later")), "deny");
    skip["missing_path_behavior"] = json!("skip");
    let skipped = vec![entry(special("minimal"), "read"), entry(at(w), "write"), skip];
    let (output, code) =
        run(&mut server, start("b", "echo ran", w, context(skipped, w, &[]))).await;
    assert_eq!((output.as_str(), code), ("ran\n", 0));
    let home = vec![entry(special("home"), "read")];
    let error = server.error("process/start", start("c", "true", w, context(home, w, &[]))).await;
    assert_eq!(error["code"], -32602);
    assert_eq!(error["message"], "invalid params for process/start: sandbox.permissions.file_system.entries[0].path.value.kind \"home\" is unknown (expected root, minimal, project_roots, tmpdir, slash_tmp or unknown)");
}

#[tokio::test]
async fn an_access_list_is_part_b_for_every_client() {
    let tree = Tree::new("profile-part-b", User::Current);
    let w = &tree.w;
    std::fs::write(w.join("hidden"), "hidden").unwrap();
    let mut server = User::Current.ready(&[], &[]).await;
    let access = json!({"mode": "restricted", "access": [
        {"path": "/usr", "access": "read"}, {"path": "/bin", "access": "read"},
        {"path": "/lib", "access": "read"}, {"path": "/lib64", "access": "read"},
        {"path": tree.w(), "access": "write"},
        {"path": w.join("hidden"), "access": "deny"},
    ]});
    let params = crate::sandbox::sandboxed(
        "v0",
        &["/bin/sh", "-c", "echo made > made; echo \"[$(cat hidden)]\""],
        tree.w(),
        json!({}),
        access,
    );
    let (output, code) = run(&mut server, params).await;
    assert_eq!((output.as_str(), code), ("[]\n", 0));
    assert_eq!(std::fs::read_to_string(w.join("made")).unwrap(), "made\n");
    assert_eq!(std::fs::read_to_string(w.join("hidden")).unwrap(), "hidden");
    let cases = [
        (
            json!({"mode": "restricted", "writableRoots": [], "access": []}),
            "sandbox access replaces writableRoots and readableRoots; give one or the other",
        ),
        (
            json!({"mode": "restricted", "access": [{"path": "rel", "access": "read"}]}),
            "sandbox access path rel must be an absolute path",
        ),
        (
            json!({"mode": "restricted", "writableRoots": [], "denyGlobs": ["/x/*"]}),
            "sandbox denyGlobs is only valid with an access list",
        ),
        (
            json!({"mode": "none", "access": []}),
            "sandbox access is only valid with mode `restricted`",
        ),
        (
            json!({"mode": "restricted", "access": [], "denyGlobs": ["*.env"]}),
            "sandbox deny glob \"*.env\" must be an absolute pattern",
        ),
    ];
    for (sandbox, message) in cases {
        let params = crate::sandbox::sandboxed("bad", &["true"], tree.w(), json!({}), sandbox);
        let error = server.error("process/start", params).await;
        assert_eq!(error, json!({"code": -32602, "message": message}));
    }
}
