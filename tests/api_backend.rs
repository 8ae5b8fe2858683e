//! `PVE_BACKEND=api` against the simulator's REST API face (`pvedeck-sim
//! api`, its own process over HTTPS with a self-signed certificate and a
//! token): an install end to end with no `qm`/`pvesh`/`pvesm` run, no
//! `ssh root@<node>` and no secret written anywhere; the node's own image
//! download, checked and done once; the start-up checks that name what to
//! change. (Every other suite runs on this backend too, with
//! `PVEDECK_TEST_BACKEND=api`.)

mod common;

use std::path::Path;

/// Every argument vector the stand-ins (here only the guests' `ssh`) were
/// called with.
fn argvs(data_dir: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(data_dir.join("sim/argv.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("argv JSON"))
        .collect()
}

/// Runs pvedeck with `env` expecting it to refuse to start; what it said.
fn refused_start(data_dir: &Path, env: &[(String, String)]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pvedeck"))
        .current_dir(data_dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run pvedeck");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "it started: {said}");
    said
}

fn set(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value.to_string()));
}

#[tokio::test]
async fn an_install_through_the_api_runs_no_qm_and_reaches_no_node_over_ssh() {
    let dir = common::temp_dir("api-install");
    let (env, api) = common::api_env(&dir).await;
    let env = common::with(env, &[("VM_ROOT_PASSWORD", ROOT_PASSWORD)]);
    let (child, url) = common::start_process(&dir, &env);
    let _server = common::Killed(child);

    let body = r#"{"os":"debian","version":"12","name":"web"}"#;
    let (job, events) = common::install(&url, body).await;
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(detail["state"], "succeeded", "{events:#?}");
    let vmid = events
        .iter()
        .find_map(|e| e.message().strip_prefix("[*] VMID: "))
        .expect("summary")
        .to_string();

    let list = common::json(&format!("{url}/api/vm/list"))
        .await
        .to_string();
    assert!(list.contains(&format!("\"vmid\":{vmid}")), "{list}");
    for action in ["stop", "destroy"] {
        assert_eq!(
            common::post(&format!("{url}/api/vm/{vmid}/{action}")).await,
            (200, "ok".to_string()),
            "{action}"
        );
    }

    for argv in argvs(&dir) {
        let line = argv.join(" ");
        assert_eq!(argv[0], "ssh", "only the guests' ssh runs: {line}");
        assert!(!line.contains("root@"), "ssh to a node: {line}");
    }
    // No secret (the token's, the VMs' root password) is in any log line,
    // event or database row: every file pvedeck wrote, and what it sent.
    let secret = api.token.rsplit_once('=').expect("secret").1.to_string();
    let said = format!("{events:?}{detail}");
    for needle in [secret.as_str(), ROOT_PASSWORD] {
        assert!(!said.contains(needle), "a secret in the events or the job");
        for file in files(&dir) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(needle),
                "a secret in {}",
                file.display()
            );
        }
    }
}

const ROOT_PASSWORD: &str = "Correct-Horse-7-Battery";

/// Every file under `dir` but the simulated Proxmox's own (`sim/`, which
/// holds the token it issued).
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path == dir.join("sim") {
                continue;
            }
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path);
            }
        }
    }
    assert!(found.iter().any(|f| f.ends_with("server.log")));
    assert!(found.iter().any(|f| f.ends_with("pvedeck.db")));
    found
}

