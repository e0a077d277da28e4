//! The `writeId`s a process has applied: the last [`REMEMBERED`], so that a
//! write retried after a reconnect is acknowledged and not applied twice.
//!
//! Ids are kept as 128-bit keyed hashes, not as strings: a process's memory
//! for them is bounded (16 bytes an id) whatever the client sends. Two
//! SipHash keys drawn per process make a collision between distinct ids of
//! one process a 2^-128 event, and one no client can aim for.

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;

use crate::protocol::ErrorObject;

/// How many ids each process remembers.
pub(crate) const REMEMBERED: usize = 4096;
/// The longest `writeId` accepted, in bytes.
pub(crate) const MAX_WRITE_ID_BYTES: usize = 256;

/// The ids applied to one process, oldest first.
#[derive(Default)]
pub(crate) struct WriteIds {
    keys: Option<(RandomState, RandomState)>,
    order: VecDeque<u128>,
    known: HashSet<u128>,
}

impl WriteIds {
    /// Refuses an id that is empty or too long, naming the process.
    pub(crate) fn check(id: &str, process: &str) -> Result<(), ErrorObject> {
        if id.is_empty() {
            return Err(ErrorObject::invalid_params(format!(
                "writeId for process {process} is empty"
            )));
        }
        if id.len() > MAX_WRITE_ID_BYTES {
            return Err(ErrorObject::invalid_params(format!(
                "writeId for process {process} is {} bytes long; the limit is {MAX_WRITE_ID_BYTES}",
                id.len()
            )));
        }
        Ok(())
    }

    /// Whether `id` was applied already.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.keys.as_ref().is_some_and(|keys| self.known.contains(&digest(keys, id)))
    }

    /// Remembers `id` as applied, forgetting the oldest beyond [`REMEMBERED`].
    pub(crate) fn insert(&mut self, id: &str) {
        let keys = self.keys.get_or_insert_with(|| (RandomState::new(), RandomState::new()));
        let key = digest(keys, id);
        if !self.known.insert(key) {
            return;
        }
        self.order.push_back(key);
        if self.order.len() > REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.known.remove(&oldest);
            }
        }
    }
}

fn digest((first, second): &(RandomState, RandomState), id: &str) -> u128 {
    (u128::from(first.hash_one(id)) << 64) | u128::from(second.hash_one(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_ids_only() {
        let mut ids = WriteIds::default();
        assert!(!ids.contains("w0"));
        for n in 0..=REMEMBERED {
            ids.insert(&format!("w{n}"));
        }
        assert!(!ids.contains("w0"), "the oldest id is forgotten");
        assert!(ids.contains("w1"));
        assert!(ids.contains(&format!("w{REMEMBERED}")));
        ids.insert("w1");
        assert_eq!(ids.order.len(), REMEMBERED);
    }

    #[test]
    fn refuses_empty_and_long_ids() {
        assert_eq!(
            WriteIds::check("", "p").map_err(|e| e.message),
            Err("writeId for process p is empty".to_owned())
        );
        let long = "x".repeat(MAX_WRITE_ID_BYTES + 1);
        assert!(WriteIds::check(&long, "p").is_err());
        assert!(WriteIds::check(&"x".repeat(MAX_WRITE_ID_BYTES), "p").is_ok());
    }
}
