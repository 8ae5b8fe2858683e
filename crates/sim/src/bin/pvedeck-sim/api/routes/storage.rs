//! `/nodes/{node}/storage` (status), `…/{storage}/content` and
//! `…/{storage}/download-url`: the `import` content a create's
//! `import-from` reads. Downloaded files live under
//! `DATA_DIR/sim/storage/<node>/<storage>/import/` (a file storage is per
//! node unless shared) and come from the simulator's internet.

use std::sync::Arc;

use axum::extract::{Path, State};
use pvedeck_mirror::Mirror;
use pvedeck_proxmox::PveError;
use serde_json::{Value, json};
use sha2::Digest;

use super::super::error::ApiError;
use super::super::params::Params;
use super::super::tasks::TaskLog;
use super::super::{Api, ApiResult, data};

/// `GET /nodes/{node}/storage[?content=…][&storage=…]`: each storage the
/// token may audit; with `content`, the enabled ones holding that content;
/// with `storage`, that one only.
pub async fn list(
    State(api): State<Arc<Api>>,
    Path(node): Path<String>,
    params: Params,
) -> ApiResult {
    api.node_up(&node)?;
    let content = params.get("content");
    let only = params.get("storage");
    let rows = api.sim.pvesm_status(&node, content).await?;
    let storages = api.sim.read(|s| s.storages.clone());
    let audit = ["Datastore.Audit", "Datastore.AllocateSpace"];
    if !audit.iter().any(|p| api.privs.has(p)) {
        return Ok(data(Vec::<Value>::new()));
    }
    let mut list = Vec::new();
    for row in rows {
        let Some(st) = storages.iter().find(|s| s.id == row.name) else {
            continue;
        };
        if content.is_some() && !st.enabled || only.is_some_and(|id| id != st.id) {
            continue;
        }
        let (total, used) = (row.total_kib * 1024, row.used_kib * 1024);
        let avail = row.avail_kib * 1024;
        let mut entry = json!({
            "storage": st.id, "type": st.kind, "content": st.content,
            "enabled": u8::from(st.enabled), "active": u8::from(st.is_active()),
            "shared": u8::from(matches!(st.kind.as_str(), "nfs" | "cifs" | "rbd")),
            "total": total, "used": used, "avail": avail,
        });
        if total > 0 {
            entry["used_fraction"] = json!(used as f64 / total as f64);
        }
        list.push(entry);
    }
    Ok(data(list))
}

pub(super) fn has_content(content: &str, want: &str) -> bool {
    content.split(',').any(|c| c == want)
}

/// `GET …/{storage}/content?content=import`: the files, sorted by volid;
/// empty when the storage does not hold that content.
pub async fn content(
    State(api): State<Arc<Api>>,
    Path((node, storage)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    api.node_up(&node)?;
    api.privs.require_any(
        &format!("/storage/{storage}"),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
    let Some(st) = api.sim.read(|s| s.storage(&storage).cloned()) else {
        return Err(ApiError::new(
            500,
            format!("storage '{storage}' does not exist"),
        ));
    };
    let want = params.get("content");
    if want.is_some_and(|w| w != "import") || !has_content(&st.content, "import") {
        return Ok(data(Vec::<Value>::new()));
    }
    let mut list = Vec::new();
    if let Ok(entries) = std::fs::read_dir(api.import_dir(&node, &storage)) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(format) = import_format(&name) else {
                continue;
            };
            let meta = entry.metadata().ok();
            let ctime = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            list.push(json!({
                "volid": format!("{storage}:import/{name}"), "format": format,
                "size": meta.map_or(0, |m| m.len()), "ctime": ctime, "content": "import",
            }));
        }
    }
    list.sort_by(|a, b| a["volid"].as_str().cmp(&b["volid"].as_str()));
    Ok(data(list))
}

/// The format of an import file name, if it is one (`.ova|qcow2|raw|vmdk`).
fn import_format(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1;
    ["ova", "qcow2", "raw", "vmdk"]
        .into_iter()
        .find(|e| *e == ext)
}

