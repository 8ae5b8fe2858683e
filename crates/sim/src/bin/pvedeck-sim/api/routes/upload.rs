//! `POST /nodes/{node}/storage/{storage}/upload` (pve-storage
//! `API2/Storage/Status.pm` `upload`, pve-http-server
//! `file_upload_multipart`): a file sent as multipart/form-data, spooled
//! into the storage's directory as it arrives, then moved into place by an
//! `imgcopy` task. pveproxy reads the whole body before the handler sees
//! the parameters, so a refused parameter is answered after the body; the
//! simulator checks them when the file part begins (the fields come
//! first) and throws the rest of the body away, which answers the same.
//! The body is read with `multer`, the file's bytes written as they arrive:
//! an image of gigabytes is never held in memory.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use pvedeck_proxmox::PveError;
use pvedeck_sim::state::SimStorage;
use tokio::io::AsyncWriteExt;

use super::super::error::ApiError;
use super::super::params::Params;
use super::super::tasks::{TaskLog, Upid};
use super::super::{Api, ApiResult, data};
use super::storage::{
    Hasher, checksum_params, content_param, has_content, normalize_filename, shown_path,
    valid_filename,
};

/// The parameters the upload's schema has (`node` and `storage` are the
/// path's); `tmpfilename` is pveproxy's own and ignored here.
const KNOWN: [&str; 5] = [
    "content",
    "filename",
    "checksum",
    "checksum-algorithm",
    "tmpfilename",
];

/// A body up to this size is read before an early refusal (see [`read_small`]).
const SMALL_BODY: usize = 1 << 20;

/// Streamed to disk: the spool file is written in pieces this large.
const WRITE_BUFFER: usize = 1 << 20;

/// A plain field beyond this is refused: the fields are short words and
/// checksums, so more is a client gone wrong, not data to keep.
const MAX_FIELD: usize = 64 * 1024;

/// RFC 2046: a boundary has 1 to 70 characters.
const MAX_BOUNDARY: usize = 70;

pub async fn upload(
    State(api): State<Arc<Api>>,
    Path((node, storage)): Path<(String, String)>,
    req: Request,
) -> ApiResult {
    let (parts, body) = req.into_parts();
    let boundary = match admit(&api, &node, &storage, &parts.headers) {
        Ok(boundary) => boundary,
        Err(e) => {
            read_small(body).await;
            return Err(e);
        }
    };
    let target = Target {
        api: &api,
        node: &node,
        storage: &storage,
        query: Params::from_urlencoded(parts.uri.query().unwrap_or_default()),
    };
    let spool = target.receive(&boundary, body).await?;
    Ok(data(start(&api, &node, &storage, spool).to_string()))
}

/// What pveproxy settles before it reads an upload: the node answers, the
/// privilege (checked up front for uploads, HTTPServer.pm), a multipart
/// body of announced length. The multipart boundary.
fn admit(api: &Api, node: &str, storage: &str, headers: &HeaderMap) -> Result<String, ApiError> {
    api.node_up(node)?;
    api.privs
        .require(&format!("/storage/{storage}"), "Datastore.AllocateTemplate")?;
    let boundary = boundary(headers)?;
    body_length(headers, api.upload_max)?;
    Ok(boundary)
}

/// The boundary of a `multipart/form-data` Content-Type; any other type
/// is refused in pveproxy's words.
fn boundary(headers: &HeaderMap) -> Result<String, ApiError> {
    let ctype = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    multer::parse_boundary(ctype)
        .ok()
        .filter(|b| !b.is_empty() && b.len() <= MAX_BOUNDARY)
        .ok_or_else(|| {
            ApiError::proxy(
                501,
                format!("upload 'Content-Type '{ctype}' not implemented"),
            )
        })
}

/// A body pveproxy would not take as an upload: 501, `upload failed - …`.
fn upload_failed(detail: impl std::fmt::Display) -> ApiError {
    ApiError::proxy(501, format!("upload failed - {detail}"))
}

/// multer's refusals in the words the simulator has always used.
fn unreadable(e: multer::Error) -> ApiError {
    use std::error::Error as _;
    match e {
        multer::Error::IncompleteStream
        | multer::Error::IncompleteFieldData { .. }
        | multer::Error::IncompleteHeaders => {
            upload_failed("the body ends before the closing delimiter")
        }
        // The connection's own error, as the body stream gave it.
        multer::Error::StreamReadFailed(_) => match e.source() {
            Some(cause) => upload_failed(cause),
            None => upload_failed(e),
        },
        e => upload_failed(e),
    }
}

