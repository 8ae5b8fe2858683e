//! The image cache against the mirror's published checksums (docs/security.md#images),
//! with a loopback mirror whose image and `SHA512SUMS` each test
//! sets: a download that does not match fails `OS preparation` and is not
//! kept, a cached image is checked again when the mirror's checksum changes,
//! a link at the image's name is not followed, a mirror without checksums
//! fails the install unless `IMAGE_VERIFY_<OS>=none` (then it is used
//! unverified, and says so), one that fails to give them fails the step.
//!
//! Images fail closed: the attacks `pvedeck-sim mirror` stages — no list,
//! a list without or with a wrong signature, a qcow2 naming a backing file
//! or an external data file, a mirror that trickles — each end the install
//! before anything is imported, on every lane; on the api lane also where
//! the node fetches the image itself.

mod common;

use std::path::PathBuf;

use common::mirror::{Mirror, SimMirror, Sums, sim_keyring};
use common::{Server, Sse, install};

const DEBIAN: &str = r#"{"os":"debian","version":"12"}"#;
const FILE: &str = "debian-12-generic-amd64.qcow2";
const VERIFYING: &str = "OS preparation > verifying OS image";

/// A server with pvedeck's own image cache: on the api lane, that of
/// `IMAGE_FETCH=upload` (the node's own download is `tests/api_backend.rs`').
async fn server_for(mirror: &Mirror) -> Server {
    common::server(&[
        ("IMAGE_BASE_DEBIAN", mirror.base.as_str()),
        ("IMAGE_FETCH", "upload"),
    ])
    .await
}

struct Outcome {
    events: Vec<Sse>,
    job: serde_json::Value,
}

impl Outcome {
    fn messages(&self, step: &str) -> Vec<&str> {
        self.events
            .iter()
            .filter(|e| e.step() == step)
            .map(Sse::message)
            .collect()
    }

    fn has_step(&self, step: &str) -> bool {
        self.events.iter().any(|e| e.step() == step)
    }

    fn error(&self) -> &Sse {
        self.events
            .iter()
            .find(|e| e.status() == "error")
            .unwrap_or_else(|| panic!("an error event in {:#?}", self.events))
    }

    fn assert_succeeded(&self) {
        assert_eq!(self.job["state"], "succeeded", "{:#?}", self.events);
    }
}

async fn run(server: &Server) -> Outcome {
    let (job, events) = install(&server.url, DEBIAN).await;
    let job = common::json(&format!("{}/api/jobs/{job}", server.url)).await;
    Outcome { events, job }
}

fn cache_dir(server: &Server) -> PathBuf {
    server.data_dir.join("images")
}

fn cached(server: &Server) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache_dir(server))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The image's path in the cache, whose directory exists (0700).
fn image_path(server: &Server) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = cache_dir(server);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    dir.join(FILE)
}

/// Puts `content` at the image's name in the cache, as an earlier pvedeck
/// (which kept no record) or a disk error would have left it.
fn plant(server: &Server, content: &[u8]) {
    std::fs::write(image_path(server), content).unwrap();
}

async fn created_a_vm(server: &Server) -> bool {
    common::commands(server)
        .await
        .iter()
        .any(|c| c.starts_with("qm create"))
}

fn starts_with(messages: &[&str], start: &str) -> bool {
    messages.iter().any(|m| m.starts_with(start))
}

#[tokio::test]
async fn a_download_that_does_not_match_the_mirror_s_checksum_fails_and_is_deleted() {
    let mirror = Mirror::start(common::qcow2(1), Sums::Of(common::qcow2(2))).await;
    let server = server_for(&mirror).await;
    // A cached image from before the mirror changed goes as well.
    plant(&server, &common::qcow2(3));
    let out = run(&server).await;

    let error = out.error();
    assert_eq!(error.step(), VERIFYING);
    let start = format!(
        "[-] OS image does not match the SHA-512 published at {} (expected ",
        mirror.list_url()
    );
    assert!(error.message().starts_with(&start), "{}", error.message());
    assert!(error.message().ends_with("; the file was deleted"));
    assert!(out.events.last().is_some_and(Sse::is_close));
    assert_eq!(out.job["state"], "failed");
    assert_eq!(out.job["failed_step"], VERIFYING);
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&server).await, "no VM was created");
    assert!(out.has_step("OS preparation > downloading OS image"));
    assert!(starts_with(
        &out.messages(VERIFYING),
        "[*] cached OS image does not match the SHA-512 published at"
    ));
    assert_eq!(
        cached(&server),
        Vec::<String>::new(),
        "nothing stays in the cache"
    );
}

