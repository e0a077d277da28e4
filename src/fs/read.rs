//! `fs/readFile`: regular files only, decided before opening for reading; ranges that work on pseudo-files.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;

use super::error::{invalid_input, io_error, FsOp};
use super::open::Located;
use super::refusal::Refusal;
use super::{kind, sys, too_large, Roots, READ_LIMIT};
use crate::protocol::{Base64, ErrorObject, ReadFileParams, ReadFileResult};

/// Opens what `located` names for reading, once it is known to be a regular
/// file (checked on an `O_PATH` descriptor first, so a FIFO never blocks the
/// open); a final symlink is followed only when `follow`. Returns its status too.
/// Anything but a regular file is [`Refusal::NotAFile`].
pub(crate) fn open_regular(
    located: &Located<'_>,
    op: FsOp,
    follow: bool,
) -> Result<(std::fs::File, libc::stat), Refusal> {
    let path = located.path();
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let handle = located.open(libc::O_PATH | nofollow).map_err(|e| located.fail(op, e))?;
    let stat = sys::fstat(handle.as_fd()).map_err(io_error(op, path))?;
    kind::require_regular(op, path, &stat).map_err(|own| match sys::file_type(&stat) {
        // The server's own stdio: a regular file, refused for another reason.
        libc::S_IFREG => Refusal::Fs(own),
        _ => Refusal::NotAFile { path: path.to_path_buf(), followed: follow, own: Box::new(own) },
    })?;
    let file = kind::reopen(&handle, libc::O_RDONLY).map_err(io_error(op, path))?;
    Ok((file, stat))
}

/// Reads the whole file or `offset..offset+length`. A final symlink is followed
/// unless `followSymlinks` is false, in which case it is refused as not a regular file.
pub(crate) fn read_file(roots: &Roots, params: ReadFileParams) -> Result<ReadFileResult, Refusal> {
    read_file_charged(roots, params, &mut |_| Ok(()))
}

/// [`read_file`], calling `reserve` with the bytes it will hold before it
/// reads them (a pseudo-file, whose size is known only by reading, after).
pub(crate) fn read_file_charged(
    roots: &Roots,
    params: ReadFileParams,
    reserve: &mut dyn FnMut(u64) -> Result<(), ErrorObject>,
) -> Result<ReadFileResult, Refusal> {
    let op = FsOp::Read;
    let located = roots.locate(&params.path)?;
    let path = located.path();
    let (mut file, stat) = open_regular(&located, op, params.follow_symlinks.unwrap_or(true))?;
    // Pseudo-files (/proc, /sys) report size 0: their size is only known by reading.
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    let sized = size > 0;
    let offset = params.offset.unwrap_or(0);
    if sized && offset > size {
        return Err(past_end(path, offset, size).into());
    }
    // What would be returned: the limit applies to that, not to the length asked.
    let available = if sized { size - offset } else { u64::MAX };
    let wanted = params.length.unwrap_or(available).min(available);
    if sized && wanted > READ_LIMIT {
        return Err(too_large().into());
    }
    if offset > 0 && sized {
        file.seek(SeekFrom::Start(offset)).map_err(io_error(op, path))?;
    } else if offset > 0 {
        let skipped =
            io::copy(&mut (&mut file).take(offset), &mut io::sink()).map_err(io_error(op, path))?;
        if skipped < offset {
            return Err(past_end(path, offset, skipped).into());
        }
    }
    let expected = if sized { wanted } else { 0 };
    if sized {
        reserve(wanted)?;
    }
    let mut data = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    // One byte more than allowed tells a file that grew past the limit.
    let cap = wanted.min(READ_LIMIT + 1);
    file.take(cap).read_to_end(&mut data).map_err(io_error(op, path))?;
    if data.len() as u64 > READ_LIMIT {
        return Err(too_large().into());
    }
    if !sized {
        reserve(data.len() as u64)?;
    }
    Ok(ReadFileResult { data_base64: Base64(data) })
}

fn past_end(path: &std::path::Path, offset: u64, size: u64) -> crate::protocol::ErrorObject {
    invalid_input(
        FsOp::Read,
        path,
        format!("offset {offset} is past the end of the file ({size} bytes)"),
    )
}
