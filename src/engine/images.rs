//! Cloud images (docs/provisioning.md#os-images) and the install's `OS preparation` stage: the
//! URL, its `HEAD`, the download into the cache under a temporary name,
//! checked against the checksum the mirror publishes, renamed once complete
//! and checked, so a partial or corrupt file is never taken for an image.
//! Where images come from is the `Mirror` the server was built with.
//!
//! The cache keeps, beside each image it verified, a record of the checksum
//! it was verified against (`<image>.sha512` or `.sha256`, in `sha*sum`'s
//! format): a cached image is hashed again only when that record is missing
//! or the mirror now publishes another checksum (a new image). The image at
//! its final name is opened without following a symbolic link: a link, or
//! anything but a regular file, is not trusted and is replaced by a download.
//!
//! Images fail closed (docs/security.md#images): a mirror without a
//! checksum list fails the install unless the admin said
//! `IMAGE_VERIFY_<OS>=none`; with `IMAGE_KEYRING_<OS>` the list must carry a
//! good signature by one of its keys; an image whose qcow2 header names a
//! backing file or an external data file is refused before import; and a
//! whole download is bounded by `IMAGE_DOWNLOAD_TIMEOUT_SECS`.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pvedeck_domain::os::{Os, Release};
use pvedeck_mirror::checksums::{self, Algo, ListError};
use pvedeck_mirror::qcow2::{self, Refusal};
use pvedeck_mirror::signature::{self, Keyring, SignatureError};
use pvedeck_mirror::{ImageError, Mirror};
use pvedeck_proxmox::{DiskImage, NodeFetch};
use pvedeck_support::files::private_dir;
use pvedeck_support::sync::lock;
use tempfile::NamedTempFile;
use tokio::sync::OwnedMutexGuard;

use super::Engine;
use super::failure::{Cleanup, Failure};
use super::report::{Out, Step, one_line};

/// Where an image comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub url: String,
    pub path: PathBuf,
    /// The image's name, as the mirror's checksum list names it.
    pub file: String,
    /// The checksum list the mirror publishes in the image's directory.
    pub list_url: String,
    /// Where the list's detached signature may be, in the order tried.
    pub signature_urls: Vec<String>,
    pub algo: Algo,
    pub os: Os,
}

impl ImagePlan {
    /// `<image>.sha512`: the record of the checksum the cached image was
    /// verified against.
    fn record_path(&self) -> PathBuf {
        self.path
            .with_file_name(format!("{}.{}", self.file, self.algo.extension()))
    }
}

/// What an install requires of one OS's images (`IMAGE_VERIFY_<OS>`,
/// `IMAGE_KEYRING_<OS>`).
#[derive(Debug, Clone, Default)]
pub enum Policy {
    /// A checksum list that names the image (the default).
    #[default]
    Checksum,
    /// That, signed by a key of the keyring.
    Signed(Arc<Keyring>),
    /// `none`: a published checksum is checked, its absence accepted.
    Unchecked,
}

/// `IMAGE_VERIFY_DEBIAN`: the setting that names `os`, for messages.
fn verify_var(os: Os) -> String {
    format!("IMAGE_VERIFY_{}", os.name().to_ascii_uppercase())
}

fn keyring_var(os: Os) -> String {
    format!("IMAGE_KEYRING_{}", os.name().to_ascii_uppercase())
}

/// What the mirror published, as checked: the checksum, and the key that
/// signed the list when a keyring asked for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub expected: Expected,
    /// The signing key's fingerprint.
    pub signed_by: Option<String>,
}

/// What the mirror says the image's checksum is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Lower-case hex.
    Sum(String),
    /// No list at the URL (404, 410).
    NoList,
    /// A list that names other files only.
    NotListed,
}