#[tokio::test]
async fn a_cached_image_is_checked_again_when_the_mirror_s_checksum_changes() {
    let (old, new) = (common::qcow2(1), common::qcow2(2));
    let mirror = Mirror::start(old.clone(), Sums::Of(old.clone())).await;
    let server = server_for(&mirror).await;
    let matches = format!(
        "[+] OS image matches the SHA-512 published at {}",
        mirror.list_url()
    );

    let first = run(&server).await;
    first.assert_succeeded();
    assert!(first.has_step("OS preparation > downloading OS image"));
    assert!(starts_with(&first.messages(VERIFYING), &matches));
    assert_eq!(
        cached(&server),
        [FILE.to_string(), format!("{FILE}.sha512")]
    );

    // Same checksum at the mirror: the record vouches, no download.
    let second = run(&server).await;
    second.assert_succeeded();
    assert!(starts_with(
        &second.messages(VERIFYING),
        &format!(
            "[+] OS image verified earlier against the SHA-512 published at {}",
            mirror.list_url()
        )
    ));
    assert!(second.has_step("OS preparation > using OS image"));
    assert!(!second.has_step("OS preparation > downloading OS image"));

    // The mirror publishes a new image: the cached one is checked, found
    // old, replaced by the new one, which is checked in turn.
    mirror.set(new.clone(), Sums::Of(new.clone()));
    let third = run(&server).await;
    third.assert_succeeded();
    let verifying = third.messages(VERIFYING);
    assert!(starts_with(
        &verifying,
        "[*] cached OS image does not match the SHA-512 published at"
    ));
    assert!(third.has_step("OS preparation > downloading OS image"));
    assert!(starts_with(&verifying, &matches));
    assert!(!third.has_step("OS preparation > using OS image"));
    assert_eq!(std::fs::read(cache_dir(&server).join(FILE)).unwrap(), new);
    let record = std::fs::read_to_string(cache_dir(&server).join(format!("{FILE}.sha512")));
    assert_eq!(
        record.unwrap(),
        common::checksum_list("SHA512SUMS", &new)
            .unwrap()
            .lines()
            .find(|l| l.ends_with(FILE))
            .map(|l| format!("{l}\n"))
            .unwrap()
    );
}

#[tokio::test]
async fn a_cached_image_without_a_record_is_hashed_and_kept_when_it_matches() {
    let image = common::qcow2(1);
    let mirror = Mirror::start(common::qcow2(9), Sums::Of(image.clone())).await;
    let server = server_for(&mirror).await;
    // The mirror would serve another image: only the cached one can pass.
    plant(&server, &image);
    let out = run(&server).await;
    out.assert_succeeded();
    assert!(starts_with(
        &out.messages(VERIFYING),
        &format!(
            "[+] OS image matches the SHA-512 published at {}",
            mirror.list_url()
        )
    ));
    assert!(!out.has_step("OS preparation > downloading OS image"));
    assert_eq!(
        cached(&server),
        [FILE.to_string(), format!("{FILE}.sha512")]
    );
}

#[tokio::test]
async fn a_link_at_the_image_s_name_is_not_followed() {
    let image = common::qcow2(1);
    let mirror = Mirror::start(image.clone(), Sums::Of(image.clone())).await;
    let server = server_for(&mirror).await;
    let path = image_path(&server);
    // It points at a file that would even pass the check.
    let elsewhere = common::temp_dir("planted").join("image.qcow2");
    std::fs::write(&elsewhere, &image).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();

    let out = run(&server).await;
    out.assert_succeeded();
    assert!(
        out.messages(VERIFYING).contains(
            &format!(
                "[*] {} is a symbolic link: not trusted, the download replaces it",
                path.display()
            )
            .as_str()
        )
    );
    assert!(out.has_step("OS preparation > downloading OS image"));
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_file(), "the link was replaced");
    assert_eq!(
        std::fs::read(&elsewhere).unwrap(),
        image,
        "its target untouched"
    );
}

