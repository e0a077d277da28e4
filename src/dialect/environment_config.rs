//! `environmentConfig/read` (today's dialect): the Codex config layers of
//! the server's machine, as upstream's executor reads them for a cwd, each
//! limited to the TOML key paths asked for. Config, lowest precedence first:
//! the system file (`/etc/codex/config.toml`), the user's
//! (`$CODEX_HOME/config.toml`, `CODEX_HOME` defaulting to `~/.codex`), each
//! trusted project's `.codex/config.toml` from the project root down to the
//! cwd (keys a repository must not set removed), and the legacy
//! `/etc/codex/managed_config.toml`; cloud layers go after the system one.
//! Requirements: `/etc/codex/requirements.toml`. A missing file is an empty
//! layer; a layer with nothing asked for is left out. What upstream also
//! reads and this does not (MDM, the legacy managed file as requirements,
//! linked worktrees' hooks) is listed in docs/dialect.md.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::uri;
use crate::protocol::{
    ConfigLayer, ConfigLayerStack, EnvironmentConfigReadParams, EnvironmentConfigReadResult,
    ErrorObject,
};

const SYSTEM_CONFIG: &str = "/etc/codex/config.toml";
const SYSTEM_REQUIREMENTS: &str = "/etc/codex/requirements.toml";
const LEGACY_MANAGED: &str = "/etc/codex/managed_config.toml";
/// Keys a project's own config may not set (they choose where credentials
/// go or which commands run), as upstream drops them.
const PROJECT_DENYLIST: [&str; 12] = [
    "openai_base_url",
    "chatgpt_base_url",
    "apps_mcp_product_sku",
    "responses_api_metadata",
    "model_provider",
    "model_providers",
    "notify",
    "profile",
    "profiles",
    "experimental_realtime_webrtc_call_base_url",
    "experimental_realtime_ws_base_url",
    "otel",
];
/// The largest config file read.
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// A layer before projection.
struct Layer {
    source: String,
    base_dir: PathBuf,
    toml: Table,
}

/// Reads the layers for `params.cwd` (blocking: on an fs thread). Under
/// `--root`, the cwd must lie inside the roots, and only project
/// directories inside them are read.
pub(crate) fn read(
    roots: &crate::fs::Roots,
    params: &EnvironmentConfigReadParams,
) -> Result<EnvironmentConfigReadResult, ErrorObject> {
    let bad = |text: &str| {
        ErrorObject::invalid_params(format!("invalid params for environmentConfig/read: {text}"))
    };
    if params.config_paths.is_empty() && params.requirements_paths.is_empty() {
        return Err(bad("at least one config or requirements path is required"));
    }
    if params.config_paths.iter().chain(&params.requirements_paths).any(Vec::is_empty) {
        return Err(bad("TOML paths must contain at least one key segment"));
    }
    if !params.cwd.is_absolute() {
        return Err(bad("cwd must be an absolute path or a file URI"));
    }
    let cwd = crate::fs::clean_path(&params.cwd);
    let inside = |dir: &Path| !roots.confined() || roots.check_cwd(dir).is_ok();
    if !inside(&cwd) {
        return Err(ErrorObject::invalid_request(format!(
            "environmentConfig/read refused: cwd {} is outside the allowed roots",
            cwd.display()
        )));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let codex_home = codex_home(home.as_deref())?;
    let system = load(Path::new(SYSTEM_CONFIG))?;
    let user_file = codex_home.join("config.toml");
    let user = load(&user_file)?;
    let mut discovery = system.clone().unwrap_or_default();
    merge(&mut discovery, user.clone().unwrap_or_default());
    let mut config = vec![
        layer(format!("system ({SYSTEM_CONFIG})"), Path::new(SYSTEM_CONFIG), system),
        layer(format!("user ({})", user_file.display()), &user_file, user),
    ];
    config.extend(project_layers(&cwd, &discovery, &codex_home, &inside)?);
    if let Some(managed) = load(Path::new(LEGACY_MANAGED))? {
        let source = format!("legacy managed_config.toml ({LEGACY_MANAGED})");
        config.push(layer(source, Path::new(LEGACY_MANAGED), Some(managed)));
    }
    let requirements: Vec<Layer> = load(Path::new(SYSTEM_REQUIREMENTS))?
        .map(|toml| {
            layer(SYSTEM_REQUIREMENTS.to_owned(), Path::new(SYSTEM_REQUIREMENTS), Some(toml))
        })
        .into_iter()
        .collect();
    let requirements_cloud = requirements.len();
    Ok(EnvironmentConfigReadResult {
        user_home_dir: home.as_deref().map(uri::from_path),
        codex_home_dir: uri::from_path(&codex_home),
        hostname: hostname(),
        config: project(config, 1, &params.config_paths),
        requirements: project(requirements, requirements_cloud, &params.requirements_paths),
    })
}

/// `$CODEX_HOME` (which must exist, as upstream asks), else `~/.codex`.
fn codex_home(home: Option<&Path>) -> Result<PathBuf, ErrorObject> {
    match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => std::fs::canonicalize(&dir).map_err(|e| {
            ErrorObject::internal(format!(
                "failed to find Codex home: CODEX_HOME points to {}: {e}",
                Path::new(&dir).display()
            ))
        }),
        None => home
            .map(|home| home.join(".codex"))
            .ok_or_else(|| ErrorObject::internal("failed to find Codex home: HOME is not set")),
    }
}