/// Why an image could not be verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot get the OS image checksums from {url}: {source}")]
    List { url: String, source: ImageError },
    #[error("cannot use the checksum list {url}: {source}")]
    BadList { url: String, source: ListError },
    #[error(
        "no checksum list at {url}: the image cannot be verified (set {var}=none to use images \
         without one)"
    )]
    NoList { url: String, var: String },
    #[error(
        "{url} lists no checksum for {file}: the image cannot be verified (set {var}=none to use \
         images without one)"
    )]
    NotListed {
        url: String,
        file: String,
        var: String,
    },
    #[error(
        "the checksum list {url} is not signed (nothing at {tried}), and {var} asks for a signature"
    )]
    Unsigned {
        url: String,
        tried: String,
        var: String,
    },
    #[error("cannot get the signature {url} of the checksum list: {source}")]
    SignatureFetch { url: String, source: ImageError },
    #[error("the checksum list {url} is refused: its signature {signature}: {source}")]
    Signature {
        url: String,
        signature: String,
        source: SignatureError,
    },
    #[error("OS image {what} is refused before import: {source}")]
    Unsafe { what: String, source: Refusal },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "OS image does not match the {} published at {url} (expected {expected}, got {got}); the file was deleted",
        algo.name()
    )]
    Mismatch {
        url: String,
        algo: Algo,
        expected: String,
        got: String,
    },
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// What is at an image's final name in the cache.
#[derive(Debug)]
pub enum Cached {
    Absent,
    /// A symbolic link (not followed), or not a regular file: what it
    /// points to is never read, and a download replaces it.
    Untrusted(&'static str),
    File(std::fs::File),
}

/// What checking a cached image against the mirror's checksum found.
#[derive(Debug, PartialEq, Eq)]
pub enum CacheCheck {
    /// Verified earlier against the checksum the mirror publishes now.
    Recorded,
    /// Hashed now, and it matches.
    Matches,
    /// Hashed now, it does not match: removed, with its record.
    Removed,
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
    /// Per OS; an OS not named needs its checksum.
    policy: BTreeMap<Os, Policy>,
    /// `IMAGE_DOWNLOAD_TIMEOUT_SECS`: the longest a whole download may take.
    deadline: Duration,
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
            policy: BTreeMap::new(),
            deadline: Duration::from_secs(1800),
        }
    }

    /// What each OS's images must show (`IMAGE_VERIFY_<OS>`,
    /// `IMAGE_KEYRING_<OS>`).
    pub fn verifying(mut self, policy: BTreeMap<Os, Policy>) -> Images {
        self.policy = policy;
        self
    }

    /// `IMAGE_DOWNLOAD_TIMEOUT_SECS`.
    pub fn within(mut self, deadline: Duration) -> Images {
        self.deadline = deadline;
        self
    }

    fn policy(&self, os: Os) -> Policy {
        self.policy.get(&os).cloned().unwrap_or_default()
    }

    pub fn plan(&self, release: &Release) -> ImagePlan {
        let base = self.bases.get(&release.os);
        let url = release.image_url(base.map(String::as_str));
        let published = checksums::published(release.os);
        // The list sits beside the image, on the official mirrors and in an
        // `IMAGE_BASE_<OS>` directory alike.
        let dir = url.rsplit_once('/').map_or("", |(dir, _)| dir);
        ImagePlan {
            list_url: format!("{dir}/{}", published.list),
            signature_urls: published
                .signatures
                .iter()
                .map(|name| format!("{dir}/{name}"))
                .collect(),
            algo: published.algo,
            os: release.os,
            file: release.file_name(),
            path: self.cache_dir.join(release.file_name()),
            url,
        }
    }

    /// Holds the image's download slot: a second install of the same image
    /// waits here, then finds the file.
    async fn hold(&self, plan: &ImagePlan) -> OwnedMutexGuard<()> {
        let slot = {
            let mut map = lock(&self.downloading);
            map.entry(plan.path.clone()).or_default().clone()
        };
        slot.lock_owned().await
    }

    /// The image's checksum as the mirror publishes it now, checked as
    /// the OS's policy asks: a list that is missing or does not name the
    /// image fails unless `IMAGE_VERIFY_<OS>=none`; with a keyring, the
    /// list's signature must verify. A mirror that fails to answer, or
    /// answers with something that is no checksum list, fails always.
    pub async fn expected(&self, plan: &ImagePlan) -> Result<Checked, VerifyError> {
        let policy = self.policy(plan.os);
        let list = self
            .mirror
            .list(&plan.list_url)
            .await
            .map_err(|source| VerifyError::List {
                url: plan.list_url.clone(),
                source,
            })?;
        let Some(mut list) = list else {
            return match policy {
                Policy::Unchecked => Ok(Checked {
                    expected: Expected::NoList,
                    signed_by: None,
                }),
                Policy::Checksum | Policy::Signed(_) => Err(VerifyError::NoList {
                    url: plan.list_url.clone(),
                    var: verify_var(plan.os),
                }),
            };
        };
        let signed_by = match &policy {
            Policy::Signed(keyring) => {
                let (text, key) = self.signed(plan, keyring, &list).await?;
                list = text;
                Some(key)
            }
            Policy::Checksum | Policy::Unchecked => None,
        };
        let expected = match checksums::find(&list, plan.algo, &plan.file) {
            Ok(Some(sum)) => Expected::Sum(sum),
            Ok(None) if matches!(policy, Policy::Unchecked) => Expected::NotListed,
            Ok(None) => {
                return Err(VerifyError::NotListed {
                    url: plan.list_url.clone(),
                    file: plan.file.clone(),
                    var: verify_var(plan.os),
                });
            }
            Err(source) => {
                return Err(VerifyError::BadList {
                    url: plan.list_url.clone(),
                    source,
                });
            }
        };
        Ok(Checked {
            expected,
            signed_by,
        })
    }

    /// The list's signed text and the key that signed it: the list itself
    /// when it is cleartext-signed, else the first detached signature the
    /// mirror has beside it.
    async fn signed(
        &self,
        plan: &ImagePlan,
        keyring: &Keyring,
        list: &str,
    ) -> Result<(String, String), VerifyError> {
        let refused = |signature: &str, source| VerifyError::Signature {
            url: plan.list_url.clone(),
            signature: signature.to_string(),
            source,
        };
        if signature::is_cleartext_signed(list) {
            return keyring
                .verify_cleartext(list)
                .map_err(|e| refused(&plan.list_url, e));
        }
        for url in &plan.signature_urls {
            let found =
                self.mirror
                    .signature(url)
                    .await
                    .map_err(|source| VerifyError::SignatureFetch {
                        url: url.clone(),
                        source,
                    })?;
            if let Some(bytes) = found {
                let key = keyring
                    .verify_detached(list.as_bytes(), &bytes)
                    .map_err(|e| refused(url, e))?;
                return Ok((list.to_string(), key));
            }
        }
        Err(VerifyError::Unsigned {
            url: plan.list_url.clone(),
            tried: plan.signature_urls.join(", "),
            var: keyring_var(plan.os),
        })
    }

    /// Refuses an image whose qcow2 header links other files, by what the
    /// mirror serves at its start (for a node's own download, which
    /// pvedeck never sees whole).
    pub async fn check_remote_header(&self, plan: &ImagePlan) -> Result<(), VerifyError> {
        let head = self.mirror.header(&plan.url).await?;
        qcow2::check(&head).map_err(|source| VerifyError::Unsafe {
            what: plan.url.clone(),
            source,
        })
    }

    /// Checks the cached image `file` against `expected`: by its record
    /// when that holds the same checksum, else by hashing it; one that does
    /// not match is removed, so that a download takes its place.
    pub async fn check_cached(
        &self,
        plan: &ImagePlan,
        file: std::fs::File,
        expected: &str,
    ) -> Result<CacheCheck, VerifyError> {
        if read_record(plan).as_deref() == Some(expected) {
            return Ok(CacheCheck::Recorded);
        }
        let got = hash(file, plan.algo)
            .await
            .map_err(|source| VerifyError::Read {
                path: plan.path.clone(),
                source,
            })?;
        if got == expected {
            record(plan, &got);
            return Ok(CacheCheck::Matches);
        }
        forget(plan);
        match std::fs::remove_file(&plan.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(VerifyError::Remove {
                path: plan.path.clone(),
                source: e,
            }),
            _ => Ok(CacheCheck::Removed),
        }
    }

    /// Downloads into a file of a random name in the cache, created
    /// exclusively; dropping it removes it.
    async fn download(
        &self,
        plan: &ImagePlan,
        progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
    ) -> Result<NamedTempFile, ImageError> {
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
        let exceeded = AtomicBool::new(false);
        let watch = |done: u64, total: Option<u64>| {
            if done > max || total.is_some_and(|t| t > max) {
                exceeded.store(true, Ordering::SeqCst);
                over.notify_one();
            }
            progress(done, total);
        };
        // A mirror that sends a few bytes now and then never stalls: only
        // a bound on the whole download ends it, and frees the image's slot.
        let deadline = tokio::time::sleep(self.deadline);
        let fetched = tokio::select! {
            biased;
            () = over.notified() => None,
            () = deadline => {
                return Err(ImageError::Deadline {
                    secs: self.deadline.as_secs(),
                });
            }
            fetched = self.mirror.fetch(&plan.url, &mut file, part.path(), &watch) => Some(fetched),
        };
        // A fetch that ended in the same turn as the cap was passed counts
        // as too large as well.
        match fetched {
            _ if exceeded.load(Ordering::SeqCst) => {
                return Err(ImageError::TooLarge { max });
            }
            None => return Err(ImageError::TooLarge { max }),
            Some(fetched) => fetched?,
        }
        Ok(part)
    }

    /// Checks a completed download against `expected` and renames it to
    /// the image's name; one that does not match is deleted.
    async fn keep(
        &self,
        plan: &ImagePlan,
        part: NamedTempFile,
        expected: &Expected,
    ) -> Result<(), VerifyError> {
        if let Expected::Sum(expected) = expected {
            let file = part.reopen().map_err(|source| VerifyError::Read {
                path: part.path().to_path_buf(),
                source,
            })?;
            let got = hash(file, plan.algo)
                .await
                .map_err(|source| VerifyError::Read {
                    path: part.path().to_path_buf(),
                    source,
                })?;
            if got != *expected {
                drop(part);
                return Err(VerifyError::Mismatch {
                    url: plan.list_url.clone(),
                    algo: plan.algo,
                    expected: expected.clone(),
                    got,
                });
            }
        }
        // Even an image the list vouches for must stand alone: dropping
        // `part` deletes it.
        let header = part
            .reopen()
            .and_then(|file| read_header(&file))
            .map_err(|source| VerifyError::Read {
                path: part.path().to_path_buf(),
                source,
            })?;
        qcow2::check(&header).map_err(|source| VerifyError::Unsafe {
            what: plan.url.clone(),
            source,
        })?;
        // The old record must not vouch for the new file, not even for the
        // moment between the rename and the new record.
        forget(plan);
        // A rename replaces whatever is at the name (a link itself, never
        // what it points to).
        part.persist(&plan.path)
            .map_err(|e| ImageError::Rename(e.error))?;
        if let Expected::Sum(sum) = expected {
            record(plan, sum);
        }
        Ok(())
    }
}

