//! The file tools (`read_file`, `write_file`, `list_dir`), confined to the
//! client's roots by an in-process server whose `--root`s they are: every
//! path is resolved beneath a root by the kernel (`openat2`), with no
//! check-then-use window, exactly as for `--root`. A change of roots makes a
//! new one.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::server::Config;
use crate::{Client, FileSystem, RemoteFileSystem};

/// Lines `read_file` returns by default.
const DEFAULT_LIMIT: usize = 2000;
/// Entries `list_dir` returns at most.
const MAX_ENTRIES: usize = 10_000;

/// File tools over the roots of the moment.
pub(crate) struct Files {
    fs: RemoteFileSystem,
    roots: Vec<PathBuf>,
}

impl Files {
    /// A server confined to `roots` (each must be an existing directory).
    pub(crate) async fn new(roots: Vec<PathBuf>) -> Result<Files, String> {
        let config = Config { roots: roots.clone(), ..Config::default() };
        let client = Client::in_process(config)
            .await
            .map_err(|e| format!("cannot confine the file tools to {roots:?}: {e}"))?;
        Ok(Files { fs: RemoteFileSystem::new(client), roots })
    }

    pub(crate) fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// `read_file`: lines `offset..offset+limit` (from 1) as `L<n>: text`.
    pub(crate) async fn read(
        &self,
        path: &Path,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<(String, Value), String> {
        let bytes = self.fs.read_file(path).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        let first = offset.max(1);
        if first > all.len().max(1) {
            return Err(format!(
                "offset {first} is past the end of {} ({} lines)",
                path.display(),
                all.len()
            ));
        }
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        let lines: Vec<String> = all
            .iter()
            .enumerate()
            .skip(first - 1)
            .take(limit)
            .map(|(n, line)| format!("L{}: {line}", n + 1))
            .collect();
        let text = lines.join("\n");
        Ok((text, json!({"lines": lines, "total_lines": all.len()})))
    }

    /// `write_file`: creates or replaces `path` with `content`.
    pub(crate) async fn write(
        &self,
        path: &Path,
        content: &str,
    ) -> Result<(String, Value), String> {
        self.fs.write_file(path, content.as_bytes()).await.map_err(|e| e.to_string())?;
        let text = format!("Wrote {} bytes to {}", content.len(), path.display());
        Ok((text, json!({"bytes_written": content.len()})))
    }

    /// `list_dir`: entries to `depth` levels, depth first in name order,
    /// indented two spaces a level, directories ending in `/`.
    pub(crate) async fn list(&self, path: &Path, depth: usize) -> Result<(String, Value), String> {
        let mut entries = Vec::new();
        let mut stack = vec![(path.to_path_buf(), 0usize, self.sorted(path).await?.into_iter())];
        while let Some((dir, level, listed)) = stack.last_mut() {
            let Some(entry) = listed.next() else {
                stack.pop();
                continue;
            };
            if entries.len() >= MAX_ENTRIES {
                entries.push(format!("… more than {MAX_ENTRIES} entries; list a deeper directory"));
                break;
            }
            let (dir, level) = (dir.join(&entry.file_name), *level);
            let suffix = if entry.is_directory { "/" } else { "" };
            entries.push(format!("{}{}{suffix}", "  ".repeat(level), entry.file_name));
            if entry.is_directory && level + 1 < depth {
                let below = self.sorted(&dir).await?;
                stack.push((dir, level + 1, below.into_iter()));
            }
        }
        Ok((entries.join("\n"), json!({"entries": entries})))
    }

    async fn sorted(&self, dir: &Path) -> Result<Vec<crate::protocol::DirectoryEntry>, String> {
        let mut listed = self.fs.read_directory(dir).await.map_err(|e| e.to_string())?;
        listed.sort_by(|a, b| a.file_name.cmp(&b.file_name));
        Ok(listed)
    }
}
