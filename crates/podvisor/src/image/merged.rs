//! One path of an image as its container sees it: the image's unpacked layers merged the way
//! overlayfs merges them, for the `subPath` of an image volume and the image's users. An
//! upper layer's entry hides the lower layers' entries of that name; a whiteout (a 0/0
//! character device) hides them and itself; an opaque directory (`trusted.overlay.opaque`,
//! `user.overlay.opaque` without root) shows only what the layers down to it hold; symbolic
//! links are followed inside the image's root, never out of it (`..` stops at the root, an
//! absolute target starts from it).

use std::ffi::OsString;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use crate::process::sys;

/// Symbolic links followed in one lookup at most (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// What a path of the merged image is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A directory: the directory of each layer that shows in it, top first (an overlay of
    /// them, or the one, is what the container sees).
    Dir(Vec<PathBuf>),
    /// Anything else: the file of the layer that shows.
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("{0:?} does not exist in the image")]
    NotFound(String),
    #[error("{0:?} is not a directory in the image")]
    NotADirectory(String),
    #[error("{0:?}: more than {MAX_LINKS} symbolic links in the image")]
    TooManyLinks(String),
    #[error("{path}: {error}")]
    Io { path: String, error: io::Error },
}

/// Finds `path` (relative to the image's root) in `layers` (the unpacked layers, top first).
pub fn find(layers: &[PathBuf], path: &str) -> Result<Found, LookupError> {
    let all: Vec<usize> = (0..layers.len()).collect();
    let mut todo: Vec<OsString> = Vec::new();
    push_front(&mut todo, Path::new(path));
    // Where the lookup is: a directory of the merged image, and the layers that show in it.
    let mut at = PathBuf::new();
    let mut showing = all.clone();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == "/" {
            (at, showing) = (PathBuf::new(), all.clone());
            continue;
        }
        if name == ".." {
            at.pop();
            showing = walk(layers, &at)?;
            continue;
        }
        match step(layers, &showing, &at, &name)? {
            Step::Dirs(dirs) => {
                at.push(&name);
                showing = dirs;
            }
            Step::Missing => return Err(LookupError::NotFound(path.to_string())),
            Step::Other(file, meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(LookupError::TooManyLinks(path.to_string()));
                }
                let target = std::fs::read_link(&file).map_err(|e| io_error(&file, e))?;
                push_front(&mut todo, &target);
            }
            Step::Other(file, _) if todo.is_empty() => return Ok(Found::File(file)),
            Step::Other(..) => return Err(LookupError::NotADirectory(path.to_string())),
        }
    }
    Ok(Found::Dir(
        showing.iter().map(|&l| layers[l].join(&at)).collect(),
    ))
}

/// What `name` in directory `at` of the merged image is.
enum Step {
    /// A directory, shown by these layers (top first).
    Dirs(Vec<usize>),
    /// Not there (or whited out).
    Missing,
    /// Something else, from the top layer that has it.
    Other(PathBuf, Metadata),
}

/// Looks `name` up in directory `at`, in the layers that show in `at` (top first).
fn step(
    layers: &[PathBuf],
    showing: &[usize],
    at: &Path,
    name: &OsString,
) -> Result<Step, LookupError> {
    let mut dirs = Vec::new();
    for &l in showing {
        let path = layers[l].join(at).join(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
            Err(e) => return Err(io_error(&path, e)),
        };
        let kind = meta.file_type();
        if kind.is_char_device() && meta.rdev() == 0 {
            break;
        }
        if !kind.is_dir() {
            // Below a directory of an upper layer, a lower layer's file does not show.
            if dirs.is_empty() {
                return Ok(Step::Other(path, meta));
            }
            break;
        }
        dirs.push(l);
        let opaque =
            sys::get_xattr(&path, super::opaque_xattr()).map_err(|e| io_error(&path, e))?;
        if opaque.as_deref() == Some(b"y") {
            break;
        }
    }
    Ok(match dirs.is_empty() {
        true => Step::Missing,
        false => Step::Dirs(dirs),
    })
}

/// The layers that show in directory `at` (reached before, so every step is a directory).
fn walk(layers: &[PathBuf], at: &Path) -> Result<Vec<usize>, LookupError> {
    let mut showing: Vec<usize> = (0..layers.len()).collect();
    let mut here = PathBuf::new();
    for c in at.components() {
        let name = c.as_os_str().to_os_string();
        showing = match step(layers, &showing, &here, &name)? {
            Step::Dirs(dirs) => dirs,
            _ => return Err(LookupError::NotFound(at.display().to_string())),
        };
        here.push(name);
    }
    Ok(showing)
}

