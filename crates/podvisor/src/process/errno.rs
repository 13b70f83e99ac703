//! OS errors in words, as the C library says them (`No such file or directory`), without
//! Rust's ` (os error N)`: the words tini and dumb-init print, and the ones podvisor's own
//! messages use.
//!
//! (A table of our own was tried so as to keep `strerror_r` out of the static PID 1 build: it
//! made the binary larger, since static glibc links `strerror_r` for its own needs anyway.)

use std::io;

/// An I/O error in words.
pub fn describe(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_librarys_words() {
        assert_eq!(
            describe(&io::Error::from_raw_os_error(libc::ENOENT)),
            "No such file or directory"
        );
        assert_eq!(
            describe(&io::Error::from_raw_os_error(libc::ENOTDIR)),
            "Not a directory"
        );
        assert_eq!(describe(&io::Error::other("plain")), "plain");
    }
}
