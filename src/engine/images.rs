//! Cloud images (SPEC §3.2): checked with a `HEAD`, downloaded into the cache
//! under a temporary name and renamed once complete, so a partial file is
//! never taken for an image. In `sim` mode, without an `IMAGE_BASE_<OS>`
//! override, the internet is simulated too: pvedeck must not reach out.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::OwnedMutexGuard;

use crate::config::{BackendKind, Config};
use crate::os::Release;
use crate::sim::clock::Clock;

const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
/// A download that delivers nothing for this long is given up.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Where an image comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub url: String,
    pub path: PathBuf,
    /// Served by the simulated internet (sim mode, no override).
    pub simulated: bool,
    release: Release,
}

pub struct Images {
    client: reqwest::Client,
    cache_dir: PathBuf,
    bases: std::collections::BTreeMap<String, String>,
    simulate: bool,
    clock: Clock,
    /// One download per file at a time; the others wait and then use it.
    downloading: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl Images {
    pub fn new(config: &Config) -> Result<Images, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .user_agent(concat!("pvedeck/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Images {
            client,
            cache_dir: config.image_cache_dir.clone(),
            bases: config.image_base.clone(),
            simulate: config.backend == BackendKind::Sim,
            clock: Clock::new(config.sim_speed),
            downloading: Mutex::new(HashMap::new()),
        })
    }

    pub fn plan(&self, release: &Release) -> ImagePlan {
        let base = self.bases.get(release.os);
        ImagePlan {
            url: release.image_url(base.map(String::as_str)),
            path: self.cache_dir.join(release.file_name()),
            simulated: self.simulate && base.is_none(),
            release: *release,
        }
    }

    /// `HEAD <url>` must answer 200 within 15 s.
    pub async fn check(&self, plan: &ImagePlan) -> Result<(), String> {
        if plan.simulated {
            self.clock.sleep(300).await;
            return Ok(());
        }
        let res = self
            .client
            .head(&plan.url)
            .timeout(HEAD_TIMEOUT)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        match res.status().as_u16() {
            200 => Ok(()),
            code => Err(format!("HEAD {} answered {code}", plan.url)),
        }
    }

    /// Holds the image's download slot: a second install of the same image
    /// waits here, then finds the file.
    pub async fn hold(&self, plan: &ImagePlan) -> OwnedMutexGuard<()> {
        let slot = {
            let mut map = self.downloading.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(plan.path.clone()).or_default().clone()
        };
        slot.lock_owned().await
    }

    /// Downloads the image; `progress(done, total)` is called as bytes arrive.
    pub async fn download(
        &self,
        plan: &ImagePlan,
        progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
    ) -> Result<(), String> {
        std::fs::create_dir_all(&self.cache_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.cache_dir.display()))?;
        let part = partial_name(&plan.path);
        let result = if plan.simulated {
            self.fake_download(plan, &part, progress).await
        } else {
            self.http_download(plan, &part, progress).await
        };
        match result {
            Ok(()) => std::fs::rename(&part, &plan.path)
                .map_err(|e| format!("cannot move the image into place: {e}")),
            Err(e) => {
                let _ = std::fs::remove_file(&part);
                Err(e)
            }
        }
    }

    async fn http_download(
        &self,
        plan: &ImagePlan,
        part: &Path,
        progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
    ) -> Result<(), String> {
        let res = self
            .client
            .get(&plan.url)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        if res.status().as_u16() != 200 {
            return Err(format!(
                "GET {} answered {}",
                plan.url,
                res.status().as_u16()
            ));
        }
        let total = res.content_length();
        let mut file = tokio::fs::File::create(part)
            .await
            .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
        let mut stream = res.bytes_stream();
        let mut done = 0u64;
        loop {
            let chunk = match tokio::time::timeout(STALL_TIMEOUT, stream.next()).await {
                Err(_) => return Err(format!("no data for {}s", STALL_TIMEOUT.as_secs())),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk.map_err(|e| describe(&e))?,
            };
            file.write_all(&chunk)
                .await
                .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
            done += chunk.len() as u64;
            progress(done, total);
        }
        if let Some(total) = total
            && done != total
        {
            return Err(format!("download ended after {done} of {total} bytes"));
        }
        file.sync_all()
            .await
            .map_err(|e| format!("cannot write {}: {e}", part.display()))
    }

    /// The simulated internet: about 25 MB/s, and a file with a real qcow2
    /// header (so the simulated `qm importdisk` reads its virtual size).
    async fn fake_download(
        &self,
        plan: &ImagePlan,
        part: &Path,
        progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
    ) -> Result<(), String> {
        let total = plan.release.virtual_gib * (200 << 20);
        let chunks = 50u64;
        for i in 1..=chunks {
            self.clock.sleep(total / (25 << 20) * 1000 / chunks).await;
            progress(total * i / chunks, Some(total));
        }
        let mut header = vec![0u8; 512];
        header[..4].copy_from_slice(b"QFI\xfb");
        header[4..8].copy_from_slice(&3u32.to_be_bytes());
        header[24..32].copy_from_slice(&(plan.release.virtual_gib << 30).to_be_bytes());
        let mut file = std::fs::File::create(part)
            .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
        file.write_all(&header)
            .map_err(|e| format!("cannot write {}: {e}", part.display()))
    }
}

/// `debian-12-generic-amd64.qcow2.part-<pid>-<n>`: never mistaken for the image.
fn partial_name(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".part-{}-{n}", std::process::id()));
    PathBuf::from(name)
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer within 15s".to_string()
    } else if e.is_connect() {
        format!("cannot connect: {e}")
    } else {
        e.to_string()
    }
}

/// Throttles download progress to an event every 5 % or 2 s.
pub struct ProgressGate {
    last_pct: Mutex<(u64, std::time::Instant)>,
}

impl Default for ProgressGate {
    fn default() -> Self {
        ProgressGate {
            last_pct: Mutex::new((0, std::time::Instant::now())),
        }
    }
}

impl ProgressGate {
    /// Whether this point of the download deserves an event.
    pub fn pass(&self, done: u64, total: Option<u64>) -> bool {
        let mut last = self.last_pct.lock().unwrap_or_else(|p| p.into_inner());
        let pct = total.filter(|t| *t > 0).map_or(0, |t| done * 100 / t);
        let due = pct >= last.0 + 5 || last.1.elapsed() >= Duration::from_secs(2);
        if due && (pct < 100 || last.0 < 100) {
            *last = (pct - pct % 5, std::time::Instant::now());
            return true;
        }
        false
    }
}

/// `120.0 MiB`
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_files_never_have_the_image_name() {
        let p = partial_name(Path::new("/tmp/debian-12-generic-amd64.qcow2"));
        assert!(p.to_string_lossy().contains(".part-"));
        assert_ne!(p, Path::new("/tmp/debian-12-generic-amd64.qcow2"));
    }

    #[test]
    fn progress_is_throttled_to_five_percent_steps() {
        let gate = ProgressGate::default();
        let passed: Vec<u64> = (0..=100).filter(|pct| gate.pass(*pct, Some(100))).collect();
        assert_eq!(
            passed,
            [
                5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 100
            ]
        );
    }
}
