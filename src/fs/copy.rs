//! `fs/copy`: files, symlinks (copied as symlinks) and directory trees.

use std::path::{Path, PathBuf};

use super::error::{io_error, FsOp};
use super::roots::resolve;
use crate::protocol::ErrorObject;

const NEEDS_RECURSIVE: &str = "fs/copy requires recursive: true when sourcePath is a directory";
const INTO_ITSELF: &str = "fs/copy cannot copy a directory to itself or one of its descendants";
const UNSUPPORTED: &str = "fs/copy only supports regular files, directories, and symlinks";

/// Copies `source` to `destination`. A directory needs `recursive` and is merged
/// into `destination` when that directory already exists.
pub(crate) async fn copy(
    source: &Path,
    destination: &Path,
    recursive: bool,
) -> Result<(), ErrorObject> {
    let op = FsOp::Copy;
    let meta = tokio::fs::symlink_metadata(source).await.map_err(io_error(op, source))?;
    let file_type = meta.file_type();
    if file_type.is_dir() {
        if !recursive {
            return Err(ErrorObject::invalid_request(NEEDS_RECURSIVE));
        }
        let from = resolve(source, &mut 0).map_err(io_error(op, source))?;
        let to = resolve(destination, &mut 0).map_err(io_error(op, destination))?;
        if to.starts_with(&from) {
            return Err(ErrorObject::invalid_request(INTO_ITSELF));
        }
        return copy_tree(source, destination).await;
    }
    copy_entry(source, destination, file_type).await
}

async fn copy_tree(source: &Path, destination: &Path) -> Result<(), ErrorObject> {
    let op = FsOp::Copy;
    let mut pending: Vec<(PathBuf, PathBuf)> = vec![(source.into(), destination.into())];
    while let Some((from, to)) = pending.pop() {
        tokio::fs::create_dir_all(&to).await.map_err(io_error(op, &to))?;
        let mut entries = tokio::fs::read_dir(&from).await.map_err(io_error(op, &from))?;
        while let Some(entry) = entries.next_entry().await.map_err(io_error(op, &from))? {
            let (child_from, child_to) = (entry.path(), to.join(entry.file_name()));
            let file_type = entry.file_type().await.map_err(io_error(op, &child_from))?;
            if file_type.is_dir() {
                pending.push((child_from, child_to));
            } else {
                copy_entry(&child_from, &child_to, file_type).await?;
            }
        }
    }
    Ok(())
}

async fn copy_entry(
    from: &Path,
    to: &Path,
    file_type: std::fs::FileType,
) -> Result<(), ErrorObject> {
    let op = FsOp::Copy;
    if file_type.is_symlink() {
        let target = tokio::fs::read_link(from).await.map_err(io_error(op, from))?;
        tokio::fs::symlink(target, to).await.map_err(io_error(op, to))
    } else if file_type.is_file() {
        tokio::fs::copy(from, to).await.map(drop).map_err(io_error(op, to))
    } else {
        Err(ErrorObject::invalid_request(UNSUPPORTED))
    }
}