/// A part's name and, for the file part, its file name, from a
/// `Content-Disposition: form-data; name="…"[; filename="…"]` that multer
/// parsed.
fn disposition(part: &multer::Field<'_>) -> Result<(String, Option<String>), ApiError> {
    let value = part
        .headers()
        .get(CONTENT_DISPOSITION)
        .ok_or_else(|| upload_failed("a multipart part without Content-Disposition"))?;
    let value = String::from_utf8_lossy(value.as_bytes());
    let kind = value.split(';').next().unwrap_or_default().trim();
    if kind != "form-data" {
        return Err(ApiError::proxy(
            501,
            format!("wrong Content-Disposition '{kind}' in multipart, expected 'form-data'"),
        ));
    }
    let name = part
        .name()
        .ok_or_else(|| upload_failed("a multipart part without a name"))?;
    Ok((name.to_string(), part.file_name().map(str::to_string)))
}

/// A plain field's value, untrimmed.
async fn field_value(part: &mut multer::Field<'_>, name: &str) -> Result<String, ApiError> {
    let mut value = Vec::new();
    while let Some(chunk) = part.chunk().await.map_err(unreadable)? {
        if value.len() + chunk.len() > MAX_FIELD {
            return Err(upload_failed(format!("field '{name}' too large")));
        }
        value.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&value).into_owned())
}

/// The announced length: pveproxy takes no upload without one, nor a
/// chunked one; the simulator none beyond `max`. hyper stops the body at
/// this length, so it bounds what is read.
fn body_length(headers: &HeaderMap, max: u64) -> Result<u64, ApiError> {
    if headers.contains_key(TRANSFER_ENCODING) {
        return Err(ApiError::proxy(
            501,
            "chunked transfer encoding not supported",
        ));
    }
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            ApiError::proxy(501, "upload without content length header not supported")
        })?;
    if length > max {
        return Err(ApiError::proxy(413, "request too large"));
    }
    Ok(length)
}

/// Before an early refusal a small body is read to its end: a client
/// still sending it then reads the answer instead of a connection reset.
/// A large one is left unread, as pveproxy leaves it.
async fn read_small(body: Body) {
    let _ = axum::body::to_bytes(body, SMALL_BODY).await;
}

/// A checked upload: what the task needs.
struct Job {
    content: String,
    /// The normalised file name.
    name: String,
    dest: PathBuf,
    /// `dest` as the node would show it.
    shown: String,
    /// (expected hex as given, algorithm)
    checksum: Option<(String, String)>,
}

/// Where an upload goes, and its query string's parameters.
struct Target<'a> {
    api: &'a Api,
    node: &'a str,
    storage: &'a str,
    query: Params,
}

impl Target<'_> {
    /// Reads the body to its end: the file spooled, or why it is refused.
    async fn receive(&self, boundary: &str, body: Body) -> Result<Spool, ApiError> {
        read_upload(boundary, body, |fields, filename| {
            self.open(fields, filename)
        })
        .await
    }

    /// The spool for the file part, or the refusal the body ends with.
    fn open(&self, fields: &[(String, String)], filename: &str) -> Sink {
        match self.job(fields, filename).and_then(Spool::create) {
            Ok(spool) => Sink::Spool(Box::new(spool)),
            Err(e) => Sink::Discard(e),
        }
    }

    /// The parameters checked in Proxmox's order: the schema, the
    /// storage, the name's extension, the storage's content types.
    fn job(&self, fields: &[(String, String)], filename: &str) -> Result<Job, ApiError> {
        let mut pairs = fields.to_vec();
        pairs.push(("filename".to_string(), filename.trim().to_string()));
        let params = self.query.clone().overridden_by(Params::from_pairs(pairs));
        if let Some(unknown) = params.keys().find(|k| !KNOWN.contains(k)) {
            return Err(ApiError::param(
                unknown,
                "property is not defined in schema and the schema does not allow additional properties",
            ));
        }
        let content = content_param(&params)?;
        let raw = params.required("filename")?;
        if raw.chars().count() > 255 {
            return Err(ApiError::param(
                "filename",
                "value may only be 255 characters long",
            ));
        }
        let checksum = checksum_params(&params)?;
        let st = self.storage_config()?;
        let name = normalize_filename(raw);
        let sub = content_subdir(&content, &name)?;
        if !has_content(&st.content, &content) {
            return Err(ApiError::new(
                500,
                format!(
                    "storage '{}' does not support '{content}' content",
                    self.storage
                ),
            ));
        }
        let dest = self
            .api
            .content_dir(self.node, self.storage, sub)
            .join(&name);
        Ok(Job {
            shown: shown_path(&st.kind, self.storage, sub, &name),
            dest,
            content,
            name,
            checksum,
        })
    }

    /// Proxmox's `storage_check_enabled`, and a path to write to.
    fn storage_config(&self) -> Result<SimStorage, ApiError> {
        let storage = self.storage;
        let st = self
            .api
            .sim
            .read(|s| s.storage(storage).cloned())
            .ok_or_else(|| ApiError::new(500, format!("storage '{storage}' does not exist")))?;
        if !st.enabled {
            return Err(ApiError::new(
                500,
                format!("storage '{storage}' is disabled"),
            ));
        }
        if !st.is_file_based() {
            return Err(ApiError::new(
                500,
                format!("can't upload to storage type '{}'", st.kind),
            ));
        }
        Ok(st)
    }
}