/// Proxmox's check for an import file name (Storage.pm): the characters,
/// and an extension it can import.
pub(super) fn valid_filename(name: &str) -> bool {
    let stem_ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.+=_".contains(&b));
    stem_ok
        && name.len() <= 255
        && import_format(name).is_some()
        && name
            .rsplit_once('.')
            .is_some_and(|(stem, _)| !stem.is_empty())
}

/// A digest computed as the bytes go by, for the algorithms the simulator
/// has (Proxmox also takes md5 and sha1).
pub(super) enum Hasher {
    Sha224(sha2::Sha224),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub(super) fn new(algo: &str) -> Option<Hasher> {
        Some(match algo {
            "sha224" => Hasher::Sha224(sha2::Sha224::new()),
            "sha256" => Hasher::Sha256(sha2::Sha256::new()),
            "sha384" => Hasher::Sha384(sha2::Sha384::new()),
            "sha512" => Hasher::Sha512(sha2::Sha512::new()),
            _ => return None,
        })
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha224(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha384(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The lower-case hex digest.
    pub(super) fn hex(self) -> String {
        let raw: Vec<u8> = match self {
            Hasher::Sha224(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha384(h) => h.finalize().to_vec(),
            Hasher::Sha512(h) => h.finalize().to_vec(),
        };
        raw.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The lower-case hex digest of `bytes`, if the algorithm is simulated.
fn digest(algo: &str, bytes: &[u8]) -> Option<String> {
    let mut hasher = Hasher::new(algo)?;
    hasher.update(bytes);
    Some(hasher.hex())
}

/// Where the node would keep the file, for the log: `sub` is the
/// content's directory in the storage (`import`, `template/iso`…).
pub(super) fn shown_path(kind: &str, storage: &str, sub: &str, file: &str) -> String {
    if storage == "local" && kind == "dir" {
        format!("/var/lib/vz/{sub}/{file}")
    } else {
        format!("/mnt/pve/{storage}/{sub}/{file}")
    }
}

/// The content types a file can be uploaded or downloaded as.
const CONTENTS: &str = "iso, vztmpl, import";

/// `content`, checked against the schema's enumeration.
pub(super) fn content_param(params: &Params) -> Result<String, ApiError> {
    let content = params.required("content")?;
    if !CONTENTS.split(", ").any(|c| c == content) {
        return Err(ApiError::param(
            "content",
            format!("value '{content}' does not have a value in the enumeration '{CONTENTS}'"),
        ));
    }
    Ok(content.to_string())
}

/// `checksum` and `checksum-algorithm`: both or neither, a known
/// algorithm. (checksum as given, algorithm)
/// How long the simulated node hashes a downloaded image.
const CHECKSUM_MS: u64 = 2_000;

pub(super) fn checksum_params(params: &Params) -> Result<Option<(String, String)>, ApiError> {
    match (params.get("checksum"), params.get("checksum-algorithm")) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ApiError::param(
            "checksum",
            "missing parameter 'checksum-algorithm'",
        )),
        (None, Some(_)) => Err(ApiError::param(
            "checksum-algorithm",
            "missing parameter 'checksum'",
        )),
        (Some(_), Some(a)) if !ALGOS.split(", ").any(|x| x == a) => Err(ApiError::param(
            "checksum-algorithm",
            format!("value '{a}' does not have a value in the enumeration '{ALGOS}'"),
        )),
        (Some(sum), Some(algo)) => Ok(Some((sum.to_string(), algo.to_string()))),
    }
}

/// Proxmox's `normalize_content_filename` (Storage.pm): no directory,
/// anything but `[a-zA-Z0-9_.-]` made `_`.
pub(super) fn normalize_filename(name: &str) -> String {
    let name = name.strip_suffix('\n').unwrap_or(name);
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

const ALGOS: &str = "md5, sha1, sha224, sha256, sha384, sha512";

/// Removes a file when dropped (a no-op once it was renamed away).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Proxmox's refusal of an untrusted qcow2 file, in its words.
fn untrusted(bytes: &[u8], tmp: &std::path::Path) -> Result<(), String> {
    use pvedeck_mirror::qcow2::{Refusal, check};
    match check(bytes) {
        Err(Refusal::BackingFile) => Err(format!(
            "backing file not allowed for untrusted image '{}'!",
            tmp.display()
        )),
        Err(Refusal::DataFile) => Err(format!(
            "{}: 'data-file' references are not allowed!",
            tmp.display()
        )),
        // Other formats are qemu-img's to judge; the simulator has none.
        _ => Ok(()),
    }
}

/// `POST …/{storage}/download-url`: a `download` task fetching `url` into
/// the storage's `import` content.
pub async fn download_url(
    State(api): State<Arc<Api>>,
    Path((node, storage)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    api.node_up(&node)?;
    api.privs
        .require(&format!("/storage/{storage}"), "Datastore.AllocateTemplate")?;
    // Sys.AccessNetwork on the node, or Sys.Audit and Sys.Modify on `/`
    // (pve-storage `PVE/API2/Storage/Status.pm`, `download_url`).
    if !(api.privs.has("Sys.Audit") && api.privs.has("Sys.Modify")) {
        api.privs
            .require(&format!("/nodes/{node}"), "Sys.AccessNetwork")?;
    }
    let url = params.required("url")?.to_string();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ApiError::param(
            "url",
            "value does not match the regex pattern",
        ));
    }
    let content = content_param(&params)?;
    let filename = params.required("filename")?.to_string();
    let (checksum, algo) = match checksum_params(&params)? {
        Some((sum, algo)) => (Some(sum.to_ascii_lowercase()), Some(algo)),
        None => (None, None),
    };
    let Some(st) = api.sim.read(|s| s.storage(&storage).cloned()) else {
        return Err(ApiError::new(
            500,
            format!("storage '{storage}' does not exist"),
        ));
    };
    if !has_content(&st.content, &content) {
        return Err(ApiError::new(
            500,
            format!("storage '{storage}' is not configured for content-type '{content}'"),
        ));
    }
    if !st.is_file_based() {
        return Err(ApiError::new(
            500,
            format!(
                "can't upload to storage type '{}', not a file based storage!",
                st.kind
            ),
        ));
    }
    if content == "import" && !valid_filename(&filename) {
        return Err(ApiError::param(
            "filename",
            "invalid filename or wrong extension",
        ));
    }
    let filename = normalize_filename(&filename);

    let command = format!(
        "pvesh create /nodes/{node}/storage/{storage}/download-url --content {content} --filename {filename} --url {url}"
    );
    api.sim.record(&command);
    let dir = api.import_dir(&node, &storage);
    let shown = shown_path(&st.kind, &storage, "import", &filename);
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "download", &filename),
        move |log| async move {
            let job = Download {
                api: &task_api,
                log: &log,
                command: &command,
                url: &url,
                shown: &shown,
                checksum: checksum.zip(algo),
            };
            job.run(&dir.join(&filename)).await
        },
    );
    Ok(data(upid.to_string()))
}

struct Download<'a> {
    api: &'a Api,
    log: &'a TaskLog,
    command: &'a str,
    url: &'a str,
    shown: &'a str,
    /// (expected hex, algorithm)
    checksum: Option<(String, String)>,
}

impl Download<'_> {
    fn fail(&self, message: impl Into<String>) -> PveError {
        PveError::command(self.command, message, 255)
    }

