//! Changes waiting to be sent, per watch: merged within the coalescing window
//! (the same change to one path again, or a write right after a create, is
//! one change), in the order they happened, and bounded: past
//! [`MAX_QUEUED`] for the connection, a watch's detail is dropped for one
//! `overflow` of its root.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::protocol::ChangeKind;

/// Changes waiting per connection; beyond, a watch's detail becomes an overflow.
pub(crate) const MAX_QUEUED: usize = 10_000;

/// A watch's taken changes: `None` when its detail was dropped for an overflow.
pub(crate) type Taken = Option<Vec<(PathBuf, ChangeKind)>>;

#[derive(Debug, Default)]
struct Batch {
    changes: Vec<(PathBuf, ChangeKind)>,
    /// Where each path's last change is in `changes`.
    last: HashMap<PathBuf, usize>,
    /// The detail was dropped: one overflow of the root is sent instead.
    overflow: bool,
}

/// Every watch's waiting changes.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    batches: BTreeMap<u64, Batch>,
    queued: usize,
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Adds a change of watch `watch`, merging it into the path's last one when they agree.
    pub(crate) fn push(&mut self, watch: u64, path: &Path, kind: ChangeKind) {
        let batch = self.batches.entry(watch).or_default();
        if batch.overflow {
            return;
        }
        if let Some(&at) = batch.last.get(path) {
            let previous = batch.changes[at].1;
            if previous == kind || (previous == ChangeKind::Created && kind == ChangeKind::Modified)
            {
                return;
            }
        }
        if self.queued >= MAX_QUEUED {
            self.queued -= batch.changes.len();
            *batch = Batch { overflow: true, ..Batch::default() };
            return;
        }
        batch.last.insert(path.to_path_buf(), batch.changes.len());
        batch.changes.push((path.to_path_buf(), kind));
        self.queued += 1;
    }

    /// The kernel lost events, or a watch could not follow a new directory:
    /// `watch` reports an overflow of its root and drops its detail.
    pub(crate) fn overflow(&mut self, watch: u64) {
        let batch = self.batches.entry(watch).or_default();
        self.queued -= batch.changes.len();
        *batch = Batch { overflow: true, ..Batch::default() };
    }

    /// Takes the waiting changes of every watch, oldest watch first;
    /// an overflowed watch yields `None` (its root is reported).
    pub(crate) fn take(&mut self) -> Vec<(u64, Taken)> {
        self.queued = 0;
        std::mem::take(&mut self.batches)
            .into_iter()
            .map(|(watch, batch)| (watch, (!batch.overflow).then_some(batch.changes)))
            .collect()
    }

    /// Puts back what could not be sent, before anything newer.
    pub(crate) fn put_back(&mut self, watch: u64, changes: Taken) {
        let newer = self.batches.remove(&watch).unwrap_or_default();
        let mut batch = Batch::default();
        match changes {
            None => batch.overflow = true,
            Some(changes) => {
                for (path, kind) in changes {
                    batch.last.insert(path.clone(), batch.changes.len());
                    batch.changes.push((path, kind));
                }
            }
        }
        self.queued += batch.changes.len();
        self.batches.insert(watch, batch);
        if newer.overflow {
            self.overflow(watch);
        } else {
            for (path, kind) in newer.changes {
                self.push(watch, &path, kind);
            }
        }
    }

    /// Forgets a watch's changes (it ended).
    pub(crate) fn forget(&mut self, watch: u64) {
        if let Some(batch) = self.batches.remove(&watch) {
            self.queued -= batch.changes.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    #[test]
    fn merges_in_order_and_overflows_past_the_bound() {
        let mut pending = Pending::default();
        let (a, b) = (Path::new("/t/a"), Path::new("/t/b"));
        for (path, kind) in [
            (a, Created),
            (a, Modified),
            (b, Modified),
            (a, Modified),
            (b, Modified),
            (a, Removed),
            (a, Created),
        ] {
            pending.push(1, path, kind);
        }
        let taken = pending.take();
        let expected = vec![
            (a.into(), Created),
            (b.into(), Modified),
            (a.into(), Removed),
            (a.into(), Created),
        ];
        assert_eq!(taken, vec![(1, Some(expected))]);
        for n in 0..MAX_QUEUED + 5 {
            pending.push(2, &PathBuf::from(format!("/t/{n}")), Created);
        }
        pending.push(3, a, Created);
        assert_eq!(pending.take(), vec![(2, None), (3, Some(vec![(a.into(), Created)]))]);
        assert!(pending.is_empty());
    }
}