/// Reads an upload's body: the plain fields first, then one file part
/// named `filename`, which goes where `open` says once the fields are
/// known, then the closing delimiter.
async fn read_upload(
    boundary: &str,
    body: Body,
    mut open: impl FnMut(&[(String, String)], &str) -> Sink,
) -> Result<Spool, ApiError> {
    let mut form = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut fields = Vec::new();
    let mut sink = Sink::Waiting;
    while let Some(mut part) = form.next_field().await.map_err(unreadable)? {
        if !matches!(sink, Sink::Waiting) {
            return Err(upload_failed("a part after the file part"));
        }
        match disposition(&part)? {
            (name, None) => {
                let value = field_value(&mut part, &name).await?;
                // pveproxy trims the fields.
                fields.push((name, value.trim().to_string()));
            }
            (name, Some(_)) if name != "filename" => {
                return Err(ApiError::proxy(
                    501,
                    format!("wrong field name '{name}' for file upload, expected 'filename'"),
                ));
            }
            (_, Some(filename)) => {
                sink = open(&fields, &filename);
                while let Some(bytes) = part.chunk().await.map_err(unreadable)? {
                    sink.write(&bytes).await?;
                }
            }
        }
    }
    sink.finish().await
}

/// The content's directory in the storage, once the name has an
/// extension that content may have (Storage.pm's `*_EXT_RE`).
fn content_subdir(content: &str, name: &str) -> Result<&'static str, ApiError> {
    let lower = name.to_ascii_lowercase();
    // At least one character before the extension, as `[^/]+\.iso` asks.
    let ends_in = |exts: &[&str]| {
        exts.iter()
            .any(|e| lower.len() > e.len() && lower.ends_with(e))
    };
    match content {
        "iso" if ends_in(&[".iso", ".img"]) => Ok("template/iso"),
        "vztmpl" if ends_in(&[".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]) => {
            Ok("template/cache")
        }
        "import" if valid_filename(name) => Ok("import"),
        "import" => Err(ApiError::param(
            "filename",
            "invalid filename or wrong extension",
        )),
        _ => Err(ApiError::param("filename", "wrong file extension")),
    }
}

/// Where the file part goes while it arrives.
enum Sink {
    /// No file part yet.
    Waiting,
    Spool(Box<Spool>),
    /// The upload is refused; the rest of the body is read and dropped.
    Discard(ApiError),
}

impl Sink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        match self {
            Sink::Spool(spool) => spool.write(bytes).await,
            Sink::Waiting | Sink::Discard(_) => Ok(()),
        }
    }

    async fn finish(self) -> Result<Spool, ApiError> {
        match self {
            Sink::Spool(mut spool) => {
                spool
                    .file
                    .flush()
                    .await
                    .map_err(|e| spool.write_failed(&e))?;
                Ok(*spool)
            }
            Sink::Discard(e) => Err(e),
            Sink::Waiting => Err(upload_failed("no file part")),
        }
    }
}