    /// `Ok(None)` when the checksum matches, else what mismatched.
    fn verify(&self, bytes: &[u8]) -> Result<Option<String>, PveError> {
        let Some((want, algo)) = &self.checksum else {
            return Ok(None);
        };
        let got = digest(algo, bytes)
            .ok_or_else(|| self.fail(format!("checksum algorithm '{algo}' is not simulated")))?;
        Ok((got != *want).then(|| format!("checksum mismatch: got '{got}' != expect '{want}'")))
    }

    async fn run(&self, path: &std::path::Path) -> Result<(), PveError> {
        let api = self.api;
        api.sim.fault("download", None, self.command).await?;
        if let Ok(existing) = std::fs::read(path) {
            if self.checksum.is_none() {
                return Err(self.fail(format!(
                    "refusing to override existing file '{}'",
                    self.shown
                )));
            }
            return match self.verify(&existing)? {
                None => {
                    self.log
                        .line("OK, got correct file already, no need to download");
                    Ok(())
                }
                Some(mismatch) => Err(self.fail(format!("{mismatch}, aborting"))),
            };
        }
        let dir = path.parent().unwrap_or(path);
        std::fs::create_dir_all(dir).map_err(|e| self.fail(format!("{}: {e}", dir.display())))?;
        let tmp = path.with_extension(format!("tmp_dwnl.{}", std::process::id()));
        // A task stopped mid-download leaves no partial file, as Proxmox's
        // worker removes its temporary file when it dies.
        let _partial = RemoveOnDrop(tmp.clone());
        self.log
            .line(&format!("downloading {} to {}", self.url, self.shown));
        let fetched = self.fetch(&tmp).await;
        let bytes = match fetched.and_then(|()| {
            std::fs::read(&tmp).map_err(|e| self.fail(format!("{}: {e}", tmp.display())))
        }) {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if self.checksum.is_some() {
            self.log.part("calculating checksum...");
            // Hashing takes its time: the line stays unfinished meanwhile.
            self.api.sim.clock().sleep(CHECKSUM_MS).await;
            if let Some(mismatch) = self.verify(&bytes)? {
                self.log.line("");
                let _ = std::fs::remove_file(&tmp);
                return Err(self.fail(mismatch));
            }
            self.log.line("OK, checksum verified");
        }
        // pve-storage checks a file from outside before it takes its name
        // (`file_size_info` with `$untrusted`, libpve-storage-perl 8.2.7):
        // a qcow2 that links other files of the node is refused.
        if let Err(why) = untrusted(&bytes, &tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.fail(why));
        }
        std::fs::rename(&tmp, path).map_err(|e| self.fail(format!("{}: {e}", path.display())))?;
        self.log.line(&format!(
            "download of '{}' to '{}' finished",
            self.url, self.shown
        ));
        Ok(())
    }

