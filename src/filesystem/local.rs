//! [`LocalFileSystem`]: this machine's files through the server's own fs
//! code, without a server (feature `server`).

use std::path::Path;

use super::*;
use crate::fs::{self, Roots};

/// This machine's files, through the server's own fs code (so errors match).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use exec_server::{FileSystem, LocalFileSystem};
///
/// let error = LocalFileSystem.read_file("/no/such/file".as_ref()).await.unwrap_err();
/// assert!(error.is_not_found());
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFileSystem;

static NO_ROOTS: Roots = Roots::empty();

/// Runs a blocking fs handler on tokio's blocking pool, unconfined.
async fn local<T: Send + 'static>(
    handler: impl FnOnce(&Roots) -> Result<T, ErrorObject> + Send + 'static,
) -> Result<T, Error> {
    match tokio::task::spawn_blocking(move || handler(&NO_ROOTS)).await {
        Ok(result) => result.map_err(Error::Rpc),
        Err(join) => Err(Error::Io {
            context: "a file operation did not finish".into(),
            source: std::io::Error::other(join.to_string()),
        }),
    }
}

impl FileSystem for LocalFileSystem {
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, Error> {
        let params = read_params(path, None);
        Ok(local(|roots| fs::read_file(roots, params).map_err(Into::into)).await?.data_base64.0)
    }

    async fn read_range(&self, path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, Error> {
        let params = read_params(path, Some((offset, length)));
        Ok(local(|roots| fs::read_file(roots, params).map_err(Into::into)).await?.data_base64.0)
    }

    async fn write_file(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        let params = write_params(path, data, false);
        local(|roots| fs::write_file(roots, params, &fs::FsRules::default())).await.map(drop)
    }

    async fn append_file(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        let params = write_params(path, data, true);
        local(|roots| fs::write_file(roots, params, &fs::FsRules::default())).await.map(drop)
    }

    async fn create_directory(&self, path: &Path, recursive: bool) -> Result<(), Error> {
        let params = mkdir_params(path, recursive);
        local(|roots| fs::create_directory(roots, params)).await.map(drop)
    }

    async fn metadata(&self, path: &Path) -> Result<Metadata, Error> {
        let params = path_params(path);
        local(|roots| fs::get_metadata(roots, params)).await
    }

    async fn read_directory(&self, path: &Path) -> Result<Vec<DirectoryEntry>, Error> {
        let params = path_params(path);
        Ok(local(|roots| fs::read_directory(roots, params, &fs::FsRules::default())).await?.entries)
    }

    async fn remove(&self, path: &Path, recursive: bool, force: bool) -> Result<(), Error> {
        let params = remove_params(path, recursive, force);
        local(|roots| fs::remove(roots, params)).await.map(drop)
    }

    async fn copy(&self, from: &Path, to: &Path, recursive: bool) -> Result<(), Error> {
        let params = copy_params(from, to, recursive);
        local(|roots| fs::copy(roots, params, &fs::FsRules::default())).await.map(drop)
    }

    async fn rename(&self, from: &Path, to: &Path) -> Result<(), Error> {
        let params = rename_params(from, to);
        local(|roots| fs::rename(roots, params)).await.map(drop)
    }
}