/// The file part being written: a hidden file beside its destination, so
/// the task's move is a rename; removed when dropped, so a refused or
/// failed upload leaves nothing behind.
struct Spool {
    job: Job,
    file: tokio::io::BufWriter<tokio::fs::File>,
    temp: tempfile::TempPath,
    /// pveproxy's name for it, for the log.
    shown_temp: String,
    size: u64,
    /// The digest as the bytes go by: an image is not read twice.
    hasher: Option<Hasher>,
}

impl Spool {
    fn create(job: Job) -> Result<Spool, ApiError> {
        let dir = job.dest.parent().map(PathBuf::from).unwrap_or_default();
        let created = std::fs::create_dir_all(&dir).and_then(|()| {
            tempfile::Builder::new()
                .prefix(".pveupload-")
                .tempfile_in(&dir)
        });
        let (file, temp) = created
            .map_err(|e| {
                ApiError::proxy(
                    501,
                    format!(
                        "unable to create temporary upload file in '{}' - {e}",
                        dir.display()
                    ),
                )
            })?
            .into_parts();
        // pveproxy spools to /var/tmp/pveupload-<random>.
        let random = temp
            .file_name()
            .map(|n| n.to_string_lossy().replace(".pveupload-", ""))
            .unwrap_or_default();
        let hasher = job
            .checksum
            .as_ref()
            .and_then(|(_, algo)| Hasher::new(algo));
        Ok(Spool {
            job,
            file: tokio::io::BufWriter::with_capacity(
                WRITE_BUFFER,
                tokio::fs::File::from_std(file),
            ),
            temp,
            shown_temp: format!("/var/tmp/pveupload-{random}"),
            size: 0,
            hasher,
        })
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        self.file
            .write_all(bytes)
            .await
            .map_err(|e| self.write_failed(&e))?;
        if let Some(hasher) = &mut self.hasher {
            hasher.update(bytes);
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn write_failed(&self, e: &std::io::Error) -> ApiError {
        ApiError::proxy(
            501,
            format!(
                "write to temporary file failed - {}: {e}",
                self.temp.display()
            ),
        )
    }
}

/// Records the upload and starts its `imgcopy` task (Proxmox gives it no
/// id). Its UPID.
fn start(api: &Arc<Api>, node: &str, storage: &str, spool: Spool) -> Upid {
    let command = format!(
        "pvesh create /nodes/{node}/storage/{storage}/upload --content {} --filename {}",
        spool.job.content, spool.job.name
    );
    api.sim.record(&command);
    let task_api = api.clone();
    let node = node.to_string();
    api.tasks.spawn(
        api.tasks.upid(&node, "imgcopy", ""),
        move |log| async move {
            let copy = ImgCopy {
                api: &task_api,
                log: &log,
                command: &command,
                node: &node,
            };
            copy.run(spool).await
        },
    )
}

/// The `imgcopy` worker: checksum, then the spooled file into place.
struct ImgCopy<'a> {
    api: &'a Api,
    log: &'a TaskLog,
    command: &'a str,
    node: &'a str,
}

impl ImgCopy<'_> {
    fn fail(&self, message: impl Into<String>) -> PveError {
        PveError::command(self.command, message, 255)
    }

