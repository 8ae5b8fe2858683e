//! Where the simulated cluster's state lives.
//!
//! * `Memory`: inside the server (`PVE_BACKEND=sim`), saved to
//!   `DATA_DIR/sim/cluster.json` after every change; its command log goes
//!   to `DATA_DIR/sim/commands.log` (started afresh by each process), not
//!   into memory, where a server running for days would keep every line.
//! * `Shared`: in that file, for the simulator's command-line face: every
//!   `qm`/`pvesh`/`pvesm`/`ssh` stand-in is its own process, so each access
//!   takes an exclusive lock on `DATA_DIR/sim/lock`, reads the file, and
//!   writes it back when it changed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pvedeck_support::files::write_atomically;
use pvedeck_support::sync::lock;
use tokio::sync::watch;

use super::state::ClusterState;

pub enum Store {
    Memory {
        state: Mutex<ClusterState>,
        file: Option<PathBuf>,
        /// The command log when there is no file to keep it in (unit
        /// tests); with a file, only the lock that keeps lines whole.
        log: Mutex<Vec<String>>,
        /// Each change counted, for [`Changes`].
        changed: watch::Sender<u64>,
    },
    Shared {
        dir: PathBuf,
        /// The last state read: what a process keeps using should the file
        /// ever fail to parse.
        last: Mutex<ClusterState>,
        /// This process's changes; other processes' are seen on the file
        /// ([`Changes`]).
        changed: watch::Sender<u64>,
    },
}

/// Tells when the cluster changed, for what must end with a VM (a
/// console). A change of this process is seen at once; with the shared
/// store, another process's change is seen when it renames its new
/// `cluster.json` into place (inotify on the directory).
pub struct Changes {
    own: watch::Receiver<u64>,
    others: Option<inotify::EventStream<Vec<u8>>>,
}

impl Changes {
    /// Waits for the next change. `false`: none can come any more (the
    /// cluster is gone).
    pub async fn next(&mut self) -> bool {
        loop {
            let Some(others) = &mut self.others else {
                return self.own.changed().await.is_ok();
            };
            tokio::select! {
                own = self.own.changed() => return own.is_ok(),
                event = futures_util::StreamExt::next(others) => match event {
                    Some(Ok(event)) if event.name.as_deref() == Some(std::ffi::OsStr::new(STATE_FILE)) => {
                        return true;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!("sim: watching the cluster file: {e}");
                        self.others = None;
                    }
                    None => self.others = None,
                },
            }
        }
    }
}

/// A watch on `dir` for a new state file (`write_atomically` renames it
/// into place); `None` (only this process's
/// changes are seen) when inotify cannot be had.
fn watch_dir(dir: &Path) -> Option<inotify::EventStream<Vec<u8>>> {
    let watched = inotify::Inotify::init().and_then(|inotify| {
        inotify.watches().add(dir, inotify::WatchMask::MOVED_TO)?;
        inotify.into_event_stream(vec![0u8; 4096])
    });
    match watched {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::warn!(
                "sim: cannot watch {} for other processes' changes: {e}",
                dir.display()
            );
            None
        }
    }
}

const STATE_FILE: &str = "cluster.json";

