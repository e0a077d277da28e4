//! Retained output of one process: numbered chunks, the newest `limit` bytes kept.
//!
//! Retention is charged for what it costs in memory: a chunk's bytes plus
//! [`CHUNK_OVERHEAD`], so a process printing one byte at a time holds about
//! as much memory as one printing large chunks. Every log charges its
//! connection's [`Account`], which charges its server's, and the process
//! table keeps both within their budgets.

use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) use crate::account::Account;

use crate::protocol::{Base64, Chunk, Stream};

/// Default retention per process: 1 MiB.
pub(crate) const RETAINED_BYTES: usize = 1024 * 1024;
/// What a retained chunk costs besides its bytes: its record in the queue, the
/// heap block of its bytes and the allocator's header (measured: about 104 B).
pub(crate) const CHUNK_OVERHEAD: usize = 128;

#[derive(Debug)]
struct Stored {
    seq: u64,
    stream: Stream,
    bytes: Vec<u8>,
}

/// The chunks of one process, numbered from 1, stdout and stderr sharing one sequence.
#[derive(Debug)]
pub(crate) struct OutputLog {
    chunks: VecDeque<Stored>,
    /// Charged bytes: payload plus [`CHUNK_OVERHEAD`] per chunk.
    bytes: usize,
    limit: usize,
    last_seq: u64,
    account: Arc<Account>,
}

/// One page of a read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) next_seq: u64,
}

impl OutputLog {
    pub(crate) fn new(limit: usize, account: Arc<Account>) -> OutputLog {
        OutputLog { chunks: VecDeque::new(), bytes: 0, limit, last_seq: 0, account }
    }

    /// Charged bytes retained.
    #[cfg(test)]
    pub(crate) fn charged(&self) -> usize {
        self.bytes
    }

    /// Drops the oldest chunk unless it is the only one; whether one went.
    pub(crate) fn drop_oldest(&mut self) -> bool {
        if self.chunks.len() < 2 {
            return false;
        }
        if let Some(old) = self.chunks.pop_front() {
            self.uncharge(old.bytes.len() + CHUNK_OVERHEAD);
        }
        true
    }

    /// Drops every retained chunk (the numbering goes on); the charged
    /// bytes that went (0: none).
    pub(crate) fn clear(&mut self) -> usize {
        let freed = self.bytes;
        // Its slots go too: an exited process may wait 30 s to be forgotten.
        self.chunks = VecDeque::new();
        self.uncharge(self.bytes);
        freed
    }

    fn charge(&mut self, bytes: usize) {
        self.bytes += bytes;
        self.account.add(bytes);
    }

    fn uncharge(&mut self, bytes: usize) {
        self.bytes -= bytes;
        self.account.sub(bytes);
    }

    /// Seq of the newest chunk, 0 when none.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Appends a chunk, drops the oldest ones beyond the limit, and returns its seq.
    pub(crate) fn push(&mut self, stream: Stream, bytes: Vec<u8>) -> u64 {
        self.last_seq += 1;
        self.charge(bytes.len() + CHUNK_OVERHEAD);
        self.chunks.push_back(Stored { seq: self.last_seq, stream, bytes });
        while self.bytes > self.limit && self.drop_oldest() {}
        self.last_seq
    }

