//! Cloud images (SPEC §3.2) and the install's `OS preparation` stage: the
//! URL, its `HEAD`, the download into the cache under a temporary name,
//! renamed once complete, so a partial file is never taken for an image.
//! Where images come from is the `Mirror` the server was built with.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use app::os::{Os, Release};
use tokio::sync::OwnedMutexGuard;

use super::Engine;
use super::install::{Cleanup, Failure};
use super::report::{Out, Step};
use crate::mirror::{ImageError, Mirror};

/// Where an image comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub url: String,
    pub path: PathBuf,
}

pub struct Images {
    mirror: Arc<dyn Mirror>,
    cache_dir: PathBuf,
    bases: BTreeMap<Os, String>,
    /// `IMAGE_MAX_BYTES`: a download past this is given up (a mirror that
    /// streams for ever cannot fill the disk).
    max_bytes: u64,
    /// One download per file at a time; the others wait and then use it.
    downloading: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl Images {
    pub fn bounded(
        mirror: Arc<dyn Mirror>,
        cache_dir: PathBuf,
        bases: BTreeMap<Os, String>,
        max_bytes: u64,
    ) -> Images {
        Images {
            mirror,
            cache_dir,
            bases,
            max_bytes,
            downloading: Mutex::new(HashMap::new()),
        }
    }

    pub fn plan(&self, release: &Release) -> ImagePlan {
        let base = self.bases.get(&release.os);
        ImagePlan {
            url: release.image_url(base.map(String::as_str)),
            path: self.cache_dir.join(release.file_name()),
        }
    }

    /// Holds the image's download slot: a second install of the same image
    /// waits here, then finds the file.
    async fn hold(&self, plan: &ImagePlan) -> OwnedMutexGuard<()> {
        let slot = {
            let mut map = self.downloading.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(plan.path.clone()).or_default().clone()
        };
        slot.lock_owned().await
    }

    /// Downloads into a file of a random name in the cache, created
    /// exclusively, renamed to the image's name once complete; removed on
    /// failure.
    async fn download(
        &self,
        plan: &ImagePlan,
        progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
    ) -> Result<(), ImageError> {
        let create = |source| ImageError::Create {
            path: self.cache_dir.clone(),
            source,
        };
        private_dir(&self.cache_dir).map_err(create)?;
        let part = tempfile::Builder::new()
            .prefix(".part-")
            .tempfile_in(&self.cache_dir)
            .map_err(create)?;
        let mut file = part
            .reopen()
            .map(tokio::fs::File::from_std)
            .map_err(create)?;
        // Past the cap (announced or received), the download is dropped,
        // which ends it; the partial file goes with `part`.
        let max = self.max_bytes;
        let over = tokio::sync::Notify::new();
        let exceeded = std::sync::atomic::AtomicBool::new(false);
        let watch = |done: u64, total: Option<u64>| {
            if done > max || total.is_some_and(|t| t > max) {
                exceeded.store(true, std::sync::atomic::Ordering::SeqCst);
                over.notify_one();
            }
            progress(done, total);
        };
        let fetched = tokio::select! {
            biased;
            () = over.notified() => None,
            fetched = self.mirror.fetch(&plan.url, &mut file, part.path(), &watch) => Some(fetched),
        };
        // A fetch that ended in the same turn as the cap was passed counts
        // as too large as well.
        match fetched {
            _ if exceeded.load(std::sync::atomic::Ordering::SeqCst) => {
                return Err(ImageError::TooLarge { max });
            }
            None => return Err(ImageError::TooLarge { max }),
            Some(fetched) => fetched?,
        }
        drop(file);
        part.persist(&plan.path)
            .map(drop)
            .map_err(|e| ImageError::Rename(e.error))
    }
}

/// Creates the cache directory readable by its owner only (0700); one that
/// exists keeps its mode (an admin's choice).
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Throttles download progress to an event every 5 % or 2 s.
pub struct ProgressGate {
    last_pct: Mutex<(u64, Instant)>,
}

impl Default for ProgressGate {
    fn default() -> Self {
        ProgressGate {
            last_pct: Mutex::new((0, Instant::now())),
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
            *last = (pct - pct % 5, Instant::now());
            return true;
        }
        false
    }
}

/// `120.0 MiB`
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

impl Engine {
    /// Stage `OS preparation`: the image URL, its check, the download (or
    /// the cached file).
    pub(super) async fn os_image_stage(
        &self,
        out: Out<'_>,
        release: &Release,
    ) -> Result<PathBuf, Failure> {
        let step = Step::new(out, Some("OS preparation"), "getting OS image");
        step.processing("[*] get OS image download link");
        let plan = self.images.plan(release);
        step.success(&format!("[+] OS image URL obtained: {}", plan.url));

        let step = Step::new(out, Some("OS preparation"), "validating OS image URL");
        step.processing("[*] check OS image URL availability");
        self.images.mirror.check(&plan.url).await.map_err(|e| {
            Failure::new(
                &step,
                format!("[-] OS image URL is not accessible: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success("[+] OS image URL is valid");

        // A concurrent install of the same image finishes its download first.
        let _slot = self.images.hold(&plan).await;
        if plan.path.is_file() {
            let step = Step::new(out, Some("OS preparation"), "using OS image");
            step.success(&format!("[+] using OS image {}", plan.path.display()));
            return Ok(plan.path);
        }
        let step = Step::new(out, Some("OS preparation"), "downloading OS image");
        step.processing("[*] start downloading OS image");
        let gate = ProgressGate::default();
        let progress = |done: u64, total: Option<u64>| {
            if gate.pass(done, total) {
                let line = match total {
                    Some(t) if t > 0 => format!(
                        "[*] downloaded {} of {} ({}%)",
                        mib(done),
                        mib(t),
                        done * 100 / t
                    ),
                    _ => format!("[*] downloaded {}", mib(done)),
                };
                step.processing(line);
            }
        };
        self.images.download(&plan, &progress).await.map_err(|e| {
            Failure::new(
                &step,
                format!("[-] failed to download OS image: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success("[+] completed OS image download");
        Ok(plan.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("data/images");
        private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    use std::path::Path;

    use app::os::find;
    use tokio::io::AsyncWriteExt;

    /// A mirror that sends part of an image, then fails or completes.
    struct Halfway {
        fail: bool,
    }

    #[async_trait::async_trait]
    impl Mirror for Halfway {
        async fn check(&self, _: &str) -> Result<(), ImageError> {
            Ok(())
        }
        async fn fetch(
            &self,
            _: &str,
            file: &mut tokio::fs::File,
            path: &Path,
            _: crate::mirror::Progress<'_>,
        ) -> Result<(), ImageError> {
            let written = file.write_all(b"QFI").await;
            written.map_err(|source| ImageError::Write {
                path: path.to_path_buf(),
                source,
            })?;
            if self.fail {
                return Err(ImageError::Stalled);
            }
            file.flush().await.map_err(|source| ImageError::Write {
                path: path.to_path_buf(),
                source,
            })
        }
    }

    fn cache(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pvedeck-images-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn files(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_download_is_renamed_when_complete_and_leaves_nothing_when_not() {
        let release = find(Os::Debian, "12").unwrap();
        let dir = cache("partial");
        let failing = Images::bounded(
            Arc::new(Halfway { fail: true }),
            dir.clone(),
            BTreeMap::new(),
            u64::MAX,
        );
        let plan = failing.plan(&release);
        let e = failing.download(&plan, &|_, _| {}).await.unwrap_err();
        assert_eq!(e.to_string(), "no data for 60s");
        assert_eq!(files(&dir), Vec::<String>::new(), "no partial file stays");

        let working = Images::bounded(
            Arc::new(Halfway { fail: false }),
            dir.clone(),
            BTreeMap::new(),
            u64::MAX,
        );
        working.download(&plan, &|_, _| {}).await.unwrap();
        assert_eq!(files(&dir), ["debian-12-generic-amd64.qcow2"]);
        assert_eq!(std::fs::read(&plan.path).unwrap(), b"QFI");
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
