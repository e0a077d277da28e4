//! The fs/* methods: one async function each over `tokio::fs`, absolute paths only.

mod copy;
mod error;
mod roots;

use std::io::SeekFrom;
use std::time::SystemTime;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use self::error::{io_error, FsOp};
pub(crate) use self::roots::{Follow, Roots};
use crate::protocol::{
    Base64, CopyParams, CreateDirectoryParams, DirectoryEntry, Empty, ErrorObject, Metadata,
    PathParams, ReadDirectoryResult, ReadFileParams, ReadFileResult, RemoveParams, RenameParams,
    WriteFileParams,
};

/// Largest read `fs/readFile` returns: 512 MiB.
pub const READ_LIMIT: u64 = 512 * 1024 * 1024;

type FsResult<T> = Result<T, ErrorObject>;

/// `fs/readFile`, whole or the byte range `offset..offset+length`.
pub(crate) async fn read_file(roots: &Roots, params: ReadFileParams) -> FsResult<ReadFileResult> {
    let path = &params.path;
    roots.check(path, Follow::All)?;
    let op = FsOp::Read;
    let mut file = tokio::fs::File::open(path).await.map_err(io_error(op, path))?;
    let meta = file.metadata().await.map_err(io_error(op, path))?;
    let offset = params.offset.unwrap_or(0);
    if meta.is_file() && offset > meta.len() {
        return Err(error::invalid_input(
            op,
            path,
            format!("offset {offset} is past the end of the file ({} bytes)", meta.len()),
        ));
    }
    let wanted = match params.length {
        Some(length) => length,
        None if meta.is_file() => meta.len() - offset,
        None => READ_LIMIT,
    };
    if wanted > READ_LIMIT {
        return Err(too_large());
    }
    if offset > 0 {
        file.seek(SeekFrom::Start(offset)).await.map_err(io_error(op, path))?;
    }
    // Presize for what a regular file holds; other files grow as they are read.
    let expected = if meta.is_file() { wanted.min(meta.len() - offset) } else { 0 };
    let mut data = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    // One byte more than allowed tells a file that grew past the limit.
    let cap = if params.length.is_some() { wanted } else { READ_LIMIT + 1 };
    file.take(cap).read_to_end(&mut data).await.map_err(io_error(op, path))?;
    if data.len() as u64 > READ_LIMIT {
        return Err(too_large());
    }
    Ok(ReadFileResult { data_base64: Base64(data) })
}

/// `fs/writeFile`: create or truncate, or append.
pub(crate) async fn write_file(roots: &Roots, params: WriteFileParams) -> FsResult<Empty> {
    let path = &params.path;
    roots.check(path, Follow::All)?;
    let data = Base64::decode(&params.data_base64).map_err(|e| {
        ErrorObject::invalid_request(format!("fs/writeFile requires valid base64 dataBase64: {e}"))
    })?;
    let mut options = tokio::fs::OpenOptions::new();
    options.create(true);
    if params.append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    let op = FsOp::Write;
    let mut file = options.open(path).await.map_err(io_error(op, path))?;
    file.write_all(&data.0).await.map_err(io_error(op, path))?;
    file.flush().await.map_err(io_error(op, path))?;
    Ok(Empty {})
}

/// `fs/createDirectory`; recursive by default.
pub(crate) async fn create_directory(
    roots: &Roots,
    params: CreateDirectoryParams,
) -> FsResult<Empty> {
    let path = &params.path;
    roots.check(path, Follow::All)?;
    let result = if params.recursive.unwrap_or(true) {
        tokio::fs::create_dir_all(path).await
    } else {
        tokio::fs::create_dir(path).await
    };
    result.map_err(io_error(FsOp::CreateDirectory, path))?;
    Ok(Empty {})
}

