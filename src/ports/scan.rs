//! One look at the TCP sockets listening in a session's processes, through `/proc`.
//!
//! A process is the session's when it is in the session of one of its
//! started processes (each runs in a session of its own; a member is one
//! that started before the leader was reaped, as `process::tree` argues) or
//! descends from such a member (one that left with `setsid`). Sockets are
//! those of this server's network namespace (`/proc/self/net/tcp{,6}`).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::process::tree::{self, Session};
use crate::protocol::ListeningPort;

/// `st` of a socket in LISTEN state in `/proc/net/tcp`.
const LISTEN: &str = "0A";
/// Ancestors looked at above a process, at most (a chain this long is not a session's).
const MAX_DEPTH: usize = 4096;

/// The listening sockets held by the processes of `roster` (processId and
/// session), one entry per socket, ordered.
pub(crate) fn scan(roster: &[(String, Session)]) -> io::Result<Vec<ListeningPort>> {
    let mut listening = HashMap::new();
    parse_table(&std::fs::read_to_string("/proc/self/net/tcp")?, false, &mut listening);
    // A kernel without IPv6 has no tcp6 table.
    if let Ok(text) = std::fs::read_to_string("/proc/self/net/tcp6") {
        parse_table(&text, true, &mut listening);
    }
    if listening.is_empty() || roster.is_empty() {
        return Ok(Vec::new());
    }
    let members = members(roster);
    let mut found: HashMap<u64, ListeningPort> = HashMap::new();
    let mut pids: Vec<_> = members.into_iter().collect();
    pids.sort_unstable();
    for (pid, process_id) in pids {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        let mut command = None;
        for entry in entries.flatten() {
            let Ok(link) = std::fs::read_link(entry.path()) else { continue };
            let Some(inode) = socket_inode(&link.to_string_lossy()) else { continue };
            let Some((address, port)) = listening.get(&inode) else { continue };
            if found.contains_key(&inode) {
                continue;
            }
            let command = command.get_or_insert_with(|| argv0(pid)).clone();
            let port = ListeningPort {
                address: address.clone(),
                port: *port,
                pid,
                process_id: process_id.clone(),
                command,
            };
            found.insert(inode, port);
        }
    }
    let ordered: BTreeSet<_> = found.into_values().collect();
    let mut ports: Vec<_> = ordered.into_iter().collect();
    ports.sort_by(|a, b| (a.port, &a.address, a.pid).cmp(&(b.port, &b.address, b.pid)));
    Ok(ports)
}

/// Every live process of the roster's sessions and their descendants, with
/// the processId each belongs to.
fn members(roster: &[(String, Session)]) -> HashMap<u32, String> {
    let stats: HashMap<u32, tree::Stat> =
        tree::all_pids().into_iter().filter_map(|pid| Some((pid, tree::stat(pid).ok()?))).collect();
    let direct = |stat: &tree::Stat| {
        roster
            .iter()
            .find(|(_, session)| stat.sid == session.sid && stat.start < session.bound)
            .map(|(id, _)| id)
    };
    let mut members = HashMap::new();
    for (&pid, stat) in &stats {
        let mut current = Some(stat);
        for _ in 0..MAX_DEPTH {
            let Some(stat) = current else { break };
            if stat.state == b'Z' {
                break;
            }
            if let Some(id) = direct(stat) {
                members.insert(pid, id.clone());
                break;
            }
            current = stats.get(&stat.ppid).filter(|parent| parent.start <= stat.start);
        }
    }
    members
}

/// Adds the LISTEN sockets of one `/proc/net/tcp{,6}` table: inode → (address, port).
fn parse_table(text: &str, v6: bool, into: &mut HashMap<u64, (String, u16)>) {
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9))
        else {
            continue;
        };
        if *state != LISTEN {
            continue;
        }
        let Some((address, port)) = local.split_once(':') else { continue };
        let (Some(address), Ok(port), Ok(inode)) =
            (parse_address(address, v6), u16::from_str_radix(port, 16), inode.parse::<u64>())
        else {
            continue;
        };
        if inode != 0 {
            into.insert(inode, (address, port));
        }
    }
}

/// An address as `/proc/net/tcp` writes it: 32-bit words in host order, in hex.
fn parse_address(hex: &str, v6: bool) -> Option<String> {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()))
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match (v6, bytes.len()) {
        (false, 4) => Some(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()),
        (true, 16) => {
            let octets: [u8; 16] = bytes.try_into().ok()?;
            Some(Ipv6Addr::from(octets).to_string())
        }
        _ => None,
    }
}

fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// A process's argv[0] (its name from `comm` when the command line is empty).
fn argv0(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let first = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    if !first.is_empty() {
        return String::from_utf8_lossy(first).into_owned();
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_give_listening_sockets_only() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1435 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
   1: 0100007F:A1B2 0100007F:1435 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 100 0 0 10 0\n";
        let v6 = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1\n";
        let mut found = HashMap::new();
        parse_table(v4, false, &mut found);
        parse_table(v6, true, &mut found);
        assert_eq!(found.len(), 2);
        assert_eq!(found[&4242], ("127.0.0.1".to_owned(), 5173));
        assert_eq!(found[&77], ("::1".to_owned(), 8080));
    }

    #[test]
    fn socket_links_name_inodes() {
        assert_eq!(socket_inode("socket:[123]"), Some(123));
        assert_eq!(socket_inode("pipe:[123]"), None);
    }
}
