//! `cargo xtask soak [--minutes N]`: the release server on the simulated
//! cluster (`SIM_SPEED=50`) under everything at once for N minutes (default
//! 30) — installs, each then stopped and destroyed; list readers; SSE
//! followers of the running installs — printing the counts, the errors and
//! the server's RSS as it goes. It fails when anything failed or when RSS
//! still grows: more than 10 % from the half-way sample to the last one.
//! Not part of the test command (it takes as long as it is told to).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::e2e::{Server, start_server};
use crate::http::{self, connect};
use crate::run::{Failed, step};

const INSTALLERS: usize = 4;
const READERS: usize = 2;
const FOLLOWERS: usize = 4;
/// Growth allowed over the second half before RSS counts as still rising.
const LEVEL_PERCENT: f64 = 10.0;
const INSTALL: &str = r#"{"os":"debian","version":"12"}"#;

/// What the workers did, shared with the sampler.
#[derive(Default)]
struct Counts {
    installs: AtomicU64,
    lists: AtomicU64,
    follows: AtomicU64,
    errors: AtomicU64,
    /// The first few errors, word for word.
    first_errors: Mutex<Vec<String>>,
    /// The newest install's job id: what followers follow.
    latest_job: AtomicU64,
    stop: AtomicBool,
}

impl Counts {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::SeqCst);
        let mut first = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
        if first.len() < 10 {
            eprintln!("    error: {what}");
            first.push(what);
        }
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::SeqCst)
    }
}

pub fn run(root: &Path, args: &[String]) -> Result<(), Failed> {
    let minutes = minutes(args)?;
    let dir = root.join("target/soak");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| Failed(format!("target/soak: {e}")))?;
    let env = [("PVE_BACKEND", "sim"), ("SIM_SPEED", "50")];
    let (server, url) = start_server(root, &dir, &env)?;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    step(&format!("soak for {minutes} min at SIM_SPEED=50"), || {
        soak(&server, &addr, Duration::from_secs(u64::from(minutes) * 60))
    })
}

fn minutes(args: &[String]) -> Result<u32, Failed> {
    match args {
        [] => Ok(30),
        [flag, n] if flag == "--minutes" => n
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Failed(format!("--minutes wants a whole number > 0, not {n}"))),
        _ => Err(Failed("usage: cargo xtask soak [--minutes N]".to_string())),
    }
}

fn soak(server: &Server, addr: &str, length: Duration) -> Result<(), Failed> {
    let counts = Arc::new(Counts::default());
    let mut workers = Vec::new();
    for _ in 0..INSTALLERS {
        let (counts, addr) = (counts.clone(), addr.to_string());
        workers.push(std::thread::spawn(move || installer(&addr, &counts)));
    }
    for _ in 0..READERS {
        let (counts, addr) = (counts.clone(), addr.to_string());
        workers.push(std::thread::spawn(move || reader(&addr, &counts)));
    }
    for _ in 0..FOLLOWERS {
        let (counts, addr) = (counts.clone(), addr.to_string());
        workers.push(std::thread::spawn(move || follower(&addr, &counts)));
    }

    // About 30 samples, at least 5 s apart.
    let every = (length / 30).max(Duration::from_secs(5));
    let started = Instant::now();
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    println!(
        "    {:>6}  {:>8}  {:>8}  {:>8}  {:>6}  {:>8}",
        "time", "installs", "lists", "follows", "errors", "RSS"
    );
    loop {
        let now = started.elapsed();
        let rss = rss_kib(server)?;
        samples.push((now, rss));
        println!(
            "    {:>5}s  {:>8}  {:>8}  {:>8}  {:>6}  {:>6.1}MB",
            now.as_secs(),
            counts.installs.load(Ordering::SeqCst),
            counts.lists.load(Ordering::SeqCst),
            counts.follows.load(Ordering::SeqCst),
            counts.errors.load(Ordering::SeqCst),
            rss as f64 / 1024.0
        );
        if now >= length {
            break;
        }
        std::thread::sleep(every.min(length - now));
    }
    counts.stop.store(true, Ordering::SeqCst);
    for worker in workers {
        let _ = worker.join();
    }

    let errors = counts.errors.load(Ordering::SeqCst);
    let (growth, half, last) = growth(&samples);
    println!(
        "\n    {} installs (each stopped and destroyed), {} lists, {} follows; {errors} errors",
        counts.installs.load(Ordering::SeqCst),
        counts.lists.load(Ordering::SeqCst),
        counts.follows.load(Ordering::SeqCst),
    );
    println!(
        "    RSS {:.1} MB at start, {:.1} MB half-way, {:.1} MB at the end: {growth:+.1} % over the last half (limit +{LEVEL_PERCENT} %)",
        samples.first().map_or(0, |s| s.1) as f64 / 1024.0,
        half as f64 / 1024.0,
        last as f64 / 1024.0,
    );
    if errors > 0 {
        return Err(Failed(format!("{errors} errors during the soak")));
    }
    if growth > LEVEL_PERCENT {
        return Err(Failed(format!(
            "RSS still rising: {growth:+.1} % over the last half"
        )));
    }
    Ok(())
}