#[tokio::test]
async fn a_changed_certificate_a_refused_token_no_server_or_no_import_content_stops_the_start() {
    let dir = common::temp_dir("api-preflight");
    let (mut env, _api) = common::api_env(&dir).await;
    let wrong = ["AB"; 32].join(":");
    let mut pinned_wrong = env.clone();
    set(&mut pinned_wrong, "PVE_API_FINGERPRINT", &wrong);
    let said = refused_start(&dir, &pinned_wrong);
    assert!(
        said.contains("PVE_API_FINGERPRINT does not match the server's certificate"),
        "{said}"
    );

    let mut bad_token = env.clone();
    set(
        &mut bad_token,
        "PVE_API_TOKEN",
        "pvedeck@pve!deck=not-the-secret",
    );
    let said = refused_start(&dir, &bad_token);
    assert!(said.contains("PVE_API_TOKEN"), "{said}");

    let mut nobody_home = env.clone();
    let closed = common::closed_port();
    let url = format!("https://127.0.0.1:{closed}");
    set(&mut nobody_home, "PVE_API_URL", &url);
    let said = refused_start(&dir, &nobody_home);
    assert!(
        said.contains(&format!(
            "cannot reach the Proxmox API at {url}/api2/json (PVE_API_URL)"
        )),
        "{said}"
    );

    set(&mut env, "IMPORT_STORAGE", "local-zfs");
    let said = refused_start(&dir, &env);
    assert!(
        said.contains("IMPORT_STORAGE local-zfs does not allow the `import` content"),
        "{said}"
    );
}

#[tokio::test]
async fn a_token_without_a_privilege_is_refused_at_start_naming_it() {
    let dir = common::temp_dir("api-privileges");
    // pvedeck's role without VM.Clone and Sys.AccessNetwork.
    let privs = "VM.Audit VM.Allocate VM.Config.CPU VM.Config.Memory VM.Config.HWType \
                 VM.Config.Options VM.Config.Network VM.Config.Cloudinit VM.Config.CDROM \
                 VM.Config.Disk VM.PowerMgmt VM.Migrate VM.GuestAgent.Audit \
                 VM.GuestAgent.Unrestricted Datastore.AllocateSpace Datastore.AllocateTemplate \
                 Datastore.Audit Sys.Audit SDN.Use";
    let (env, _api) = common::api_env_with(&dir, &[("SIM_API_PRIVS", privs)]).await;
    let said = refused_start(&dir, &env);
    assert!(said.contains("token lacks VM.Clone on /vms"), "{said}");
    assert!(
        said.contains("token lacks Sys.AccessNetwork on /nodes/pve1"),
        "{said}"
    );
    // Uploading instead, the node opens no connection: that one is not needed.
    let upload = common::with(env, &[("IMAGE_FETCH", "upload")]);
    let said = refused_start(&dir, &upload);
    assert!(said.contains("token lacks VM.Clone on /vms"), "{said}");
    assert!(!said.contains("Sys.AccessNetwork"), "{said}");
}

#[tokio::test]
async fn privileges_are_checked_as_proxmox_combines_them() {
    // Without VM.Clone (so that it refuses and says why), without
    // VM.GuestAgent.Audit (Unrestricted covers ping too) and without
    // Sys.AccessNetwork (Sys.Audit with Sys.Modify on / open download-url).
    let base = "VM.Audit VM.Allocate VM.Config.CPU VM.Config.Memory VM.Config.HWType \
                VM.Config.Options VM.Config.Network VM.Config.Cloudinit VM.Config.CDROM \
                VM.Config.Disk VM.PowerMgmt VM.Migrate VM.GuestAgent.Unrestricted \
                Datastore.AllocateSpace Datastore.AllocateTemplate Datastore.Audit Sys.Audit SDN.Use";
    let dir = common::temp_dir("api-privs-either");
    let with_modify = format!("{base} Sys.Modify");
    let (env, _api) = common::api_env_with(
        &dir,
        &[
            ("SIM_API_PRIVS", with_modify.as_str()),
            ("SIM_USER_TAG_ACCESS", "user-allow=none"),
        ],
    )
    .await;
    let said = refused_start(&dir, &env);
    assert!(said.contains("token lacks VM.Clone on /vms"), "{said}");
    for absent in ["VM.GuestAgent", "Sys.AccessNetwork", "datacenter.cfg"] {
        assert!(!said.contains(absent), "{absent}: {said}");
    }
    // Every node's status is read: Sys.Audit is checked on each.
    assert!(!said.contains("Sys.Audit on /nodes/pve2"), "{said}");

    // Without Sys.Modify on /: download-url needs the node's
    // Sys.AccessNetwork, and datacenter.cfg's tag access applies.
    let dir = common::temp_dir("api-privs-tags");
    let (env, _api) = common::api_env_with(
        &dir,
        &[
            ("SIM_API_PRIVS", base),
            (
                "SIM_USER_TAG_ACCESS",
                "user-allow=list,user-allow-list=debian;ubuntu",
            ),
        ],
    )
    .await;
    let said = refused_start(&dir, &env);
    assert!(
        said.contains(
            "token lacks Sys.AccessNetwork on /nodes/pve1 (or Sys.Audit and Sys.Modify on /)"
        ),
        "{said}"
    );
    assert!(
        said.contains(
            "datacenter.cfg refuses the tags pvedeck, pvedeck-template, rockylinux to this token \
             (user-tag-access: user-allow=list)"
        ),
        "{said}"
    );
}

