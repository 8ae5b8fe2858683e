//! A real PostgreSQL for the tests: Debian's `postgresql` binaries,
//! `initdb` into a temporary directory and `postgres` on a free loopback
//! port, as an unprivileged user when the tests run as root (PostgreSQL
//! refuses root). One server per test process, started at first use and
//! stopped by its process id when the process exits; each test takes a
//! database of its own ([`Postgres::database`]).
//!
//! Without the binaries the tests that need it are skipped with a line on
//! stderr, unless `PVEDECK_REQUIRE_POSTGRES` is set (`cargo xtask test` sets
//! it, after installing the package): then it is a failure.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// A running server.
pub struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    next: AtomicU32,
}

/// The server's process and data, for the exit hook.
static RUNNING: Mutex<Option<(Child, PathBuf)>> = Mutex::new(None);

extern "C" fn stop_at_exit() {
    let Ok(mut running) = RUNNING.lock() else {
        return;
    };
    if let Some((mut child, dir)) = running.take() {
        // SIGQUIT: immediate shutdown, nothing to keep.
        let _ = Command::new("kill")
            .args(["-QUIT", &child.id().to_string()])
            .status();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(dir);
    }
}

unsafe extern "C" {
    fn atexit(hook: extern "C" fn()) -> i32;
}

/// The newest `/usr/lib/postgresql/<version>/bin` (Debian keeps `initdb`
/// off PATH), or `PG_BIN`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(dir.into());
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// `nobody`'s uid and gid, when running as root.
fn unprivileged() -> Option<(u32, u32)> {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"nobody"))
            .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
            .flatten()
    })
}

fn as_postgres_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        // std clears the supplementary groups when root sets a uid.
        command.uid(uid).gid(gid);
    }
    command
}

impl Postgres {
    /// This process's server, started on first use; `None` (and a line on
    /// stderr) where PostgreSQL is not installed and not required.
    pub fn shared() -> Option<&'static Postgres> {
        static SHARED: OnceLock<Option<Postgres>> = OnceLock::new();
        SHARED
            .get_or_init(|| match Postgres::start() {
                Ok(pg) => Some(pg),
                Err(why) if std::env::var_os("PVEDECK_REQUIRE_POSTGRES").is_some() => {
                    panic!("PostgreSQL is required (PVEDECK_REQUIRE_POSTGRES): {why}")
                }
                Err(why) => {
                    eprintln!("PostgreSQL tests skipped: {why}");
                    None
                }
            })
            .as_ref()
    }

    fn start() -> Result<Postgres, String> {
        let cluster = Cluster::init()?;
        let child = cluster.launch()?;
        if let Ok(mut running) = RUNNING.lock() {
            *running = Some((child, cluster.dir.clone()));
        }
        // SAFETY: `stop_at_exit` is a plain function that only takes a
        // mutex, signals and waits; registering it has no precondition.
        unsafe {
            atexit(stop_at_exit);
        }
        Ok(Postgres {
            bin: cluster.bin,
            dir: cluster.dir,
            port: cluster.port,
            next: AtomicU32::new(0),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A new, empty database: its URL.
    pub fn database(&self) -> String {
        let name = format!("t{}", self.next.fetch_add(1, Ordering::SeqCst));
        self.psql(&format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Runs `sql` on the `postgres` database through `psql`; panics on a
    /// failure (a test's setup).
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("postgres", sql)
    }

    /// Runs `sql` on database `db`; its output, unaligned.
    pub fn psql_in(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("psql: {e}"));
        assert!(
            out.status.success(),
            "psql -c {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Where the server keeps its data and socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A server's files and port: made once by `initdb`, started (and, for
/// [`Own`], stopped and started again) on them.
struct Cluster {
    /// Commits on disk before they return: a server stopped at once keeps
    /// them (an [`Own`] one).
    durable: bool,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    dir: PathBuf,
    data: PathBuf,
    port: u16,
}

impl Cluster {
    fn init() -> Result<Cluster, String> {
        let bin = bin_dir().ok_or(
            "no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql, or set PG_BIN)",
        )?;
        let user = unprivileged();
        static MADE: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pvedeck-pg-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        if let Some((uid, gid)) = user {
            for path in [&dir, &data] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", path.display()))?;
            }
        }
        let out = as_postgres_user(&mut Command::new(bin.join("initdb")), user)
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C"])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        Ok(Cluster {
            durable: false,
            bin,
            user,
            dir,
            data,
            port,
        })
    }

    /// Starts `postgres` and waits for it to say it accepts connections.
    fn launch(&self) -> Result<Child, String> {
        let mut child = as_postgres_user(&mut Command::new(self.bin.join("postgres")), self.user)
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Tests want speed, not durability past a crash of the machine.
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args([
                "-c",
                if self.durable {
                    "synchronous_commit=on"
                } else {
                    "synchronous_commit=off"
                },
            ])
            .args(["-c", "max_connections=300"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("postgres: {e}"))?;
        let stderr = child.stderr.take().ok_or("postgres: no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    let ready = line.contains("ready to accept connections");
                    seen.push(line);
                    if ready {
                        break true;
                    }
                }
                _ => break false,
            }
        };
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("postgres did not start:\n{}", seen.join("\n")));
        }
        // Keep reading its log, or it blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(child)
    }
}

/// A server of one test's own, which the test may stop and start again
/// (the database lost while pvedeck runs); stopped and removed when
/// dropped.
pub struct Own {
    cluster: Cluster,
    child: Option<Child>,
}

impl Own {
    /// `None` (and a line on stderr) where PostgreSQL is not installed and
    /// not required.
    pub fn start() -> Option<Own> {
        let started = Cluster::init().and_then(|mut cluster| {
            cluster.durable = true;
            let child = cluster.launch()?;
            Ok(Own {
                cluster,
                child: Some(child),
            })
        });
        match started {
            Ok(own) => Some(own),
            Err(why) if std::env::var_os("PVEDECK_REQUIRE_POSTGRES").is_some() => {
                panic!("PostgreSQL is required (PVEDECK_REQUIRE_POSTGRES): {why}")
            }
            Err(why) => {
                eprintln!("PostgreSQL tests skipped: {why}");
                None
            }
        }
    }

    /// The `postgres` database's URL (the store makes its tables there).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.cluster.port
        )
    }

    /// Stops the server at once (SIGQUIT) and waits for it to go.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-QUIT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same files and port.
    pub fn restart(&mut self) {
        self.stop();
        match self.cluster.launch() {
            Ok(child) => self.child = Some(child),
            Err(why) => panic!("PostgreSQL did not start again: {why}"),
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.cluster.dir);
    }
}