/// The first [`qcow2::HEADER_BYTES`] of `file` (fewer when it is
/// shorter), read without moving its position.
pub fn read_header(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; qcow2::HEADER_BYTES];
    let mut done = 0;
    while done < head.len() {
        match file.read_at(&mut head[done..], done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    head.truncate(done);
    Ok(head)
}

/// Opens the image at `path` without following a symbolic link (nor
/// blocking on a FIFO someone put there).
pub fn open_cached(path: &Path) -> std::io::Result<Cached> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    match opened {
        Ok(file) if file.metadata()?.is_file() => Ok(Cached::File(file)),
        Ok(_) => Ok(Cached::Untrusted("not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cached::Absent),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(Cached::Untrusted("a symbolic link")),
        Err(e) => Err(e),
    }
}

/// The checksum the cached image was verified against, if recorded (a
/// record that is a link, or unreadable, is none).
fn read_record(plan: &ImagePlan) -> Option<String> {
    let Ok(Cached::File(file)) = open_cached(&plan.record_path()) else {
        return None;
    };
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    checksums::find(&text, plan.algo, &plan.file).ok().flatten()
}

/// Records that the cached image matches `sum`, atomically. A record that
/// cannot be written costs a hash at the next install, no more: logged,
/// not failed.
fn record(plan: &ImagePlan, sum: &str) {
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let dir = plan.path.parent().unwrap_or(Path::new("."));
        let mut part = tempfile::Builder::new().prefix(".part-").tempfile_in(dir)?;
        part.write_all(checksums::record_line(sum, &plan.file).as_bytes())?;
        part.persist(plan.record_path()).map_err(|e| e.error)?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::warn!(path = %plan.record_path().display(), error = %e, "cannot record the image checksum");
    }
}

/// Removes the record of the cached image's checksum.
fn forget(plan: &ImagePlan) {
    match std::fs::remove_file(plan.record_path()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %plan.record_path().display(), error = %e, "cannot remove the image checksum record");
        }
        _ => {}
    }
}

