//! The failure contract (docs/provisioning.md#failure-contract), row by row,
//! with faults injected into the simulated cluster: which failures leave no
//! VM, which destroy the half-made one, which keep it.

mod common;

use common::{Sse, install};

const DEBIAN: &str = r#"{"os":"debian","version":"12"}"#;

struct Outcome {
    events: Vec<Sse>,
    job: serde_json::Value,
}

impl Outcome {
    fn error(&self) -> &Sse {
        self.events
            .iter()
            .find(|e| e.status() == "error")
            .unwrap_or_else(|| panic!("an error event in {:#?}", self.events))
    }

    fn assert_failed_at(&self, step: &str, message_start: &str) {
        let error = self.error();
        assert_eq!(error.step(), step);
        assert!(
            error.message().starts_with(message_start),
            "'{}' should start with '{message_start}'",
            error.message()
        );
        assert!(self.events.last().is_some_and(Sse::is_close), "close last");
        assert_eq!(self.job["state"], "failed");
        assert_eq!(self.job["failed_step"], step);
    }
}

async fn run(url: &str, body: &str) -> Outcome {
    let (job, events) = install(url, body).await;
    let job = common::json(&format!("{url}/api/jobs/{job}")).await;
    Outcome { events, job }
}

async fn run_with_fault(fault: &str, body: &str) -> (common::Server, Outcome) {
    let server = common::server(&[]).await;
    common::fault(&server, fault).await;
    let outcome = run(&server.url, body).await;
    (server, outcome)
}

fn created_a_vm(commands: &[String]) -> bool {
    commands.iter().any(|c| c.starts_with("qm create"))
}

// --- preparation, image, SSH key, qm create: error and stop, no VM -------

#[tokio::test]
async fn preparation_failure_leaves_no_vm() {
    // `nas` is an NFS storage whose server is down: `pvesm status` says inactive.
    let server = common::server(&[("ASSIGN_STORAGE", "nas")]).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "preparation > checking storage pool",
        "[-] storage pool nas is inactive",
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&common::commands(&server).await));
}

#[tokio::test]
async fn a_storage_that_does_not_allow_disk_images_is_refused_before_anything_is_made() {
    // `iso` is an active `dir` storage, for ISO images and templates only.
    let server = common::server(&[("ASSIGN_STORAGE", "iso")]).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "preparation > checking storage pool",
        "[-] storage pool iso does not exist or does not allow disk images (content 'images')",
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&common::commands(&server).await));
}

#[tokio::test]
async fn an_image_larger_than_image_max_bytes_is_given_up_and_not_kept() {
    // pvedeck's own download (on the api lane, `IMAGE_FETCH=upload`'s).
    let server = common::server(&[("IMAGE_MAX_BYTES", "1000"), ("IMAGE_FETCH", "upload")]).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "OS preparation > downloading OS image",
        "[-] failed to download OS image: the image is larger than IMAGE_MAX_BYTES (1000 bytes)",
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&common::commands(&server).await));
    let cached: Vec<_> = std::fs::read_dir(server.data_dir.join("images"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "nothing left in the cache: {cached:?}");
}

#[tokio::test]
async fn image_failure_leaves_no_vm() {
    let images = common::image_server().await;
    let missing = format!("{images}/nothing-here");
    let server = common::server(&[("IMAGE_BASE_DEBIAN", missing.as_str())]).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "OS preparation > validating OS image URL",
        "[-] OS image URL is not accessible: HEAD",
    );
    assert!(out.error().message().ends_with("answered 404"));
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&common::commands(&server).await));
}

#[tokio::test]
async fn ssh_key_failure_leaves_no_vm() {
    let server = common::server(&[("SSH_KEY_DIR", "/proc/pvedeck-no-such-dir")]).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "SSH preparation > creating SSH key",
        "[-] failed to create SSH key: cannot create /proc/pvedeck-no-such-dir",
    );
    assert!(!created_a_vm(&common::commands(&server).await));
}