    /// On any error the spool is dropped, and with it the file.
    async fn run(&self, spool: Spool) -> Result<(), PveError> {
        self.api.sim.fault("upload", None, self.command).await?;
        let Spool {
            job,
            file,
            temp,
            shown_temp,
            size,
            hasher,
        } = spool;
        drop(file);
        // Best effort, as Proxmox's own chmod: readable like a downloaded file.
        let _ = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644));
        self.log
            .line(&format!("starting file import from: {shown_temp}"));
        self.verify(&job, hasher)?;
        self.log.line(&format!("target node: {}", self.node));
        self.log.line(&format!("target file: {}", job.shown));
        self.log.line(&format!("file size is: {size}"));
        self.log
            .line(&format!("command: cp -- {shown_temp} {}", job.shown));
        // Proxmox's upload replaces a file of the same name.
        temp.persist(&job.dest)
            .map_err(|e| self.fail(format!("import failed: {}: {e}", job.dest.display())))?;
        self.log.line("finished file import successfully");
        Ok(())
    }

    fn verify(&self, job: &Job, hasher: Option<Hasher>) -> Result<(), PveError> {
        let Some((want, algo)) = &job.checksum else {
            return Ok(());
        };
        let got = hasher
            .map(Hasher::hex)
            .ok_or_else(|| self.fail(format!("checksum algorithm '{algo}' is not simulated")))?;
        if got.eq_ignore_ascii_case(want) {
            self.log
                .line("calculating checksum...OK, checksum verified");
            return Ok(());
        }
        // Proxmox ends the line it began, so that the error is the last one.
        self.log.line("calculating checksum...");
        Err(self.fail(format!("checksum mismatch: got '{got}' != expect '{want}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(axum::http::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    const BOUNDARY: &str = "pvedeck-00c0ffee12345678";

    /// A body as pvedeck's client sends it: the fields, then the file.
    fn body(fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in fields {
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        if let Some((name, data)) = file {
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{name}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            out.extend_from_slice(data);
        }
        out.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
        out
    }

    #[derive(Debug, PartialEq, Eq)]
    struct Parsed {
        fields: Vec<(String, String)>,
        filename: String,
        data: Vec<u8>,
    }

    /// `body` read in the pieces `cuts` makes of it, the file spooled in
    /// a temporary directory.
    async fn read(body: &[u8], cuts: &[usize]) -> Result<Parsed, ApiError> {
        let dir = tempfile::tempdir().unwrap();
        let mut chunks = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&body.len()]) {
            chunks.push(Ok::<_, std::io::Error>(body[from..cut].to_vec()));
            from = cut;
        }
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        let seen = std::cell::RefCell::new((Vec::new(), String::new()));
        let spool = read_upload(BOUNDARY, body, |fields, filename| {
            *seen.borrow_mut() = (fields.to_vec(), filename.to_string());
            let job = Job {
                content: "import".into(),
                name: "a.qcow2".into(),
                dest: dir.path().join("a.qcow2"),
                shown: "local:import/a.qcow2".into(),
                checksum: None,
            };
            Sink::Spool(Box::new(Spool::create(job).unwrap()))
        })
        .await?;
        let data = std::fs::read(&spool.temp).unwrap();
        assert_eq!(spool.size, data.len() as u64);
        let (fields, filename) = seen.into_inner();
        Ok(Parsed {
            fields,
            filename,
            data,
        })
    }

    /// Image bytes that look like beginnings of the delimiter.
    fn tricky_data() -> Vec<u8> {
        let mut data = b"QFI\xfb\r\n--pvedeck-00c0ffee1234567\r\n\r\n-".to_vec();
        data.extend_from_slice(b"\r\n-pvedeck\r\r\n--pvedeck-00c0ffee123456 \r\n--");
        data.extend((0..=255u8).cycle().take(600));
        data.extend_from_slice(b"\r\n--");
        data
    }

    #[tokio::test]
    async fn a_delimiter_split_at_any_chunk_position_is_found() {
        let data = tricky_data();
        let fields = [("content", "import"), ("checksum-algorithm", " sha256 ")];
        let body = body(&fields, Some(("debian 12.qcow2", &data)));
        let expected = Parsed {
            fields: vec![
                ("content".into(), "import".into()),
                ("checksum-algorithm".into(), "sha256".into()),
            ],
            filename: "debian 12.qcow2".to_string(),
            data: data.clone(),
        };
        for cut in 0..=body.len() {
            assert_eq!(read(&body, &[cut]).await.unwrap(), expected, "cut at {cut}");
        }
        let every_byte: Vec<usize> = (1..body.len()).collect();
        assert_eq!(read(&body, &every_byte).await.unwrap(), expected);
        for size in [2, 3, 7, 29, 64] {
            let cuts: Vec<usize> = (size..body.len()).step_by(size).collect();
            assert_eq!(
                read(&body, &cuts).await.unwrap(),
                expected,
                "chunks of {size}"
            );
        }
    }

    fn refusal(result: Result<Parsed, ApiError>) -> (u16, String) {
        let e = result.unwrap_err();
        (e.status, e.message)
    }

    #[tokio::test]
    async fn a_body_without_its_file_part_is_refused() {
        let body = body(&[("content", "import")], None);
        assert_eq!(
            refusal(read(&body, &[10]).await),
            (501, "upload failed - no file part".to_string())
        );
        let wrong = String::from_utf8(self::body(&[], Some(("a.qcow2", b"x"))))
            .unwrap()
            .replace("name=\"filename\"", "name=\"file\"");
        assert_eq!(
            refusal(read(wrong.as_bytes(), &[]).await),
            (
                501,
                "wrong field name 'file' for file upload, expected 'filename'".to_string()
            )
        );
        assert_eq!(
            refusal(read(b"no delimiter at all", &[]).await),
            (
                501,
                "upload failed - the body ends before the closing delimiter".to_string()
            )
        );
    }

    #[tokio::test]
    async fn a_body_without_its_closing_delimiter_is_refused() {
        let full = body(&[("content", "import")], Some(("a.qcow2", &tricky_data())));
        let closing = format!("\r\n--{BOUNDARY}--\r\n").len();
        for cut in [full.len() - closing, full.len() - 3, 60] {
            let (status, message) = refusal(read(&full[..cut], &[]).await);
            assert_eq!(
                (status, message.as_str()),
                (
                    501,
                    "upload failed - the body ends before the closing delimiter"
                ),
                "cut {cut}"
            );
        }
        // A further part after the file is not taken either.
        let mut extra = full[..full.len() - closing].to_vec();
        extra.extend_from_slice(b"\r\n");
        extra.extend_from_slice(&body(&[("checksum", "ab")], None));
        assert_eq!(
            refusal(read(&extra, &[]).await),
            (
                501,
                "upload failed - a part after the file part".to_string()
            )
        );
    }

    #[tokio::test]
    async fn a_field_is_short_and_a_part_is_form_data() {
        let long = "x".repeat(MAX_FIELD + 1);
        let body1 = body(&[("checksum", &long)], Some(("a.qcow2", b"x")));
        assert_eq!(
            refusal(read(&body1, &[]).await),
            (
                501,
                "upload failed - field 'checksum' too large".to_string()
            )
        );
        let attachment = String::from_utf8(body(&[("content", "import")], None))
            .unwrap()
            .replace("form-data; name", "attachment; name");
        assert_eq!(
            refusal(read(attachment.as_bytes(), &[]).await),
            (
                501,
                "wrong Content-Disposition 'attachment' in multipart, expected 'form-data'"
                    .to_string()
            )
        );
    }

    #[test]
    fn the_boundary_and_length_are_read_as_pveproxy_reads_them() {
        let h = headers(&[(CONTENT_TYPE, "multipart/form-data; boundary=pvedeck-1f")]);
        assert_eq!(boundary(&h).unwrap(), "pvedeck-1f");
        let quoted = headers(&[(CONTENT_TYPE, "multipart/form-data; boundary=\"a b\"")]);
        assert_eq!(boundary(&quoted).unwrap(), "a b");
        let form = headers(&[(CONTENT_TYPE, "application/x-www-form-urlencoded")]);
        let e = boundary(&form).unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (
                501,
                "upload 'Content-Type 'application/x-www-form-urlencoded' not implemented"
            )
        );
        assert_eq!(body_length(&headers(&[(CONTENT_LENGTH, "10")]), 10), Ok(10));
        assert_eq!(
            body_length(&headers(&[(CONTENT_LENGTH, "11")]), 10)
                .unwrap_err()
                .status,
            413
        );
        assert_eq!(body_length(&HeaderMap::new(), 10).unwrap_err().status, 501);
        let chunked = headers(&[(TRANSFER_ENCODING, "chunked")]);
        assert_eq!(body_length(&chunked, 10).unwrap_err().status, 501);
    }

    #[test]
    fn names_need_their_contents_extension() {
        assert_eq!(content_subdir("import", "d.qcow2"), Ok("import"));
        assert_eq!(content_subdir("iso", "d.ISO"), Ok("template/iso"));
        assert_eq!(content_subdir("vztmpl", "d.tar.zst"), Ok("template/cache"));
        let e = content_subdir("import", "noble.img").unwrap_err();
        assert_eq!(e.errors["filename"], "invalid filename or wrong extension");
        let e = content_subdir("iso", ".iso").unwrap_err();
        assert_eq!(e.errors["filename"], "wrong file extension");
        assert_eq!(
            normalize_filename("C:\\img\\my disk.qcow2"),
            "my_disk.qcow2"
        );
        assert_eq!(normalize_filename("../a+b.raw"), "a_b.raw");
    }
}