    /// The bytes of every retained chunk, oldest first.
    pub(crate) fn bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().map(|c| c.bytes.as_slice())
    }

    /// The bytes of the newest chunk (empty when there is none).
    pub(crate) fn newest_bytes(&self) -> &[u8] {
        self.chunks.back().map_or(&[], |c| c.bytes.as_slice())
    }

    /// Whether a read after `after_seq` would return anything.
    pub(crate) fn has_after(&self, after_seq: u64) -> bool {
        self.chunks.back().is_some_and(|newest| newest.seq > after_seq)
    }

    /// Takes the next seq for an event that is not output (under
    /// `Numbering::Counter`, exit and close are numbered with the output); returns it.
    pub(crate) fn reserve(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    /// Retained chunks with `seq > after_seq`, within `max_bytes` (the first always).
    pub(crate) fn read(&self, after_seq: u64, max_bytes: Option<u64>) -> Page {
        let start = self.chunks.partition_point(|c| c.seq <= after_seq);
        let mut chunks = Vec::new();
        let mut total: u64 = 0;
        for stored in self.chunks.iter().skip(start) {
            let size = stored.bytes.len() as u64;
            if let Some(max) = max_bytes {
                if !chunks.is_empty() && total + size > max {
                    break;
                }
            }
            total += size;
            chunks.push(Chunk {
                seq: stored.seq,
                stream: stored.stream,
                chunk: Base64(stored.bytes.clone()),
            });
        }
        // A page that reaches the newest chunk continues after every seq taken,
        // events included; a shorter one right after its last chunk.
        let complete = start + chunks.len() == self.chunks.len();
        let next_seq = match chunks.last() {
            Some(last) if !complete => last.seq + 1,
            _ => self.last_seq + 1,
        };
        Page { chunks, next_seq }
    }
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        self.uncharge(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(sizes: &[usize], limit: usize) -> OutputLog {
        let mut log = OutputLog::new(limit + sizes.len() * CHUNK_OVERHEAD, Arc::default());
        for (i, &size) in sizes.iter().enumerate() {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            log.push(stream, vec![b'a' + i as u8; size]);
        }
        log
    }

    fn seqs(page: &Page) -> Vec<u64> {
        page.chunks.iter().map(|c| c.seq).collect()
    }

    #[test]
    fn reads_everything_after_a_seq() {
        let log = log_of(&[1, 2, 3], 100);
        let page = log.read(1, None);
        assert_eq!(seqs(&page), vec![2, 3]);
        assert_eq!(page.next_seq, 4);
        assert_eq!(page.chunks[0].stream, Stream::Stderr);
        assert_eq!(page.chunks[0].chunk, Base64(b"bb".to_vec()));
    }

    #[test]
    fn empty_read_reports_the_next_seq() {
        let log = log_of(&[1, 2], 100);
        assert_eq!(log.read(2, None), Page { chunks: vec![], next_seq: 3 });
        let empty = OutputLog::new(10, Arc::default());
        assert_eq!(empty.read(0, None), Page { chunks: vec![], next_seq: 1 });
    }

    #[test]
    fn max_bytes_pages_without_skipping() {
        let log = log_of(&[4, 4, 4, 10, 1], 100);
        let mut after = 0;
        let mut pages = Vec::new();
        loop {
            let page = log.read(after, Some(8));
            if page.chunks.is_empty() {
                break;
            }
            pages.push(seqs(&page));
            after = page.next_seq - 1;
        }
        // The 10-byte chunk exceeds the budget alone but is still returned first.
        assert_eq!(pages, vec![vec![1, 2], vec![3], vec![4], vec![5]]);
    }

    #[test]
    fn retention_drops_the_oldest_chunks() {
        let log = log_of(&[4, 4, 4], 8);
        let page = log.read(0, None);
        assert_eq!(seqs(&page), vec![2, 3]);
        assert_eq!(page.next_seq, 4);
        assert_eq!(log.last_seq(), 3);
        assert!(log.has_after(2));
        assert!(!log.has_after(3));
    }

    #[test]
    fn each_chunk_is_charged_its_overhead_to_the_account() {
        let account = Arc::new(Account::default());
        let mut log = OutputLog::new(RETAINED_BYTES, account.clone());
        for _ in 0..1000 {
            log.push(Stream::Stdout, vec![b'x']);
        }
        assert_eq!((log.charged(), account.bytes()), (1000 * 129, 1000 * 129));
        // One-byte chunks fill the budget at 129 bytes each, not at one.
        for _ in 0..10_000 {
            log.push(Stream::Stdout, vec![b'x']);
        }
        assert_eq!(log.read(0, None).chunks.len(), RETAINED_BYTES / 129);
        assert!(log.drop_oldest());
        assert!(log.clear() > 0);
        assert_eq!((log.charged(), account.bytes()), (0, 0));
        assert_eq!(log.read(0, None).next_seq, 11_001);
        log.push(Stream::Stdout, vec![b'y'; 10]);
        drop(log);
        assert_eq!(account.bytes(), 0);
    }
}