/// Puts the components of `path` before what is still to look up (`todo` is a stack: its last
/// element comes next); a leading `/` goes back to the root.
fn push_front(todo: &mut Vec<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir => todo.push("..".into()),
            Component::RootDir => todo.push("/".into()),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

fn io_error(path: &Path, error: io::Error) -> LookupError {
    LookupError::Io {
        path: path.display().to_string(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;
    use std::os::unix::fs::symlink;

    /// Three layers (top first: `l2`, `l1`, `l0`) under a fresh directory, removed with them.
    struct Layers {
        _dir: TempDir,
        layers: Vec<PathBuf>,
    }

    impl Layers {
        fn new(name: &str) -> Layers {
            let dir = TempDir::new(&format!("merged-{name}"));
            let layers: Vec<PathBuf> = ["l2", "l1", "l0"].iter().map(|l| dir.join(l)).collect();
            for l in &layers {
                std::fs::create_dir_all(l).unwrap();
            }
            Layers { _dir: dir, layers }
        }

        fn file(&self, layer: usize, path: &str) {
            let p = self.layers[layer].join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, path).unwrap();
        }

        fn dir(&self, layer: usize, path: &str) {
            std::fs::create_dir_all(self.layers[layer].join(path)).unwrap();
        }

        fn link(&self, layer: usize, path: &str, target: &str) {
            let p = self.layers[layer].join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            symlink(target, p).unwrap();
        }

        fn find(&self, path: &str) -> Result<Found, LookupError> {
            find(&self.layers, path)
        }

        fn dirs(&self, layers: &[usize], path: &str) -> Found {
            Found::Dir(layers.iter().map(|&l| self.layers[l].join(path)).collect())
        }
    }

    #[test]
    fn a_directory_shows_every_layer_that_has_it_and_a_file_its_top_one() {
        let t = Layers::new("merge");
        t.file(2, "etc/a");
        t.file(0, "etc/b");
        t.file(1, "etc/b");
        assert_eq!(t.find("etc").unwrap(), t.dirs(&[0, 1, 2], "etc"));
        assert_eq!(t.find("./etc/").unwrap(), t.dirs(&[0, 1, 2], "etc"));
        assert_eq!(
            t.find("etc/b").unwrap(),
            Found::File(t.layers[0].join("etc/b"))
        );
        assert!(matches!(t.find("etc/c"), Err(LookupError::NotFound(_))));
        assert!(matches!(
            t.find("etc/b/c"),
            Err(LookupError::NotADirectory(_))
        ));
    }

    #[test]
    fn an_upper_file_hides_a_lower_directory_and_an_upper_directory_a_lower_file() {
        let t = Layers::new("hide");
        t.file(2, "x/inside");
        t.file(1, "x");
        assert!(matches!(
            t.find("x/inside"),
            Err(LookupError::NotADirectory(_))
        ));
        t.dir(0, "y");
        t.file(1, "y");
        t.file(2, "y");
        assert_eq!(t.find("y").unwrap(), t.dirs(&[0], "y"));
    }

    #[test]
    fn symbolic_links_are_followed_inside_the_image() {
        let t = Layers::new("links");
        t.file(2, "data/v1/conf");
        t.link(1, "current", "data/v1");
        t.link(0, "abs", "/data/v1");
        t.link(0, "up", "../../../data");
        t.link(0, "loop", "loop");
        assert_eq!(t.find("current").unwrap(), t.dirs(&[2], "data/v1"));
        assert_eq!(t.find("abs").unwrap(), t.dirs(&[2], "data/v1"));
        assert_eq!(t.find("up/v1").unwrap(), t.dirs(&[2], "data/v1"));
        assert_eq!(
            t.find("current/conf").unwrap(),
            Found::File(t.layers[2].join("data/v1/conf"))
        );
        assert!(matches!(t.find("loop"), Err(LookupError::TooManyLinks(_))));
    }

    #[test]
    fn whiteouts_and_opaque_directories_hide_what_is_below() {
        if sys::getuid() != 0 {
            // (Whiteouts are character devices and the opaque mark a trusted xattr: root's.)
            return;
        }
        let t = Layers::new("whiteouts");
        t.file(2, "gone/x");
        sys::make_node(&t.layers[1].join("gone"), 'c', 0, 0, 0).unwrap();
        assert!(matches!(t.find("gone"), Err(LookupError::NotFound(_))));
        assert!(matches!(t.find("gone/x"), Err(LookupError::NotFound(_))));
        // Made again above the whiteout: only what is above shows.
        t.dir(0, "gone");
        assert_eq!(t.find("gone").unwrap(), t.dirs(&[0], "gone"));
        t.file(2, "opaque/old");
        t.file(1, "opaque/new");
        sys::set_xattr(
            &t.layers[1].join("opaque"),
            crate::image::opaque_xattr(),
            b"y",
        )
        .unwrap();
        t.file(0, "opaque/top");
        assert_eq!(t.find("opaque").unwrap(), t.dirs(&[0, 1], "opaque"));
    }
}