/// Sets its flag when dropped: the future that waited for a hash is gone.
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Hashes `file` from where it stands (its start) on a blocking thread: a
/// multi-GiB image takes seconds, which no async worker may spend. An
/// install stopped meanwhile stops the hashing too.
async fn hash(mut file: std::fs::File, algo: Algo) -> std::io::Result<String> {
    let abandoned = Arc::new(AtomicBool::new(false));
    let _guard = Abandoned(abandoned.clone());
    let task = tokio::task::spawn_blocking(move || {
        let mut hasher = algo.hasher();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            if abandoned.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("the install was stopped"));
            }
            match file.read(&mut buf) {
                Ok(0) => return Ok(hasher.finish()),
                Ok(n) => hasher.update(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    task.await.map_err(std::io::Error::other)?
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
        let mut last = lock(&self.last_pct);
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

/// What step `verifying OS image` says of an image checked against
/// `expected` (or not, when the mirror gives no checksum).
fn verdict(plan: &ImagePlan, expected: &Expected) -> String {
    match expected {
        Expected::Sum(_) => format!(
            "[+] OS image matches the {} published at {}",
            plan.algo.name(),
            plan.list_url
        ),
        Expected::NoList => format!(
            "[*] no checksum published at {}; image not verified",
            plan.list_url
        ),
        Expected::NotListed => format!(
            "[*] {} lists no checksum for {}; image not verified",
            plan.list_url, plan.file
        ),
    }
}

impl Engine {
    /// Stage `OS preparation`: the image URL, its check, the mirror's
    /// checksum, then the cached file (checked) or the download (checked
    /// before it takes the image's name).
    /// With a backend whose nodes fetch images, the node gets it instead
    /// (`on_node`), into its import storage.
    pub(super) async fn os_image_stage(
        &self,
        out: Out<'_>,
        release: &Release,
        node: &str,
    ) -> Result<DiskImage, Failure> {
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

        // A concurrent install of the same image finishes its download
        // first: in this process, and on the other replicas of a shared
        // store (the node's download is theirs too).
        let _slot = self.images.hold(&plan).await;
        let _across = match self
            .jobs
            .store()
            .hold(&format!("image {node} {}", plan.file))
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!("cannot hold the image's download across replicas: {e}");
                None
            }
        };
        let verify = Step::new(out, Some("OS preparation"), "verifying OS image");
        let fail = |step: &Step<'_>, e: VerifyError| {
            Failure::new(step, format!("[-] {e}"), Cleanup::Nothing)
        };
        let checked = self
            .images
            .expected(&plan)
            .await
            .map_err(|e| fail(&verify, e))?;
        if let Some(key) = &checked.signed_by {
            verify.processing(format!(
                "[*] checksum list {} signed by key {key}",
                plan.list_url
            ));
        }
        let expected = checked.expected;
        if self.proxmox.fetches_images() {
            return self.on_node(out, &plan, &expected, node).await;
        }
        let cached = open_cached(&plan.path).map_err(|source| {
            let e = VerifyError::Read {
                path: plan.path.clone(),
                source,
            };
            fail(&verify, e)
        })?;
        match cached {
            Cached::Absent => {}
            Cached::Untrusted(what) => verify.processing(format!(
                "[*] {} is {what}: not trusted, the download replaces it",
                plan.path.display()
            )),
            Cached::File(file) => {
                // A file at the image's name that links other files is
                // never imported, whatever its record says.
                let header = read_header(&file).map_err(|source| {
                    fail(
                        &verify,
                        VerifyError::Read {
                            path: plan.path.clone(),
                            source,
                        },
                    )
                })?;
                let standalone = match qcow2::check(&header) {
                    Ok(()) => true,
                    Err(why) => {
                        forget(&plan);
                        if let Err(source) = std::fs::remove_file(&plan.path)
                            && source.kind() != std::io::ErrorKind::NotFound
                        {
                            let e = VerifyError::Remove {
                                path: plan.path.clone(),
                                source,
                            };
                            return Err(fail(&verify, e));
                        }
                        verify.processing(format!(
                            "[*] cached OS image {} is refused: {why}: removed, downloading it again",
                            plan.path.display()
                        ));
                        false
                    }
                };
                let kept = standalone
                    && match &expected {
                        Expected::Sum(sum) => {
                            verify.processing(format!(
                                "[*] check cached OS image against {}",
                                plan.list_url
                            ));
                            let check = self.images.check_cached(&plan, file, sum).await;
                            match check.map_err(|e| fail(&verify, e))? {
                                CacheCheck::Recorded => {
                                    verify.success(&format!(
                                    "[+] OS image verified earlier against the {} published at {}",
                                    plan.algo.name(),
                                    plan.list_url
                                ));
                                    true
                                }
                                CacheCheck::Matches => {
                                    verify.success(&verdict(&plan, &expected));
                                    true
                                }
                                CacheCheck::Removed => {
                                    verify.processing(format!(
                                    "[*] cached OS image does not match the {} published at {}: removed, downloading it again",
                                    plan.algo.name(),
                                    plan.list_url
                                ));
                                    false
                                }
                            }
                        }
                        Expected::NoList | Expected::NotListed => {
                            verify.success(&verdict(&plan, &expected));
                            true
                        }
                    };
                if kept {
                    let step = Step::new(out, Some("OS preparation"), "using OS image");
                    step.success(&format!("[+] using OS image {}", plan.path.display()));
                    return Ok(DiskImage::File(plan.path));
                }
            }
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
        let part = self.images.download(&plan, &progress).await.map_err(|e| {
            Failure::new(
                &step,
                format!("[-] failed to download OS image: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success("[+] completed OS image download");

        let verify = Step::new(out, Some("OS preparation"), "verifying OS image");
        if matches!(expected, Expected::Sum(_)) {
            verify.processing(format!("[*] check OS image against {}", plan.list_url));
        }
        self.images
            .keep(&plan, part, &expected)
            .await
            .map_err(|e| fail(&verify, e))?;
        verify.success(&verdict(&plan, &expected));
        Ok(DiskImage::File(plan.path))
    }

    /// The rest of `OS preparation` where the node fetches the image: the
    /// volume it has (named by the checksum, so the same image), or its
    /// download, which the node checks against the mirror's checksum.
    async fn on_node(
        &self,
        out: Out<'_>,
        plan: &ImagePlan,
        expected: &Expected,
        node: &str,
    ) -> Result<DiskImage, Failure> {
        // The node downloads the file pvedeck never sees: its header is
        // read from the mirror's first bytes, and Proxmox reads the whole
        // file's again before it keeps it (pve-storage `download_url`).
        let verify = Step::new(out, Some("OS preparation"), "verifying OS image");
        self.images
            .check_remote_header(plan)
            .await
            .map_err(|e| Failure::new(&verify, format!("[-] {e}"), Cleanup::Nothing))?;
        let fetch = NodeFetch {
            url: &plan.url,
            file: &plan.file,
            checksum: match expected {
                Expected::Sum(sum) => Some((plan.algo, sum.as_str())),
                Expected::NoList | Expected::NotListed => None,
            },
            deadline: self.images.deadline,
        };
        let step = Step::new(out, Some("OS preparation"), "downloading OS image");
        // Only a download logs: a volume that is there says nothing until
        // the step after.
        let started = AtomicBool::new(false);
        let relay = |line: &str| {
            if !started.swap(true, Ordering::Relaxed) {
                step.processing(format!("[*] start downloading OS image on node {node}"));
            }
            step.relay(line);
        };
        let fetched = self
            .proxmox
            .fetch_image(node, &fetch, &relay)
            .await
            .map_err(|e| {
                Failure::new(
                    &step,
                    format!(
                        "[-] failed to download OS image: {}",
                        one_line(&e.to_string())
                    ),
                    Cleanup::Nothing,
                )
            })?;
        let checked = |by: &str| match expected {
            Expected::Sum(_) => format!(
                "[+] OS image {by} against the {} published at {}",
                plan.algo.name(),
                plan.list_url
            ),
            _ => verdict(plan, expected),
        };
        if fetched.present {
            let verify = Step::new(out, Some("OS preparation"), "verifying OS image");
            verify.success(&checked(&format!(
                "on node {node} was checked when it was downloaded, and is named by its checksum,"
            )));
            let step = Step::new(out, Some("OS preparation"), "using OS image");
            step.success(&format!(
                "[+] using OS image {} on node {node}",
                fetched.volid
            ));
        } else {
            step.success("[+] completed OS image download");
            let verify = Step::new(out, Some("OS preparation"), "verifying OS image");
            verify.success(&checked(&format!("checked by node {node}")));
        }
        Ok(DiskImage::Volume(fetched.volid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use pvedeck_domain::os::find;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn the_cache_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("data/images");
        private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// A mirror that serves `image` (all of it, or a part and then fails)
    /// and answers `list` for the checksum list (`Err(code)`: that status).
    struct Fixed {
        image: Vec<u8>,
        fail: bool,
        list: Result<Option<String>, u16>,
    }

    impl Fixed {
        fn serving(image: &[u8], list: Option<String>) -> Arc<Fixed> {
            Arc::new(Fixed {
                image: image.to_vec(),
                fail: false,
                list: Ok(list),
            })
        }
    }

    #[async_trait::async_trait]
    impl Mirror for Fixed {
        async fn check(&self, _: &str) -> Result<(), ImageError> {
            Ok(())
        }
        async fn fetch(
            &self,
            _: &str,
            file: &mut tokio::fs::File,
            path: &Path,
            _: pvedeck_mirror::Progress<'_>,
        ) -> Result<(), ImageError> {
            let write_error = |source| ImageError::Write {
                path: path.to_path_buf(),
                source,
            };
            if self.fail {
                file.write_all(&self.image[..3])
                    .await
                    .map_err(write_error)?;
                return Err(ImageError::Stalled);
            }
            file.write_all(&self.image).await.map_err(write_error)?;
            file.flush().await.map_err(write_error)
        }
        async fn list(&self, url: &str) -> Result<Option<String>, ImageError> {
            self.list.clone().map_err(|code| ImageError::Status {
                method: "GET",
                url: url.to_string(),
                code,
            })
        }
        async fn signature(&self, _: &str) -> Result<Option<Vec<u8>>, ImageError> {
            Ok(None)
        }
        async fn header(&self, _: &str) -> Result<Vec<u8>, ImageError> {
            Ok(self.image[..self.image.len().min(qcow2::HEADER_BYTES)].to_vec())
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Debian 12's image in a cache of its own under `base`, from `mirror`.
    fn debian(base: &Path, mirror: Arc<Fixed>) -> (Images, ImagePlan) {
        let images = Images::bounded(mirror, base.join("images"), BTreeMap::new(), u64::MAX);
        let plan = images.plan(&find(Os::Debian, "12").unwrap());
        (images, plan)
    }

    /// A stand-alone qcow2 image.
    static IMAGE: std::sync::LazyLock<Vec<u8>> =
        std::sync::LazyLock::new(|| qcow2::header(1 << 30, false, false));

    fn debian_list(image: &[u8]) -> String {
        checksums::record_line(&Algo::Sha512.hex(image), "debian-12-generic-amd64.qcow2")
    }

    #[test]
    fn the_checksum_list_sits_beside_the_image() {
        let images = Images::bounded(
            Fixed::serving(&IMAGE[..], None),
            PathBuf::from("/c"),
            BTreeMap::from([(Os::Rockylinux, "http://127.0.0.1:9/img".to_string())]),
            u64::MAX,
        );
        let plan = images.plan(&find(Os::Debian, "12").unwrap());
        assert_eq!(
            plan.list_url,
            "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
        );
        assert_eq!(
            plan.record_path(),
            Path::new("/c/debian-12-generic-amd64.qcow2.sha512")
        );
        let plan = images.plan(&find(Os::Ubuntu, "24.04").unwrap());
        assert_eq!(
            plan.list_url,
            "https://cloud-images.ubuntu.com/releases/24.04/release/SHA256SUMS"
        );
        let plan = images.plan(&find(Os::Rockylinux, "9").unwrap());
        assert_eq!(plan.list_url, "http://127.0.0.1:9/img/CHECKSUM");
        assert_eq!(plan.algo, Algo::Sha256);
    }

    #[tokio::test]
    async fn what_the_mirror_publishes_is_read_as_expected() {
        let base = tempfile::tempdir().unwrap();
        let expected = |list, policy: Policy| async {
            let mirror = Arc::new(Fixed {
                image: IMAGE.to_vec(),
                fail: false,
                list,
            });
            let (images, plan) = debian(base.path(), mirror);
            let images = images.verifying(BTreeMap::from([(Os::Debian, policy)]));
            images
                .expected(&plan)
                .await
                .map(|c| c.expected)
                .map_err(|e| e.to_string())
        };
        let sum = Algo::Sha512.hex(&IMAGE[..]);
        assert_eq!(
            expected(Ok(Some(debian_list(&IMAGE[..]))), Policy::Checksum).await,
            Ok(Expected::Sum(sum))
        );
        let list = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS";
        // Fail closed: no list, or one without the image, is no checksum.
        assert_eq!(
            expected(Ok(None), Policy::Checksum).await,
            Err(format!(
                "no checksum list at {list}: the image cannot be verified (set \
                 IMAGE_VERIFY_DEBIAN=none to use images without one)"
            ))
        );
        let other = checksums::record_line(&Algo::Sha512.hex(b"x"), "other.qcow2");
        assert_eq!(
            expected(Ok(Some(other.clone())), Policy::Checksum).await,
            Err(format!(
                "{list} lists no checksum for debian-12-generic-amd64.qcow2: the image cannot be \
                 verified (set IMAGE_VERIFY_DEBIAN=none to use images without one)"
            ))
        );
        // Unless the admin says so.
        assert_eq!(
            expected(Ok(None), Policy::Unchecked).await,
            Ok(Expected::NoList)
        );
        assert_eq!(
            expected(Ok(Some(other)), Policy::Unchecked).await,
            Ok(Expected::NotListed)
        );
        assert_eq!(
            expected(
                Ok(Some("<html>proxy login</html>".into())),
                Policy::Unchecked
            )
            .await,
            Err(format!(
                "cannot use the checksum list {list}: it holds no SHA-512 checksum line"
            ))
        );
        assert_eq!(
            expected(Err(503), Policy::Unchecked).await,
            Err(format!(
                "cannot get the OS image checksums from {list}: GET {list} answered 503"
            ))
        );
    }

    #[tokio::test]
    async fn a_keyring_wants_a_signature_beside_the_list() {
        let base = tempfile::tempdir().unwrap();
        let public = pvedeck_sim::internet::mirror_public_key().unwrap();
        let keyring = Keyring::from_bytes(Path::new("sim"), &public).unwrap();
        let mirror = Fixed::serving(&IMAGE[..], Some(debian_list(&IMAGE[..])));
        let (images, plan) = debian(base.path(), mirror);
        let images = images.verifying(BTreeMap::from([(
            Os::Debian,
            Policy::Signed(Arc::new(keyring)),
        )]));
        let e = images.expected(&plan).await.unwrap_err();
        let dir = "https://cloud.debian.org/images/cloud/bookworm/latest";
        assert_eq!(
            e.to_string(),
            format!(
                "the checksum list {dir}/SHA512SUMS is not signed (nothing at \
                 {dir}/SHA512SUMS.sign), and IMAGE_KEYRING_DEBIAN asks for a signature"
            )
        );
    }

    #[tokio::test]
    async fn a_download_past_its_deadline_fails_and_leaves_nothing() {
        /// A mirror that never finishes.
        struct Trickle;
        #[async_trait::async_trait]
        impl Mirror for Trickle {
            async fn check(&self, _: &str) -> Result<(), ImageError> {
                Ok(())
            }
            async fn fetch(
                &self,
                _: &str,
                file: &mut tokio::fs::File,
                _: &Path,
                _: pvedeck_mirror::Progress<'_>,
            ) -> Result<(), ImageError> {
                let _ = file.write_all(b"QFI").await;
                std::future::pending().await
            }
            async fn list(&self, _: &str) -> Result<Option<String>, ImageError> {
                Ok(None)
            }
            async fn signature(&self, _: &str) -> Result<Option<Vec<u8>>, ImageError> {
                Ok(None)
            }
            async fn header(&self, _: &str) -> Result<Vec<u8>, ImageError> {
                Ok(Vec::new())
            }
        }
        let base = tempfile::tempdir().unwrap();
        let images = Images::bounded(
            Arc::new(Trickle),
            base.path().join("images"),
            BTreeMap::new(),
            u64::MAX,
        )
        .within(Duration::from_millis(50));
        let plan = images.plan(&find(Os::Debian, "12").unwrap());
        let e = images.download(&plan, &|_, _| {}).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "not complete within IMAGE_DOWNLOAD_TIMEOUT_SECS (0s)"
        );
        assert_eq!(files(&images.cache_dir), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_download_that_links_other_files_is_deleted() {
        let base = tempfile::tempdir().unwrap();
        for (backing, data, why) in [
            (true, false, "it names a backing file"),
            (false, true, "it names an external data file"),
        ] {
            let image = qcow2::header(1 << 30, backing, data);
            let list = debian_list(&image);
            let (images, plan) = debian(base.path(), Fixed::serving(&image, Some(list)));
            let expected = images.expected(&plan).await.unwrap().expected;
            let part = images.download(&plan, &|_, _| {}).await.unwrap();
            let e = images.keep(&plan, part, &expected).await.unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "OS image {} is refused before import: {why}",
                    plan.url
                )),
                "{e}"
            );
            assert_eq!(files(&images.cache_dir), Vec::<String>::new());
        }
    }

    #[tokio::test]
    async fn a_download_is_renamed_when_complete_and_leaves_nothing_when_not() {
        let base = tempfile::tempdir().unwrap();
        let failing = Arc::new(Fixed {
            image: IMAGE.to_vec(),
            fail: true,
            list: Ok(None),
        });
        let (images, plan) = debian(base.path(), failing);
        let e = images.download(&plan, &|_, _| {}).await.unwrap_err();
        assert_eq!(e.to_string(), "no data for 60s");
        assert_eq!(
            files(&images.cache_dir),
            Vec::<String>::new(),
            "no partial file stays"
        );

        let (images, plan) = debian(base.path(), Fixed::serving(&IMAGE[..], None));
        let part = images.download(&plan, &|_, _| {}).await.unwrap();
        images.keep(&plan, part, &Expected::NoList).await.unwrap();
        assert_eq!(files(&images.cache_dir), ["debian-12-generic-amd64.qcow2"]);
        assert_eq!(std::fs::read(&plan.path).unwrap(), &IMAGE[..]);
    }

    #[tokio::test]
    async fn a_download_that_does_not_match_the_published_checksum_is_deleted() {
        let base = tempfile::tempdir().unwrap();
        let list = debian_list(b"another image");
        let (images, plan) = debian(base.path(), Fixed::serving(&IMAGE[..], Some(list)));
        let expected = images.expected(&plan).await.unwrap().expected;
        let part = images.download(&plan, &|_, _| {}).await.unwrap();
        let e = images.keep(&plan, part, &expected).await.unwrap_err();
        assert!(
            matches!(&e, VerifyError::Mismatch { got, .. } if *got == Algo::Sha512.hex(&IMAGE[..])),
            "{e}"
        );
        assert!(e.to_string().starts_with(
            "OS image does not match the SHA-512 published at https://cloud.debian.org/"
        ));
        assert_eq!(files(&images.cache_dir), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_matching_download_is_kept_with_a_record_of_its_checksum() {
        let base = tempfile::tempdir().unwrap();
        let (images, plan) = debian(
            base.path(),
            Fixed::serving(&IMAGE[..], Some(debian_list(&IMAGE[..]))),
        );
        let expected = images.expected(&plan).await.unwrap().expected;
        let part = images.download(&plan, &|_, _| {}).await.unwrap();
        images.keep(&plan, part, &expected).await.unwrap();
        assert_eq!(
            files(&images.cache_dir),
            [
                "debian-12-generic-amd64.qcow2",
                "debian-12-generic-amd64.qcow2.sha512"
            ]
        );
        // `sha512sum -c` reads the record as it reads the mirror's list.
        assert_eq!(
            std::fs::read_to_string(plan.record_path()).unwrap(),
            debian_list(&IMAGE[..])
        );
        assert_eq!(read_record(&plan), Some(Algo::Sha512.hex(&IMAGE[..])));
    }

    #[tokio::test]
    async fn a_link_at_the_image_s_name_is_neither_followed_nor_trusted() {
        let base = tempfile::tempdir().unwrap();
        let (images, plan) = debian(
            base.path(),
            Fixed::serving(&IMAGE[..], Some(debian_list(&IMAGE[..]))),
        );
        private_dir(&images.cache_dir).unwrap();
        // The link points at a file that even matches the mirror's checksum,
        // with a record saying so: still not used.
        let elsewhere = base.path().join("planted.qcow2");
        std::fs::write(&elsewhere, &IMAGE[..]).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &plan.path).unwrap();
        std::fs::write(plan.record_path(), debian_list(&IMAGE[..])).unwrap();
        assert!(matches!(
            open_cached(&plan.path).unwrap(),
            Cached::Untrusted("a symbolic link")
        ));

        // The download takes the link's place; what it pointed to is untouched.
        std::fs::write(&elsewhere, b"precious").unwrap();
        let expected = images.expected(&plan).await.unwrap().expected;
        let part = images.download(&plan, &|_, _| {}).await.unwrap();
        images.keep(&plan, part, &expected).await.unwrap();
        let meta = std::fs::symlink_metadata(&plan.path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(std::fs::read(&plan.path).unwrap(), &IMAGE[..]);
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"precious");
        assert!(matches!(open_cached(&plan.path).unwrap(), Cached::File(_)));

        // A record that is a link is no record either.
        std::fs::remove_file(plan.record_path()).unwrap();
        let record = base.path().join("planted.sha512");
        std::fs::write(&record, debian_list(&IMAGE[..])).unwrap();
        std::os::unix::fs::symlink(&record, plan.record_path()).unwrap();
        assert_eq!(read_record(&plan), None);
    }

    #[test]
    fn a_fifo_at_the_image_s_name_is_not_trusted_and_does_not_block() {
        let base = tempfile::tempdir().unwrap();
        let fifo = base.path().join("debian-12-generic-amd64.qcow2");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            open_cached(&fifo).unwrap(),
            Cached::Untrusted("not a regular file")
        ));
        assert!(matches!(
            open_cached(&base.path().join("absent")).unwrap(),
            Cached::Absent
        ));
    }

    /// Puts `content` at the image's name, with a record of `recorded`.
    fn cache(images: &Images, plan: &ImagePlan, content: &[u8], recorded: Option<&[u8]>) {
        private_dir(&images.cache_dir).unwrap();
        std::fs::write(&plan.path, content).unwrap();
        let _ = std::fs::remove_file(plan.record_path());
        if let Some(recorded) = recorded {
            std::fs::write(plan.record_path(), debian_list(recorded)).unwrap();
        }
    }

    fn opened(plan: &ImagePlan) -> std::fs::File {
        match open_cached(&plan.path).unwrap() {
            Cached::File(file) => file,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_cached_image_is_hashed_again_only_when_its_record_differs() {
        let base = tempfile::tempdir().unwrap();
        let (images, plan) = debian(base.path(), Fixed::serving(&IMAGE[..], None));
        let sum = Algo::Sha512.hex(&IMAGE[..]);

        // The record holds the mirror's checksum: the file is not read (it
        // would not match).
        cache(
            &images,
            &plan,
            b"changed behind pvedeck's back",
            Some(&IMAGE[..]),
        );
        let check = images.check_cached(&plan, opened(&plan), &sum).await;
        assert_eq!(check.unwrap(), CacheCheck::Recorded);

        // No record: hashed, it matches, the record is written.
        cache(&images, &plan, &IMAGE[..], None);
        let check = images.check_cached(&plan, opened(&plan), &sum).await;
        assert_eq!(check.unwrap(), CacheCheck::Matches);
        assert_eq!(read_record(&plan), Some(sum.clone()));

        // A record of another checksum: hashed, it matches the new one.
        cache(&images, &plan, &IMAGE[..], Some(b"the old image"));
        let check = images.check_cached(&plan, opened(&plan), &sum).await;
        assert_eq!(check.unwrap(), CacheCheck::Matches);
        assert_eq!(read_record(&plan), Some(sum));

        // The mirror has a new image: the old one goes, with its record.
        cache(&images, &plan, &IMAGE[..], Some(&IMAGE[..]));
        let new = Algo::Sha512.hex(b"the new image");
        let check = images.check_cached(&plan, opened(&plan), &new).await;
        assert_eq!(check.unwrap(), CacheCheck::Removed);
        assert_eq!(files(&images.cache_dir), Vec::<String>::new());
    }

    #[tokio::test]
    async fn hashing_runs_off_the_async_workers_and_reads_the_whole_file() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("big");
        // Three buffers and a bit: the loop's edges.
        let content: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert_eq!(
            hash(file, Algo::Sha256).await.unwrap(),
            Algo::Sha256.hex(&content)
        );
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