    async fn fetch(&self, tmp: &std::path::Path) -> Result<(), PveError> {
        let internet = &self.api.internet;
        internet
            .check(self.url)
            .await
            .map_err(|e| self.fail(format!("download failed: {e}")))?;
        let mut file = tokio::fs::File::create(tmp)
            .await
            .map_err(|e| self.fail(format!("{}: {e}", tmp.display())))?;
        let last = std::sync::atomic::AtomicU64::new(u64::MAX);
        let progress = |done: u64, total: Option<u64>| {
            let Some(total) = total.filter(|t| *t > 0) else {
                return;
            };
            // A line per tenth, as wget's dots give a few lines.
            let tenth = done * 10 / total;
            if last.swap(tenth, std::sync::atomic::Ordering::Relaxed) != tenth {
                self.log
                    .line(&format!("{:>8}K {:>3}%", done / 1024, tenth * 10));
            }
        };
        internet
            .fetch(self.url, &mut file, tmp, &progress)
            .await
            .map_err(|e| self.fail(format!("download failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_names_are_checked_like_proxmox() {
        assert!(valid_filename("debian-12-genericcloud-amd64.qcow2"));
        assert!(!valid_filename("noble-server-cloudimg-amd64.img"));
        assert!(!valid_filename("../x.qcow2"));
        assert!(!valid_filename(".qcow2"));
        assert_eq!(import_format("a.raw"), Some("raw"));
        assert_eq!(digest("sha256", b"abc").map(|d| d.len()), Some(64));
        assert_eq!(digest("md5", b"abc"), None);
    }
}
