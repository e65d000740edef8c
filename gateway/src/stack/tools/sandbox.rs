//! The directory `read_file` and `write_file` cannot leave.
//!
//! Every path is resolved by the kernel relative to a handle of the root opened once at start
//! (`openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`), so
//! there is no window between a check and its use: a directory swapped for a symlink while a call runs makes
//! the call fail, it never makes it leave the root. Only regular files with a single link are read (a hard
//! link inside the root to an outside file is refused), opened with `O_NONBLOCK` (a FIFO cannot block a
//! worker). A write goes to a fresh temporary file (`O_CREAT | O_EXCL`, created in the target's directory
//! through the same directory handle) and is renamed into place, so the existing target — a hard link, a FIFO,
//! a symlink — is never opened. Every path that is not allowed gets one and the same refusal, so a caller
//! cannot learn whether something outside the root exists.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use tower_chat_function_invocation::ToolError;

/// The most bytes `read_file` returns; larger files are refused rather than flooding the model's context.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The longest `path` argument accepted (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// Resolution stays under the root handle, follows no symlink (nor `/proc` magic link) and crosses no mount.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// A directory the file tools cannot leave. See the [module docs](self).
#[derive(Debug)]
pub struct Sandbox {
    root: OwnedFd,
}

impl Sandbox {
    /// Confine to `root`, opened here once (a symlink naming the root itself is followed: the operator chose
    /// it). Fails when `root` is not a directory or the kernel has no `openat2` (Linux before 5.6).
    pub fn new(root: &Path) -> io::Result<Self> {
        let root = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // Probe once, so an old kernel fails at start rather than on every call.
        rustix::fs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| io::Error::other(format!("openat2 is not usable here ({e})")))?;
        Ok(Sandbox { root })
    }

    /// `read_file`.
    pub async fn read(&self, path: &str) -> Result<String, ToolError> {
        let root = self.root.try_clone().map_err(|_| busy(path))?;
        let owned = path.to_owned();
        tokio::task::spawn_blocking(move || read_blocking(&root, &owned))
            .await
            .map_err(|_| busy(path))?
    }

    /// What `path` holds now, as `write_file` would replace it, read at most `limit` bytes (the console shows an
    /// approver what a write changes). Resolved exactly as the tools resolve it: a path they refuse is refused
    /// here (the error), and nothing outside the root is opened.
    pub async fn existing(&self, path: &str, limit: u64) -> Result<Existing, ToolError> {
        let root = self.root.try_clone().map_err(|_| busy(path))?;
        let owned = path.to_owned();
        tokio::task::spawn_blocking(move || existing_blocking(&root, &owned, limit))
            .await
            .map_err(|_| busy(path))?
    }

    /// `write_file`: missing directories on the way are created (each one through the handle of its parent);
    /// the content goes to a temporary file renamed over the target.
    pub async fn write(&self, path: &str, content: &str) -> Result<String, ToolError> {
        let root = self.root.try_clone().map_err(|_| busy(path))?;
        let (owned, content) = (path.to_owned(), content.to_owned());
        tokio::task::spawn_blocking(move || write_blocking(&root, &owned, content.as_bytes()))
            .await
            .map_err(|_| busy(path))?
    }
}

/// What a path inside the root holds now ([`Sandbox::existing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing: a write creates the file (and any missing directories on the way).
    Absent,
    /// A regular file of UTF-8 text.
    Text(String),
    /// A regular file larger than the limit asked for (its size in bytes), not read.
    TooLarge(u64),
    /// A regular file that is not UTF-8 text.
    NotText,
}

/// The one answer for every path that is not allowed, whatever the reason (outside, absolute, `..` leaving
/// the root, a symlink, a hard link, not a regular file) and whether or not something exists there.
fn refused(path: &str) -> ToolError {
    ToolError::new(format!(
        "refused: `{}` is not an allowed file: give a relative path to a regular file inside the files \
         directory (no symlinks, hard links or special files)",
        shorten(path)
    ))
}

fn busy(path: &str) -> ToolError {
    ToolError::new(format!(
        "cannot access `{}`: the server is busy",
        shorten(path)
    ))
}