#[tokio::test]
async fn a_mirror_without_checksums_is_used_unverified_when_the_admin_says_so() {
    let mirror = Mirror::start(common::qcow2(1), Sums::Status(404)).await;
    let server = common::server(&[
        ("IMAGE_BASE_DEBIAN", mirror.base.as_str()),
        ("IMAGE_FETCH", "upload"),
        ("IMAGE_VERIFY_DEBIAN", "none"),
    ])
    .await;
    let out = run(&server).await;
    out.assert_succeeded();
    let note = format!(
        "[*] no checksum published at {}; image not verified",
        mirror.list_url()
    );
    assert!(
        starts_with(&out.messages(VERIFYING), &note),
        "{:#?}",
        out.events
    );
    assert_eq!(cached(&server), [FILE], "no record of a checksum");
}

#[tokio::test]
async fn a_mirror_that_fails_to_give_its_checksums_fails_the_step() {
    let mirror = Mirror::start(common::qcow2(1), Sums::Status(503)).await;
    let server = server_for(&mirror).await;
    let out = run(&server).await;
    let error = out.error();
    assert_eq!(error.step(), VERIFYING);
    let list = mirror.list_url();
    assert_eq!(
        error.message(),
        format!("[-] cannot get the OS image checksums from {list}: GET {list} answered 503")
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&server).await);
    assert!(!out.has_step("OS preparation > downloading OS image"));
    assert_eq!(cached(&server), Vec::<String>::new());
}

/// A server whose Debian images come from `base` (pvedeck's own cache on
/// every lane: `IMAGE_FETCH=upload` on the api lane), with `vars` over it.
async fn server_over(base: &str, vars: &[(&str, &str)]) -> Server {
    let mut all = vec![("IMAGE_BASE_DEBIAN", base), ("IMAGE_FETCH", "upload")];
    all.extend_from_slice(vars);
    common::server(&all).await
}

/// The install failed at `step` with `message` (its start), before any VM
/// was made, and left nothing in the cache.
async fn assert_refused(server: &Server, out: &Outcome, step: &str, message: &str) {
    let error = out.error();
    assert_eq!(error.step(), step, "{:#?}", out.events);
    assert!(
        error.message().starts_with(message),
        "{}\nwanted: {message}",
        error.message()
    );
    assert_eq!(out.job["state"], "failed");
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(server).await, "no VM was created");
    let left: Vec<String> = cached(server)
        .into_iter()
        .filter(|f| f.starts_with(".part-") || f.starts_with(FILE))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "nothing stays in the cache");
}

#[tokio::test]
async fn a_mirror_without_checksums_fails_the_install_naming_the_list() {
    let mirror = SimMirror::start();
    let base = mirror.base("no-list");
    let server = server_over(&base, &[]).await;
    let out = run(&server).await;
    let message = format!(
        "[-] no checksum list at {base}/SHA512SUMS: the image cannot be verified (set \
         IMAGE_VERIFY_DEBIAN=none to use images without one)"
    );
    assert_refused(&server, &out, VERIFYING, &message).await;
    assert!(!out.has_step("OS preparation > downloading OS image"));
}

#[tokio::test]
async fn a_signed_list_passes_with_the_admin_s_keyring() {
    let mirror = SimMirror::start();
    let base = mirror.base("img");
    let keyring = sim_keyring();
    let keyring = keyring.to_string_lossy();
    let server = server_over(&base, &[("IMAGE_KEYRING_DEBIAN", &keyring)]).await;
    let out = run(&server).await;
    out.assert_succeeded();
    let signed = format!("[*] checksum list {base}/SHA512SUMS signed by key ");
    assert!(
        starts_with(&out.messages(VERIFYING), &signed),
        "{:#?}",
        out.events
    );
}

#[tokio::test]
async fn a_list_signed_by_another_key_is_refused() {
    let mirror = SimMirror::start();
    let base = mirror.base("bad-signature");
    let keyring = sim_keyring();
    let ring = keyring.to_string_lossy();
    let server = server_over(&base, &[("IMAGE_KEYRING_DEBIAN", &ring)]).await;
    let out = run(&server).await;
    let message = format!(
        "[-] the checksum list {base}/SHA512SUMS is refused: its signature {base}/SHA512SUMS.sign: \
         it was made by "
    );
    assert_refused(&server, &out, VERIFYING, &message).await;
    assert!(
        out.error()
            .message()
            .ends_with(&format!("which is not in the keyring {ring}")),
        "{}",
        out.error().message()
    );
}