#[tokio::test]
async fn qm_create_failure_leaves_no_vm() {
    let (server, out) = run_with_fault(r#"{"op":"create","action":"fail"}"#, DEBIAN).await;
    out.assert_failed_at(
        "VM creation > creating VM",
        "[-] failed to create VM: unable to create VM 106",
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(common::vm(&server.url, 106).await.is_none());
}

// --- import, configuration, SSH initialization: the VM is destroyed ------

async fn assert_destroyed(server: &common::Server, out: &Outcome) {
    assert_eq!(out.job["outcome"], "destroyed");
    let cleanup: Vec<&str> = out
        .events
        .iter()
        .filter(|e| e.step() == "cleanup > destroying VM")
        .map(Sse::message)
        .collect();
    assert_eq!(cleanup.first(), Some(&"[*] stopping and destroying VM 106"));
    assert!(
        cleanup
            .last()
            .is_some_and(|m| m.starts_with("[+] VM 106 destroyed"))
    );
    let commands = common::commands(server).await;
    assert!(
        commands.iter().any(|c| c == "qm destroy 106"),
        "{commands:?}"
    );
    assert!(
        common::vm(&server.url, 106).await.is_none(),
        "no half-made VM is left"
    );
}

#[tokio::test]
async fn import_failure_destroys_the_vm() {
    let (server, out) = run_with_fault(r#"{"op":"importdisk","action":"fail"}"#, DEBIAN).await;
    out.assert_failed_at(
        "VM creation > importing disk image",
        "[-] failed to import disk image: qemu-img: error while writing",
    );
    assert_destroyed(&server, &out).await;
}

#[tokio::test]
async fn configuration_failure_destroys_the_vm() {
    let fault = r#"{"op":"set","action":"fail","message":"unable to parse drive options"}"#;
    let (server, out) = run_with_fault(fault, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > initializing configuration",
        "[-] failed to initialize VM: unable to parse drive options",
    );
    assert_destroyed(&server, &out).await;
}

#[tokio::test]
async fn an_address_that_answers_late_destroys_the_vm_before_it_gets_the_address() {
    if common::process_lane() {
        // The cli lane probes with a real TCP connect, which no sim fault reaches.
        return;
    }
    // Something answers at .106 one second (real time) after the knock:
    // after the allocation's quick wait, before the import ends.
    let fault = r#"{"op":"probe","action":"delay","vmid":106,"delay_ms":2000000,"times":1}"#;
    let (server, out) = run_with_fault(fault, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > initializing configuration",
        "[-] failed to initialize VM: 192.168.0.106 answers on port 22",
    );
    let commands = common::commands(&server).await;
    // The creation went on while the probe ran; the VM never got the address.
    assert!(created_a_vm(&commands), "{commands:?}");
    assert!(
        !commands.iter().any(|c| c.starts_with("qm set 106")),
        "{commands:?}"
    );
    assert_destroyed(&server, &out).await;
}

#[tokio::test]
async fn an_address_that_answers_at_once_is_skipped() {
    if common::process_lane() {
        return;
    }
    let server = common::server(&[]).await;
    common::fault(&server, r#"{"op":"probe","action":"fail","vmid":106}"#).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e.message() == "[+] auto-assigned VMID: 107"
                || e.message().starts_with("[+] auto-assigned VMID: 107 (")),
        "{events:#?}"
    );
}

#[tokio::test]
async fn ssh_initialization_failure_destroys_the_vm() {
    let (server, out) = run_with_fault(r#"{"op":"ssh-init","action":"fail"}"#, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > SSH initialization",
        "[-] failed to perform SSH initialization: E: Unable to locate package",
    );
    // The script's lines up to the failure were relayed.
    assert!(
        out.events
            .iter()
            .any(|e| e.message() == "  [pvedeck] updating package lists")
    );
    assert_destroyed(&server, &out).await;
}

// --- migration, start, reboot commands; SSH wait timeout: the VM stays ----

async fn assert_kept(server: &common::Server, out: &Outcome) -> serde_json::Value {
    assert_eq!(out.job["outcome"], "kept");
    assert!(
        out.events.iter().any(|e| e.step() == "cleanup > keeping VM"
            && e.message() == "[*] VM 106 is kept for debugging")
    );
    // The step ends, before the job does: no follower shows it running.
    let last = out.events.iter().rev().find(|e| !e.is_close());
    assert!(
        last.is_some_and(|e| e.step() == "cleanup > keeping VM"
            && e.status() == "success"
            && e.message().starts_with("[+] VM 106 kept (")),
        "{:#?}",
        out.events
    );
    let commands = common::commands(server).await;
    assert!(
        !commands.iter().any(|c| c.starts_with("qm destroy")),
        "{commands:?}"
    );
    common::vm(&server.url, 106).await.expect("the VM stays")
}

#[tokio::test]
async fn migration_failure_keeps_the_vm() {
    let body = r#"{"os":"debian","version":"12","node":"pve3"}"#;
    let (server, out) = run_with_fault(r#"{"op":"migrate","action":"fail"}"#, body).await;
    out.assert_failed_at(
        "VM initialization > migrating VM",
        "[-] failed to migrate VM: migration aborted",
    );
    let vm = assert_kept(&server, &out).await;
    assert_eq!(vm["node"], "pve1");
}

#[tokio::test]
async fn start_failure_keeps_the_vm() {
    let (server, out) = run_with_fault(r#"{"op":"start","action":"fail"}"#, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > waiting for ready",
        "[-] failed to start VM: start failed: QEMU exited with code 1",
    );
    let vm = assert_kept(&server, &out).await;
    assert_eq!(vm["running"], false);
}

#[tokio::test]
async fn reboot_failure_keeps_the_vm() {
    let (server, out) = run_with_fault(r#"{"op":"reboot","action":"fail"}"#, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > rebooting VM",
        "[-] failed to reboot VM:",
    );
    let vm = assert_kept(&server, &out).await;
    assert_eq!(vm["running"], true);
}

#[tokio::test]
async fn ssh_wait_timeout_keeps_the_vm_for_debugging() {
    let server = common::server(&[("SSH_POLL_ATTEMPTS", "3")]).await;
    common::fault(&server, r#"{"op":"ssh-ready","action":"fail"}"#).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "VM initialization > waiting for ready",
        "[-] failed to connect to VM via SSH: SSH timeout after 3 attempts",
    );
    let vm = assert_kept(&server, &out).await;
    assert_eq!(vm["running"], true);
    let tries = common::commands(&server)
        .await
        .iter()
        .filter(|c| c.starts_with("ssh debian@"))
        .count();
    assert_eq!(tries, 3, "SSH_POLL_ATTEMPTS");
}

#[tokio::test]
async fn a_hung_command_is_given_up_at_its_timeout() {
    let server = common::server(&[("COMMAND_TIMEOUT_SECS", "1")]).await;
    common::fault(&server, r#"{"op":"create","action":"hang"}"#).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "VM creation > creating VM",
        "[-] failed to create VM: qm create: no answer within 1s",
    );
}

#[tokio::test]
async fn a_hung_pvesh_in_the_cpu_baseline_ends_the_install_at_the_timeout() {
    let server = common::server(&[("COMMAND_TIMEOUT_SECS", "1")]).await;
    common::fault(&server, r#"{"op":"nodestatus","action":"hang"}"#).await;
    let out = run(&server.url, DEBIAN).await;
    out.assert_failed_at(
        "VM creation > creating VM",
        "[-] failed to create VM: pvesh get /nodes/pve1/status: no answer within 1s",
    );
    assert_eq!(out.job["outcome"], "none");
    assert!(!created_a_vm(&common::commands(&server).await));
}

#[tokio::test]
async fn a_hung_qm_config_answers_start_and_reboot_with_504_before_acting() {
    let server = common::server(&[("COMMAND_TIMEOUT_SECS", "1")]).await;
    let url = &server.url;
    // 103 is stopped, 101 is running; their `qm config` never answers.
    for vmid in [103, 101] {
        let fault = format!(r#"{{"op":"config","action":"hang","vmid":{vmid}}}"#);
        common::fault(&server, &fault).await;
    }
    for (vmid, action) in [(103, "start"), (101, "reboot")] {
        let (status, text) = common::post(&format!("{url}/api/vm/{vmid}/{action}")).await;
        assert_eq!(
            (status, text.as_str()),
            (504, "qm config: no answer within 1s"),
            "{action}"
        );
        let commands = common::commands(&server).await;
        assert!(
            !commands.iter().any(|c| *c == format!("qm {action} {vmid}")),
            "{commands:?}"
        );
    }
    let jobs = common::json(&format!("{url}/api/jobs")).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "no job was started");
}

#[tokio::test]
async fn a_real_download_from_a_mirror_lands_in_the_cache() {
    let images = common::image_server().await;
    let base = format!("{images}/img");
    let server = common::server(&[
        ("IMAGE_BASE_DEBIAN", base.as_str()),
        ("IMAGE_FETCH", "upload"),
    ])
    .await;
    let out = run(&server.url, DEBIAN).await;
    assert_eq!(out.job["state"], "succeeded", "{:#?}", out.events);
    assert!(out.events.iter().any(|e| {
        e.message()
            == format!("[+] OS image URL obtained: {base}/debian-12-generic-amd64.qcow2 (0.00s)")
            || e.message()
                .starts_with(&format!("[+] OS image URL obtained: {base}/"))
    }));
    let cached = server.data_dir.join("images/debian-12-generic-amd64.qcow2");
    assert_eq!(std::fs::metadata(&cached).map(|m| m.len()).ok(), Some(4096));
    // No partial file is left behind.
    let leftovers = std::fs::read_dir(server.data_dir.join("images"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".part-"))
        .count();
    assert_eq!(leftovers, 0);
}