fn layer(source: String, file: &Path, toml: Option<Table>) -> Layer {
    let base_dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    Layer { source, base_dir, toml: toml.unwrap_or_default() }
}

/// A TOML file; `None` when it does not exist.
fn load(file: &Path) -> Result<Option<Table>, ErrorObject> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Without blocking (a FIFO never holds the thread), and read only when
    // it is a regular file.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file);
    if let Ok(opened) = &opened {
        if !opened.metadata().is_ok_and(|m| m.is_file()) {
            return Err(ErrorObject::internal(format!(
                "failed to load executor-local config: {} is not a regular file",
                file.display()
            )));
        }
    }
    let opened = match opened {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ErrorObject::internal(format!(
                "failed to load executor-local config: cannot read {}: {e}",
                file.display()
            )))
        }
    };
    let mut text = String::new();
    opened.take(MAX_FILE + 1).read_to_string(&mut text).map_err(|e| {
        ErrorObject::internal(format!(
            "failed to load executor-local config: cannot read {}: {e}",
            file.display()
        ))
    })?;
    if text.len() as u64 > MAX_FILE {
        return Err(ErrorObject::internal(format!(
            "failed to load executor-local config: {} is larger than {MAX_FILE} bytes",
            file.display()
        )));
    }
    text.parse::<Table>().map(Some).map_err(|e| {
        ErrorObject::internal(format!(
            "failed to load executor-local config: {}: {e}",
            file.display()
        ))
    })
}

/// The trusted projects' `.codex` layers, from the project root down to `cwd`.
fn project_layers(
    cwd: &Path,
    discovery: &Table,
    codex_home: &Path,
    inside: &dyn Fn(&Path) -> bool,
) -> Result<Vec<Layer>, ErrorObject> {
    let markers: Vec<String> = match discovery.get("project_root_markers") {
        Some(Value::Array(list)) => {
            list.iter().filter_map(Value::as_str).map(str::to_owned).collect()
        }
        _ => vec![".git".to_owned()],
    };
    let root = project_root(cwd, &markers);
    let trust = |dir: &Path| -> Option<bool> {
        let projects = discovery.get("projects")?.as_table()?;
        let key = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let level = projects.get(key.to_str()?)?.get("trust_level")?.as_str()?;
        Some(level == "trusted")
    };
    let home = std::fs::canonicalize(codex_home).unwrap_or_else(|_| codex_home.to_path_buf());
    let mut dirs: Vec<&Path> = cwd.ancestors().collect();
    if let Some(at) = dirs.iter().position(|dir| *dir == root) {
        dirs.truncate(at + 1);
    }
    dirs.reverse();
    let mut layers = Vec::new();
    for dir in dirs.into_iter().filter(|dir| inside(dir)) {
        let dot_codex = dir.join(".codex");
        if !dot_codex.is_dir() || std::fs::canonicalize(&dot_codex).is_ok_and(|d| d == home) {
            continue;
        }
        // The directory's own decision, else the project root's; untrusted
        // or undecided projects' layers are not loaded.
        if !trust(dir).or_else(|| trust(&root)).unwrap_or(false) {
            continue;
        }
        let file = dot_codex.join("config.toml");
        let mut toml = load(&file)?.unwrap_or_default();
        for key in PROJECT_DENYLIST {
            toml.remove(key);
        }
        if let Some(features) = toml.get_mut("features").and_then(Value::as_table_mut) {
            features.remove("respect_system_proxy");
        }
        let source = format!("project ({})", file.display());
        layers.push(Layer { source, base_dir: dot_codex, toml });
    }
    Ok(layers)
}

