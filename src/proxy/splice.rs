//! The bytes of an admitted connection, both ways, until either side ends:
//! one buffer of [`BUFFER`] bytes each way, held in the server's room.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::gate::Admitted;
use super::BUFFER;

/// Writes `first` upstream (what the program sent past the request's head),
/// then carries bytes both ways; a side's end of file is passed on.
pub(super) async fn splice(mut program: TcpStream, admitted: Admitted, first: &[u8]) {
    let Admitted { mut upstream, _slot, held } = admitted;
    if !first.is_empty() && upstream.write_all(first).await.is_err() {
        return;
    }
    let carried =
        tokio::io::copy_bidirectional_with_sizes(&mut program, &mut upstream, BUFFER, BUFFER).await;
    if let Err(error) = carried {
        tracing::debug!(%error, "a proxied connection ended with an error");
    }
    drop(held);
}