/// The steps and messages of `events`, for the assertion messages.
fn said(events: &[common::Sse]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{} | {}", e.step(), e.message()))
        .collect()
}

#[tokio::test]
async fn the_node_downloads_the_image_once_checked_against_the_mirror_and_refuses_a_mismatch() {
    use common::mirror::{Mirror, Sums};
    use sha2::Digest;
    let dir = common::temp_dir("api-download");
    let mirror = Mirror::start(common::qcow2(1), Sums::Of(common::qcow2(1))).await;
    let vars = [("IMAGE_BASE_DEBIAN", mirror.base.as_str())];
    let (env, _api) = common::api_env_with(&dir, &vars).await;
    let (child, url) = common::start_process(&dir, &env);
    let _server = common::Killed(child);
    let body = r#"{"os":"debian","version":"12"}"#;
    let sum: String = sha2::Sha512::digest(common::qcow2(1))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let volume = format!("debian-12-generic-amd64-{}.qcow2", &sum[..16]);

    let (_, first) = common::install(&url, body).await;
    let first = said(&first);
    for expected in [
        "OS preparation > downloading OS image | [*] start downloading OS image on node pve1",
        "OS preparation > downloading OS image | [+] completed OS image download",
        &format!(
            "OS preparation > verifying OS image | [+] OS image checked by node pve1 against the SHA-512 published at {}",
            mirror.list_url()
        ),
        "VM initialization > finalizing | [+] VM installation completed",
    ] {
        assert!(
            first.iter().any(|l| l.starts_with(expected)),
            "{expected} in {first:#?}"
        );
    }
    let (_, second) = common::install(&url, body).await;
    let second = said(&second);
    let using = format!(
        "OS preparation > using OS image | [+] using OS image local:import/{volume} on node pve1"
    );
    assert!(second.iter().any(|l| l.starts_with(&using)), "{second:#?}");
    assert!(!second.iter().any(|l| l.contains("downloading OS image")));
    let commands = std::fs::read_to_string(dir.join("sim/commands.log")).unwrap_or_default();
    assert_eq!(commands.matches("/download-url ").count(), 1, "{commands}");
    assert!(
        !dir.join("images")
            .join("debian-12-generic-amd64.qcow2")
            .exists()
    );

    // A new image whose published checksum is not its own: the node's
    // download fails, nothing is created, nothing is kept.
    mirror.set(common::qcow2(2), Sums::Of(common::qcow2(3)));
    let (job, third) = common::install(&url, body).await;
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(detail["state"], "failed");
    assert_eq!(
        detail["failed_step"],
        "OS preparation > downloading OS image"
    );
    assert_eq!(detail["outcome"], "none");
    let failed = said(&third);
    assert!(
        failed
            .iter()
            .any(|l| l.contains("[-] failed to download OS image: checksum mismatch")),
        "{failed:#?}"
    );
    let after = std::fs::read_to_string(dir.join("sim/commands.log")).unwrap_or_default();
    assert_eq!(
        after.matches("qm create").count(),
        commands.matches("qm create").count()
    );
    let kept: Vec<_> = std::fs::read_dir(dir.join("sim/storage/pve1/local/import"))
        .expect("import dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept, [volume]);
}