/// The nearest ancestor of `cwd` holding a marker (a `.git` directory must
/// hold `HEAD`); `cwd` itself when none does.
fn project_root(cwd: &Path, markers: &[String]) -> PathBuf {
    for dir in cwd.ancestors() {
        for marker in markers {
            let path = dir.join(marker);
            let Ok(meta) = path.symlink_metadata() else { continue };
            if marker == ".git" && meta.is_dir() && !path.join("HEAD").exists() {
                continue;
            }
            return dir.to_path_buf();
        }
    }
    cwd.to_path_buf()
}

/// TOML tables merged, `over` winning (tables merge key by key).
fn merge(base: &mut Table, over: Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(mine)), Value::Table(theirs)) => merge(mine, theirs),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The layers limited to `paths`, empty ones left out; the cloud index
/// counts the layers kept before it.
fn project(layers: Vec<Layer>, cloud: usize, paths: &[Vec<String>]) -> ConfigLayerStack {
    let mut kept = Vec::new();
    let mut cloud_insertion_index = 0;
    for (index, layer) in layers.into_iter().enumerate() {
        let selected = select(&layer.toml, paths);
        if selected.is_empty() {
            continue;
        }
        if index < cloud {
            cloud_insertion_index += 1;
        }
        kept.push(ConfigLayer {
            source: layer.source,
            base_dir: uri::from_path(&layer.base_dir),
            toml: toml::to_string(&selected).unwrap_or_default(),
        });
    }
    ConfigLayerStack { layers: kept, cloud_insertion_index }
}

/// What of `table` lies on `paths` (a path reaching a value that is not a
/// table keeps it whole: it still overrides lower layers).
fn select(table: &Table, paths: &[Vec<String>]) -> Table {
    let mut selected = Table::new();
    for path in paths {
        let Some((first, rest)) = path.split_first() else { continue };
        let Some(value) = table.get(first) else { continue };
        let value = match (value, rest.is_empty()) {
            (Value::Table(inner), false) => {
                let inner = select(inner, &[rest.to_vec()]);
                if inner.is_empty() {
                    continue;
                }
                Value::Table(inner)
            }
            (value, _) => value.clone(),
        };
        match (selected.get_mut(first), value) {
            (Some(Value::Table(mine)), Value::Table(theirs)) => merge(mine, theirs),
            (_, value) => {
                selected.insert(first.clone(), value);
            }
        }
    }
    selected
}

fn hostname() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return None;
    }
    let end = buffer.iter().position(|b| *b == 0).unwrap_or(buffer.len());
    std::str::from_utf8(&buffer[..end]).ok().map(str::to_owned).filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_keeps_the_asked_paths_and_leaves_out_the_rest() {
        let table: Table = "model = \"o3\"\n[mcp_servers.docs]\nurl = \"http://x\"\n[mcp_servers.other]\ncommand = \"y\"\n"
            .parse()
            .unwrap();
        let all = select(&table, &[vec!["mcp_servers".into()]]);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["mcp_servers"]);
        let one = select(&table, &[vec!["mcp_servers".into(), "docs".into()]]);
        assert_eq!(toml::to_string(&one).unwrap(), "[mcp_servers.docs]\nurl = \"http://x\"\n");
        assert!(select(&table, &[vec!["nothing".into()]]).is_empty());
        let scalar = select(&table, &[vec!["model".into(), "deeper".into()]]);
        assert_eq!(toml::to_string(&scalar).unwrap(), "model = \"o3\"\n");
    }
}