/// Growth from the half-way sample to the last, in percent; and both.
fn growth(samples: &[(Duration, u64)]) -> (f64, u64, u64) {
    let end = samples.last().map_or(Duration::ZERO, |s| s.0);
    let half = samples.iter().find(|s| s.0 >= end / 2).map_or(0, |s| s.1);
    let last = samples.last().map_or(0, |s| s.1);
    let pct = if half == 0 {
        0.0
    } else {
        (last as f64 - half as f64) * 100.0 / half as f64
    };
    (pct, half, last)
}

fn rss_kib(server: &Server) -> Result<u64, Failed> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.0.id()))
        .map_err(|e| Failed(format!("the server is gone: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Failed("no VmRSS".into()))
}

// --- the workers -------------------------------------------------------------

/// Installs, then stops and destroys what it made, until told to stop.
fn installer(addr: &str, counts: &Counts) {
    while counts.running() {
        match install(addr, counts) {
            Ok(vmid) => {
                counts.installs.fetch_add(1, Ordering::SeqCst);
                for action in ["stop", "destroy"] {
                    let path = format!("/api/vm/{vmid}/{action}");
                    match request(addr, "POST", &path, None) {
                        Ok((200, _, _)) => {}
                        Ok((status, _, body)) => {
                            counts.error(format!("{path}: {status} {}", body.trim()))
                        }
                        Err(e) => counts.error(format!("{path}: {e}")),
                    }
                }
            }
            Err(e) => counts.error(e),
        }
    }
}

/// One install to its end; its VMID. The job id is published as soon as the
/// answer's head names it, for the followers.
fn install(addr: &str, counts: &Counts) -> Result<u32, String> {
    let mut stream = connect(addr)?;
    write!(
        stream,
        "POST /api/vm/install HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{INSTALL}",
        INSTALL.len()
    )
    .map_err(|e| format!("install: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let mut published = false;
    loop {
        let n = stream
            .read(&mut buf)
            .map_err(|e| format!("install stream: {e}"))?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if !published && let Some(job) = job_id(&raw) {
            counts.latest_job.store(job, Ordering::SeqCst);
            published = true;
        }
    }
    let text = String::from_utf8_lossy(&raw);
    let status = text.split_whitespace().nth(1).unwrap_or("?");
    if status != "200" {
        return Err(format!("install answered {status}: {}", text.trim()));
    }
    if let Some(line) = text.lines().find(|l| l.contains("\"message\":\"[-]")) {
        return Err(format!("install failed: {line}"));
    }
    text.lines()
        .find_map(|l| l.split("\"message\":\"[*] VMID: ").nth(1))
        .and_then(|rest| rest.split('"').next())
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| "install ended without its summary".to_string())
}

fn job_id(head: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(head);
    let (head, _) = text.split_once("\r\n\r\n")?;
    head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("x-job-id: ")
            .and_then(|v| v.trim().parse().ok())
    })
}

fn reader(addr: &str, counts: &Counts) {
    while counts.running() {
        match request(addr, "GET", "/api/vm/list", None) {
            Ok((200, _, body)) if body.contains("\"count\":") => {
                counts.lists.fetch_add(1, Ordering::SeqCst);
            }
            Ok((status, _, body)) => counts.error(format!("list: {status} {}", clip(&body))),
            Err(e) => counts.error(format!("list: {e}")),
        }
    }
}

/// Follows the newest install to its end (its `close` event), again and
/// again.
fn follower(addr: &str, counts: &Counts) {
    let mut last = 0;
    while counts.running() {
        let job = counts.latest_job.load(Ordering::SeqCst);
        if job == 0 || job == last {
            // No new install yet: the one before is followed again, from
            // the database, after a breath.
            std::thread::sleep(Duration::from_millis(200));
            if job == 0 {
                continue;
            }
        }
        last = job;
        let path = format!("/api/jobs/{job}/events");
        match request(addr, "GET", &path, None) {
            Ok((200, _, body)) if body.contains("event: close") => {
                counts.follows.fetch_add(1, Ordering::SeqCst);
            }
            Ok((status, _, body)) => {
                counts.error(format!("{path}: {status}, no close event: {}", clip(&body)))
            }
            Err(e) => counts.error(format!("{path}: {e}")),
        }
    }
}

// --- HTTP -------------------------------------------------------------------

fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String, String), String> {
    http::request(addr, method, path, body.unwrap_or("")).map(|r| (r.status, r.head, r.body))
}

fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_measured_from_half_way_to_the_end() {
        let s = |secs, kib| (Duration::from_secs(secs), kib);
        let (pct, half, last) = growth(&[s(0, 100), s(50, 200), s(100, 210)]);
        assert_eq!((half, last), (200, 210));
        assert!((pct - 5.0).abs() < 1e-9, "{pct}");
        assert_eq!(growth(&[]).0, 0.0);
    }

    #[test]
    fn minutes_default_to_thirty() {
        assert_eq!(minutes(&[]).unwrap(), 30);
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(minutes(&args(&["--minutes", "4"])).unwrap(), 4);
        assert!(minutes(&args(&["--minutes", "0"])).is_err());
        assert!(minutes(&args(&["4"])).is_err());
    }

    #[test]
    fn the_job_id_is_read_from_the_head_once_it_is_whole() {
        assert_eq!(job_id(b"HTTP/1.0 200 OK\r\nX-Job-Id: 42\r\n"), None);
        assert_eq!(
            job_id(b"HTTP/1.0 200 OK\r\nx-job-id: 42\r\n\r\ndata"),
            Some(42)
        );
    }
}
