//! One file interface for this machine and for a server: [`FileSystem`], local and remote.

use std::future::Future;
use std::path::Path;

use crate::client::Client;
use crate::error::Error;
use crate::protocol::*;

#[cfg(feature = "server")]
mod local;
#[cfg(feature = "server")]
pub use self::local::LocalFileSystem;

/// File operations, with the same behaviour and errors locally and through a server.
pub trait FileSystem: Send + Sync {
    /// Reads a whole file (up to 512 MiB).
    fn read_file(&self, path: &Path) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;
    /// Reads up to `length` bytes at `offset`.
    fn read_range(
        &self,
        path: &Path,
        offset: u64,
        length: u64,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;
    /// Creates or truncates a file and writes `data`.
    fn write_file(
        &self,
        path: &Path,
        data: &[u8],
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Appends `data`, creating the file if needed.
    fn append_file(
        &self,
        path: &Path,
        data: &[u8],
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Creates a directory, with its parents when `recursive`.
    fn create_directory(
        &self,
        path: &Path,
        recursive: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Stats a path.
    fn metadata(&self, path: &Path) -> impl Future<Output = Result<Metadata, Error>> + Send;
    /// Lists a directory, sorted by name.
    fn read_directory(
        &self,
        path: &Path,
    ) -> impl Future<Output = Result<Vec<DirectoryEntry>, Error>> + Send;
    /// Removes a file or directory; `force` forgives a missing path.
    fn remove(
        &self,
        path: &Path,
        recursive: bool,
        force: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Copies a file, symlink or (with `recursive`) directory.
    fn copy(
        &self,
        from: &Path,
        to: &Path,
        recursive: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Renames a path.
    fn rename(&self, from: &Path, to: &Path) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The files of the machine a [`Client`] is connected to.
#[derive(Clone)]
pub struct RemoteFileSystem {
    client: Client,
}

impl RemoteFileSystem {
    /// Files through `client`.
    pub fn new(client: Client) -> RemoteFileSystem {
        RemoteFileSystem { client }
    }
}

fn read_params(path: &Path, range: Option<(u64, u64)>) -> ReadFileParams {
    ReadFileParams {
        path: path.to_path_buf(),
        offset: range.map(|(offset, _)| offset),
        length: range.map(|(_, length)| length),
        follow_symlinks: None,
    }
}

fn write_params(path: &Path, data: &[u8], append: bool) -> WriteFileParams {
    WriteFileParams {
        path: path.to_path_buf(),
        data_base64: Base64::encode_bytes(data),
        append,
        follow_symlinks: None,
    }
}

fn remove_params(path: &Path, recursive: bool, force: bool) -> RemoveParams {
    RemoveParams {
        path: path.to_path_buf(),
        recursive: Some(recursive),
        force: Some(force),
        follow_symlinks: None,
    }
}

fn copy_params(from: &Path, to: &Path, recursive: bool) -> CopyParams {
    CopyParams { source_path: from.to_path_buf(), destination_path: to.to_path_buf(), recursive }
}

fn rename_params(from: &Path, to: &Path) -> RenameParams {
    RenameParams { source_path: from.to_path_buf(), destination_path: to.to_path_buf() }
}

fn path_params(path: &Path) -> PathParams {
    PathParams { path: path.to_path_buf(), follow_symlinks: None }
}

fn mkdir_params(path: &Path, recursive: bool) -> CreateDirectoryParams {
    CreateDirectoryParams { path: path.to_path_buf(), recursive: Some(recursive) }
}

impl FileSystem for RemoteFileSystem {
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, Error> {
        Ok(self.client.read_file(read_params(path, None)).await?.data_base64.0)
    }

    async fn read_range(&self, path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, Error> {
        Ok(self.client.read_file(read_params(path, Some((offset, length)))).await?.data_base64.0)
    }

    async fn write_file(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        self.client.write_bytes(&write_params(path, b"", false), data).await.map(drop)
    }

    async fn append_file(&self, path: &Path, data: &[u8]) -> Result<(), Error> {
        self.client.write_bytes(&write_params(path, b"", true), data).await.map(drop)
    }

    async fn create_directory(&self, path: &Path, recursive: bool) -> Result<(), Error> {
        self.client.create_directory(mkdir_params(path, recursive)).await.map(drop)
    }

    async fn metadata(&self, path: &Path) -> Result<Metadata, Error> {
        self.client.get_metadata(path_params(path)).await
    }

    async fn read_directory(&self, path: &Path) -> Result<Vec<DirectoryEntry>, Error> {
        Ok(self.client.read_directory(path_params(path)).await?.entries)
    }

    async fn remove(&self, path: &Path, recursive: bool, force: bool) -> Result<(), Error> {
        self.client.remove(remove_params(path, recursive, force)).await.map(drop)
    }

    async fn copy(&self, from: &Path, to: &Path, recursive: bool) -> Result<(), Error> {
        self.client.copy(copy_params(from, to, recursive)).await.map(drop)
    }

    async fn rename(&self, from: &Path, to: &Path) -> Result<(), Error> {
        self.client.rename(rename_params(from, to)).await.map(drop)
    }
}
