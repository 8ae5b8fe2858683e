//! The image cache against the mirror's published checksums (docs/security.md#images),
//! with a loopback mirror whose image and `SHA512SUMS` each test
//! sets: a download that does not match fails `OS preparation` and is not
//! kept, a cached image is checked again when the mirror's checksum changes,
//! a link at the image's name is not followed, a mirror without checksums is
//! used unverified (and says so), one that fails to give them fails the step.

mod common;

use std::path::PathBuf;

use common::mirror::{Mirror, Sums};
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
async fn a_mirror_without_checksums_is_used_unverified_and_says_so() {
    let mirror = Mirror::start(common::qcow2(1), Sums::Status(404)).await;
    let server = server_for(&mirror).await;
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