#[tokio::test]
async fn a_list_without_a_signature_is_refused_when_a_keyring_is_set() {
    let mirror = SimMirror::start();
    let base = mirror.base("no-signature");
    let keyring = sim_keyring();
    let ring = keyring.to_string_lossy();
    let server = server_over(&base, &[("IMAGE_KEYRING_DEBIAN", &ring)]).await;
    let out = run(&server).await;
    let message = format!(
        "[-] the checksum list {base}/SHA512SUMS is not signed (nothing at \
         {base}/SHA512SUMS.sign), and IMAGE_KEYRING_DEBIAN asks for a signature"
    );
    assert_refused(&server, &out, VERIFYING, &message).await;
}

#[tokio::test]
async fn a_qcow2_that_links_other_files_is_refused_before_import() {
    let mirror = SimMirror::start();
    for (fault, why) in [
        ("backing-file", "it names a backing file"),
        ("data-file", "it names an external data file"),
    ] {
        let base = mirror.base(fault);
        // The list and its signature vouch for the image: only its
        // header gives it away.
        let keyring = sim_keyring();
        let ring = keyring.to_string_lossy();
        let server = server_over(&base, &[("IMAGE_KEYRING_DEBIAN", &ring)]).await;
        let out = run(&server).await;
        let message = format!("[-] OS image {base}/{FILE} is refused before import: {why}");
        assert_refused(&server, &out, VERIFYING, &message).await;
        assert!(starts_with(&out.messages(VERIFYING), "[*] checksum list "));
    }
}

#[tokio::test]
async fn a_trickling_mirror_is_ended_by_the_download_deadline() {
    let mirror = SimMirror::start();
    let base = mirror.base("trickle");
    let server = server_over(&base, &[("IMAGE_DOWNLOAD_TIMEOUT_SECS", "2")]).await;
    let message = "[-] failed to download OS image: not complete within \
                   IMAGE_DOWNLOAD_TIMEOUT_SECS (2s)";
    let out = run(&server).await;
    assert_refused(
        &server,
        &out,
        "OS preparation > downloading OS image",
        message,
    )
    .await;
    // The image's slot is free again: the next install gets as far.
    let again = run(&server).await;
    assert_refused(
        &server,
        &again,
        "OS preparation > downloading OS image",
        message,
    )
    .await;
}

#[tokio::test]
async fn a_node_s_own_download_of_a_linked_qcow2_is_refused_before_it_starts() {
    if common::lane() != common::Lane::Api {
        return;
    }
    let mirror = SimMirror::start();
    let base = mirror.base("backing-file");
    let server = common::server(&[("IMAGE_BASE_DEBIAN", base.as_str())]).await;
    let out = run(&server).await;
    let message =
        format!("[-] OS image {base}/{FILE} is refused before import: it names a backing file");
    assert_refused(&server, &out, VERIFYING, &message).await;
    let commands = common::commands(&server).await;
    assert!(
        !commands.iter().any(|c| c.contains("download-url")),
        "the node was not asked: {commands:#?}"
    );
}

#[tokio::test]
async fn a_node_s_trickling_download_is_stopped_at_the_deadline() {
    if common::lane() != common::Lane::Api {
        return;
    }
    let mirror = SimMirror::start();
    let base = mirror.base("trickle");
    let server = common::server(&[
        ("IMAGE_BASE_DEBIAN", base.as_str()),
        ("IMAGE_DOWNLOAD_TIMEOUT_SECS", "2"),
    ])
    .await;
    let out = run(&server).await;
    let message = "[-] failed to download OS image: the download on node pve1 did not complete \
                   within IMAGE_DOWNLOAD_TIMEOUT_SECS (2s); its task was stopped";
    assert_refused(
        &server,
        &out,
        "OS preparation > downloading OS image",
        message,
    )
    .await;
    let commands = common::commands(&server).await;
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("pvesh delete /nodes/pve1/tasks/UPID:")),
        "{commands:#?}"
    );
    // Nothing half-downloaded stays in the node's import storage.
    let import = server.data_dir.join("sim/storage/pve1/local/import");
    let left: Vec<_> = std::fs::read_dir(&import)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(left, Vec::<std::ffi::OsString>::new());
}