/// The state file of a data directory's simulated cluster.
pub fn state_file(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

impl Store {
    pub fn memory(state: ClusterState, file: Option<PathBuf>) -> Store {
        let store = Store::Memory {
            state: Mutex::new(state),
            file,
            log: Mutex::new(Vec::new()),
            changed: watch::Sender::new(0),
        };
        if let Store::Memory { state, file, .. } = &store {
            save(file.as_deref(), &lock(state));
            if let Some(log) = log_file(file.as_deref()) {
                let _ = std::fs::remove_file(log);
            }
        }
        store
    }

    pub fn shared(dir: PathBuf, state: ClusterState) -> Store {
        // The first process on a new directory writes the seeded state, so
        // that its first access finds a file rather than warning of none.
        if !state_file(&dir).exists() {
            let _guard = FileLock::take(&dir);
            if !state_file(&dir).exists() {
                save(Some(&state_file(&dir)), &state);
            }
        }
        Store::Shared {
            dir,
            last: Mutex::new(state),
            changed: watch::Sender::new(0),
        }
    }

    /// What tells of the changes from now on. Must be taken inside a tokio
    /// runtime (the shared store's watch is a tokio stream).
    pub fn changes(&self) -> Changes {
        match self {
            Store::Memory { changed, .. } => Changes {
                own: changed.subscribe(),
                others: None,
            },
            Store::Shared { dir, changed, .. } => Changes {
                own: changed.subscribe(),
                others: watch_dir(dir),
            },
        }
    }

    /// Runs `f` on the state; `f` says whether it changed anything, and a
    /// change is saved.
    pub fn update<R>(&self, f: impl FnOnce(&mut ClusterState) -> (R, bool)) -> R {
        match self {
            Store::Memory {
                state,
                file,
                changed: tell,
                ..
            } => {
                let mut state = lock(state);
                let (out, changed) = f(&mut state);
                if changed {
                    save(file.as_deref(), &state);
                    tell.send_modify(|n| *n += 1);
                }
                out
            }
            Store::Shared {
                dir,
                last,
                changed: tell,
            } => {
                let _guard = FileLock::take(dir);
                let mut state = self.load(dir, last);
                let (out, changed) = f(&mut state);
                if changed {
                    save(Some(&state_file(dir)), &state);
                }
                *lock(last) = state;
                if changed {
                    tell.send_modify(|n| *n += 1);
                }
                out
            }
        }
    }

    pub fn change<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        self.update(|s| (f(s), true))
    }

    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        self.update(|s| (f(s), false))
    }

    fn load(&self, dir: &Path, last: &Mutex<ClusterState>) -> ClusterState {
        let file = state_file(dir);
        match std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(
                    "sim: cannot read {}: {e}; using the last state",
                    file.display()
                );
                lock(last).clone()
            }
        }
    }

    /// Appends to the command log.
    pub fn record(&self, command: &str) {
        match self {
            Store::Memory { log, file, .. } => {
                let mut log = lock(log);
                match log_file(file.as_deref()) {
                    Some(path) => append(&path, command),
                    None => log.push(command.to_string()),
                }
            }
            Store::Shared { dir, .. } => {
                let _guard = FileLock::take(dir);
                append(&dir.join("commands.log"), command);
            }
        }
    }

    /// Appends a whole argument vector (the stand-ins' record of what they
    /// were called with).
    pub fn record_argv(&self, argv: &[String]) {
        if let Store::Shared { dir, .. } = self {
            let _guard = FileLock::take(dir);
            let line = serde_json::to_string(argv).unwrap_or_default();
            append(&dir.join("argv.log"), &line);
        }
    }

    pub fn commands(&self) -> Vec<String> {
        match self {
            Store::Memory { log, file, .. } => {
                let log = lock(log);
                match log_file(file.as_deref()) {
                    Some(path) => read_log(&path),
                    None => log.clone(),
                }
            }
            Store::Shared { dir, .. } => read_log(&dir.join("commands.log")),
        }
    }
}

fn save(file: Option<&Path>, state: &ClusterState) {
    let Some(file) = file else { return };
    let written = serde_json::to_vec(state)
        .map_err(std::io::Error::other)
        .and_then(|text| write_atomically(file, &text));
    if let Err(e) = written {
        tracing::warn!("sim: cannot save the cluster to {}: {e}", file.display());
    }
}

/// The command log beside a state file.
fn log_file(state_file: Option<&Path>) -> Option<PathBuf> {
    state_file.map(|f| f.with_file_name("commands.log"))
}

fn read_log(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn append(file: &Path, line: &str) {
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        tracing::warn!("sim: cannot write {}: {e}", file.display());
    }
}

/// An exclusive lock on `<dir>/lock`, released when dropped. Without it
/// (the directory cannot be written) the access goes on unlocked.
struct FileLock(Option<File>);

impl FileLock {
    fn take(dir: &Path) -> FileLock {
        let _ = std::fs::create_dir_all(dir);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .ok()
            .filter(|f| f.lock().is_ok());
        FileLock(file)
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.unlock();
        }
    }
}
