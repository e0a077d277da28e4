//! The fs behaviours that are a choice, as plain options; the edge that
//! translated the request decides them, the default is this server's own.

/// Where the fs methods may behave one way or another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FsRules {
    /// A recursive `fs/copy` skips FIFOs, sockets and devices inside the tree
    /// (else it fails on them).
    pub(crate) skip_special_in_copies: bool,
    /// `fs/readDirectory` leaves out a symlink whose target cannot be stat'ed
    /// and an entry whose type cannot be read (else both are listed as
    /// neither file nor directory).
    pub(crate) list_only_known: bool,
    /// How `fs/walk` treats its bounds, its root, links and names.
    pub(crate) walk: WalkRules,
    /// `followSymlinks: false` (given as such) means that no component of
    /// the path may be a symlink (else only a last one counts).
    pub(crate) no_link_components: bool,
    /// `fs/writeFile` over a file with other names (hard links) writes it in
    /// place, so every name sees the new bytes (else it is replaced
    /// atomically, and the other names keep the old file).
    pub(crate) write_linked_in_place: bool,
}

/// `fs/walk`'s choices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WalkRules {
    /// Bounds of 0 (directories, entries) or over the ceilings are refused
    /// before the root is looked at, and the entries ceiling is 50,000 (else
    /// they are clamped, and the ceiling is 100,000).
    pub(crate) refuse_bad_bounds: bool,
    /// A root that is not a directory (a file, or a symlink when links are
    /// not followed) walks to nothing (else it is an error).
    pub(crate) non_directory_root_is_empty: bool,
    /// A symlink is an entry only when followed to a directory; dangling or
    /// file links are left out (else they are `file` entries).
    pub(crate) links_only_as_directories: bool,
    /// A name that is not UTF-8 is made lossy (U+FFFD) and stat'ed so; the
    /// lossy path is then not found and reported in `errors` (else it is
    /// listed with its own bytes).
    pub(crate) lossy_names: bool,
}