/// A path as quoted back: at most 256 bytes, so a huge argument does not come back in the error.
fn shorten(path: &str) -> String {
    if path.len() <= 256 {
        return path.to_owned();
    }
    let mut end = 256;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// Checks that need no file system: non-empty, relative, no NUL, not longer than `PATH_MAX`.
fn syntax(path: &str) -> Result<(), ToolError> {
    if path.is_empty() {
        return Err(ToolError::invalid_arguments("`path` must not be empty"));
    }
    if path.starts_with('/') || path.contains('\0') || path.len() > MAX_PATH_BYTES {
        return Err(refused(path));
    }
    Ok(())
}

/// What an open or lookup failure tells the caller: a missing file inside the root is named as such (that
/// reveals nothing about the outside: a path leaving the root fails before anything beyond is looked up);
/// everything else is the one refusal.
fn lookup_error(path: &str, error: rustix::io::Errno, action: &str) -> ToolError {
    if error == rustix::io::Errno::NOENT {
        ToolError::new(format!("cannot {action} `{}`: no such file", shorten(path)))
    } else {
        refused(path)
    }
}

fn read_blocking(root: &OwnedFd, path: &str) -> Result<String, ToolError> {
    syntax(path)?;
    let fd = open_for_reading(root, path).map_err(|e| lookup_error(path, e, "read"))?;
    let stat = rustix::fs::fstat(&fd).map_err(|_| refused(path))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
        return Err(refused(path));
    }
    // Cast once, then compare: `st_size as u64 < MAX` does not parse, so mutation testing could not flip this check.
    let size = stat.st_size as u64;
    if size > MAX_READ_BYTES {
        return Err(too_big(path));
    }
    let bytes = match read_at_most(
        std::fs::File::from(fd),
        stat.st_size as usize,
        MAX_READ_BYTES,
    ) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(too_big(path)),
        Err(e) => return Err(io_error(path, &e, "read")),
    };
    String::from_utf8(bytes)
        .map_err(|_| ToolError::new(format!("cannot read `{}`: not UTF-8 text", shorten(path))))
}

fn existing_blocking(root: &OwnedFd, path: &str, limit: u64) -> Result<Existing, ToolError> {
    syntax(path)?;
    let fd = match open_for_reading(root, path) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Existing::Absent),
        Err(_) => return Err(refused(path)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|_| refused(path))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
        return Err(refused(path));
    }
    let size = stat.st_size as u64;
    if size > limit {
        return Ok(Existing::TooLarge(size));
    }
    match read_at_most(std::fs::File::from(fd), size as usize, limit) {
        Ok(Some(bytes)) => Ok(String::from_utf8(bytes).map_or(Existing::NotText, Existing::Text)),
        Ok(None) => Ok(Existing::TooLarge(size.max(limit + 1))),
        Err(e) => Err(io_error(path, &e, "read")),
    }
}

/// Everything `reader` holds if that is at most `limit` bytes, `None` if it holds more. Reads one byte past the
/// limit, so a file that grew after its size was checked is still refused rather than silently cut short.
fn read_at_most(
    reader: impl Read,
    expected: usize,
    limit: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::with_capacity(expected);
    reader.take(limit + 1).read_to_end(&mut bytes)?;
    let read = bytes.len() as u64;
    Ok((read <= limit).then_some(bytes))
}

fn too_big(path: &str) -> ToolError {
    ToolError::new(format!(
        "cannot read `{}`: larger than the limit of {MAX_READ_BYTES} bytes",
        shorten(path)
    ))
}

/// An I/O error without the absolute path an OS error may quote (the model must not learn the layout).
fn io_error(path: &str, error: &io::Error, action: &str) -> ToolError {
    ToolError::new(format!(
        "cannot {action} `{}`: {}",
        shorten(path),
        error.kind()
    ))
}

fn write_blocking(root: &OwnedFd, path: &str, content: &[u8]) -> Result<String, ToolError> {
    syntax(path)?;
    let mut parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(refused(path));
    }
    let Some(name) = parts.pop() else {
        return Err(ToolError::invalid_arguments(format!(
            "`{}` does not name a file",
            shorten(path)
        )));
    };
    // Walk down one directory at a time, each opened through its parent's handle.
    let mut dir = open_dir(root, ".").map_err(|_| refused(path))?;
    for part in parts {
        dir = match open_dir(&dir, part) {
            Ok(next) => next,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(_) => return Err(refused(path)),
                }
                open_dir(&dir, part).map_err(|_| refused(path))?
            }
            Err(_) => return Err(refused(path)),
        };
    }
    // An existing target must be a plain file; it is replaced, never opened.
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => {
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1
            {
                return Err(refused(path));
            }
        }
        Err(rustix::io::Errno::NOENT) => {}
        Err(_) => return Err(refused(path)),
    }
    let temp = format!(".tower-chat-{}.tmp", uuid::Uuid::new_v4().simple());
    let fd = create_temp(&dir, &temp).map_err(|_| refused(path))?;
    let mut file = std::fs::File::from(fd);
    let written = file.write_all(content).and_then(|()| file.sync_data());
    drop(file);
    let renamed = match written {
        Ok(()) => rustix::fs::renameat(&dir, temp.as_str(), &dir, name).map_err(|_| refused(path)),
        Err(e) => Err(io_error(path, &e, "write")),
    };
    if let Err(error) = renamed {
        let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
        return Err(error);
    }
    Ok(format!("wrote {} bytes to {path}", content.len()))
}

/// A file to read, resolved beneath `root`: opening a FIFO does not wait for a writer, a terminal does not
/// become the controlling one, and the handle is close-on-exec (a child process started meanwhile, such as an
/// MCP server, must not inherit it).
fn open_for_reading(root: &OwnedFd, path: &str) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
}

/// A new temporary file in `dir`: never an existing file or a symlink planted under its name, close-on-exec.
fn create_temp(dir: &OwnedFd, name: &str) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
}

fn open_dir(parent: &OwnedFd, name: &str) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat2(
        parent,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
}

#[cfg(test)]
mod tests;
