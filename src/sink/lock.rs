//! Lock files: an exclusive `flock` held for a run's whole life, which tells a live run from a
//! dead one on every host that shares the folder (the kernel, or the NFS/SMB server, drops the
//! lock when the process dies, however it dies), plus a note of who holds it, for the message a
//! second run prints.
//!
//! A lock file that other runs may contend for is never deleted: deleting it would let two runs
//! lock two different files of the same name. Only a lock file of a name that no other run will
//! ever use (a scratch folder's) may be removed, by its holder, after what it guards is gone.
//! This module never decides what a lock protects; its callers do.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most bytes of a holder note that are read.
const MAX_NOTE_BYTES: u64 = 4096;

/// Who holds a lock, as its holder wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// The holder's run tag (or object-store run id).
    pub run: String,
    pub started_at: String,
}

impl Holder {
    /// This process, for run `run`.
    pub fn this_process(run: &str) -> Holder {
        Holder {
            pid: std::process::id(),
            host: hostname(),
            run: run.to_owned(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on host `{}`, run `{}`, started {}", self.pid, self.host, self.run, self.started_at)
    }
}

/// The host name, or `unknown`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname writes
    // at most `len` bytes into it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    // Held for its file descriptor: closing it releases the lock.
    _file: File,
}

impl Lock {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the locked file still has its name (a cleaner may have removed a lock file of a
    /// name no other run uses between its creation and the `flock`).
    pub fn is_linked(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        self._file.metadata().is_ok_and(|m| m.nlink() > 0)
    }

    /// Removes the lock file, then releases the lock. Only for names no other run will use.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What [`try_acquire`] found.
#[derive(Debug)]
pub enum Acquire {
    /// The lock is ours until the value is dropped.
    Acquired(Lock),
    /// Another process holds it; its note, when it could be read.
    Held(Option<Holder>),
    /// The file system does not support locks (`ENOLCK`, `EOPNOTSUPP`): nothing can be told.
    Unsupported(io::Error),
}

fn open(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// `flock(LOCK_EX | LOCK_NB)`: `Ok(true)` when taken, `Ok(false)` when another holds it.
fn flock(file: &File) -> io::Result<bool> {
    // SAFETY: the descriptor belongs to `file`, which is open for the whole call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(false) } else { Err(e) }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS))
}

/// Takes the lock at `path` (creating the file) without waiting, and writes `holder` into it.
pub fn try_acquire(path: &Path, holder: &Holder) -> io::Result<Acquire> {
    let mut file = open(path, true)?;
    match flock(&file) {
        Ok(true) => {}
        Ok(false) => return Ok(Acquire::Held(read_note(&mut file))),
        Err(e) if unsupported(&e) => return Ok(Acquire::Unsupported(e)),
        Err(e) => return Err(e),
    }
    // The note is informational: a reader racing with this write sees no holder, never a wrong one.
    let mut note = serde_json::to_vec(holder).map_err(io::Error::other)?;
    note.push(b'\n');
    file.set_len(0)?;
    file.write_all(&note)?;
    file.sync_data()?;
    Ok(Acquire::Acquired(Lock { path: path.to_owned(), _file: file }))
}

/// Whether a live process holds the lock at `path`. `None` when there is no such file.
pub fn probe(path: &Path) -> io::Result<Option<Acquire>> {
    let mut file = match open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(match flock(&file) {
        Ok(true) => Acquire::Acquired(Lock { path: path.to_owned(), _file: file }),
        Ok(false) => Acquire::Held(read_note(&mut file)),
        Err(e) if unsupported(&e) => Acquire::Unsupported(e),
        Err(e) => return Err(e),
    }))
}

fn read_note(file: &mut File) -> Option<Holder> {
    let mut bytes = Vec::new();
    file.take(MAX_NOTE_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".out.etl-lock");
        let me = Holder::this_process("run-a");
        let Acquire::Acquired(lock) = try_acquire(&path, &me).unwrap() else { panic!("first acquire") };
        // flock locks belong to open file descriptions, so a second open in this process
        // contends exactly as another process would.
        match try_acquire(&path, &Holder::this_process("run-b")).unwrap() {
            Acquire::Held(Some(h)) => assert_eq!(h, me),
            other => panic!("expected the lock held by run-a: {other:?}"),
        }
        assert!(matches!(probe(&path).unwrap(), Some(Acquire::Held(Some(_)))));
        drop(lock);
        assert!(matches!(probe(&path).unwrap(), Some(Acquire::Acquired(_))));
        let Acquire::Acquired(again) = try_acquire(&path, &Holder::this_process("run-c")).unwrap() else {
            panic!("free after the holder dropped it")
        };
        assert!(path.exists(), "a contended lock file stays in place");
        again.remove();
        assert!(probe(&path).unwrap().is_none());
        assert!(!hostname().is_empty());
    }

    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "precious").unwrap();
        let link = tmp.path().join(".out.etl-lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(try_acquire(&link, &Holder::this_process("x")).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    }
}