/// `fs/getMetadata`: follows symlinks for the type, size and times, and reports
/// whether the path itself is a symlink. A dangling symlink describes the link.
pub(crate) async fn get_metadata(roots: &Roots, params: PathParams) -> FsResult<Metadata> {
    let path = &params.path;
    roots.check(path, Follow::All)?;
    let op = FsOp::Stat;
    let link = tokio::fs::symlink_metadata(path).await.map_err(io_error(op, path))?;
    let is_symlink = link.file_type().is_symlink();
    let meta = if is_symlink { tokio::fs::metadata(path).await.unwrap_or(link) } else { link };
    Ok(Metadata {
        is_directory: meta.is_dir(),
        is_file: meta.is_file(),
        created_at_ms: meta.created().map(epoch_ms).unwrap_or(0),
        modified_at_ms: meta.modified().map(epoch_ms).unwrap_or(0),
        is_symlink,
        size: meta.len(),
        readonly: meta.permissions().readonly(),
    })
}

/// `fs/readDirectory`, entries sorted by name; symlinks are followed for the type.
pub(crate) async fn read_directory(
    roots: &Roots,
    params: PathParams,
) -> FsResult<ReadDirectoryResult> {
    let path = &params.path;
    roots.check(path, Follow::All)?;
    let op = FsOp::List;
    let mut reader = tokio::fs::read_dir(path).await.map_err(io_error(op, path))?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry().await.map_err(io_error(op, path))? {
        let mut file_type = entry.file_type().await.map_err(io_error(op, &entry.path()))?;
        if file_type.is_symlink() {
            if let Ok(meta) = tokio::fs::metadata(entry.path()).await {
                file_type = meta.file_type();
            }
        }
        entries.push(DirectoryEntry {
            file_name: entry.file_name().to_string_lossy().into_owned(),
            is_directory: file_type.is_dir(),
            is_file: file_type.is_file(),
        });
    }
    entries.sort_by(|a, b| a.file_name.cmp(&b.file_name));
    Ok(ReadDirectoryResult { entries })
}

/// `fs/remove`: recursive and forgiving of a missing path by default. A symlink
/// is removed itself, never what it points to.
pub(crate) async fn remove(roots: &Roots, params: RemoveParams) -> FsResult<Empty> {
    let path = &params.path;
    roots.check(path, Follow::Parent)?;
    let op = FsOp::Remove;
    let meta = match tokio::fs::symlink_metadata(path).await {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && params.force.unwrap_or(true) => {
            return Ok(Empty {})
        }
        Err(e) => return Err(io_error(op, path)(e)),
    };
    let result = if !meta.is_dir() {
        tokio::fs::remove_file(path).await
    } else if params.recursive.unwrap_or(true) {
        tokio::fs::remove_dir_all(path).await
    } else {
        tokio::fs::remove_dir(path).await
    };
    result.map_err(io_error(op, path))?;
    Ok(Empty {})
}

/// `fs/copy`: see [`copy::copy`].
pub(crate) async fn copy(roots: &Roots, params: CopyParams) -> FsResult<Empty> {
    roots.check(&params.source_path, Follow::All)?;
    roots.check(&params.destination_path, Follow::All)?;
    copy::copy(&params.source_path, &params.destination_path, params.recursive).await?;
    Ok(Empty {})
}

/// `fs/rename`: renames the entry itself; the error names the missing side.
pub(crate) async fn rename(roots: &Roots, params: RenameParams) -> FsResult<Empty> {
    let (source, destination) = (&params.source_path, &params.destination_path);
    roots.check(source, Follow::Parent)?;
    roots.check(destination, Follow::Parent)?;
    if let Err(e) = tokio::fs::rename(source, destination).await {
        let source_exists = tokio::fs::symlink_metadata(source).await.is_ok();
        let blamed = if source_exists { destination } else { source };
        return Err(error::io_error_between(FsOp::Rename, source, destination, blamed, e));
    }
    Ok(Empty {})
}

fn too_large() -> ErrorObject {
    ErrorObject::invalid_request(format!("file is too large to read: limit is {READ_LIMIT} bytes"))
}

fn epoch_ms(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
