//! The install pipeline over real HTTP on the simulated cluster
//! (docs/provisioning.md#the-install-pipeline).

mod common;

use common::{Sse, install};

const DEBIAN: &str = r#"{"os":"debian","version":"12","name":"web"}"#;

/// The steps of a successful install, in order (docs/provisioning.md#the-install-pipeline).
const STEPS: [&str; 20] = [
    "preparation > checking VMID",
    "preparation > assigning IP",
    "preparation > validating CPU and RAM",
    "preparation > validating disk size",
    "preparation > setting default config values",
    "preparation > checking storage pool",
    "OS preparation > getting OS image",
    "OS preparation > validating OS image URL",
    "OS preparation > downloading OS image",
    "OS preparation > verifying OS image",
    "SSH preparation > checking SSH key",
    "SSH preparation > creating SSH key",
    "VM creation > creating VM",
    "VM creation > importing disk image",
    "VM initialization > initializing configuration",
    "VM initialization > waiting for ready",
    "VM initialization > SSH initialization",
    "VM initialization > rebooting VM",
    "VM initialization > finalizing",
    "",
];

/// The step names in the order they first appear.
fn steps(events: &[Sse]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let s = if e.is_close() {
            String::new()
        } else {
            e.step().to_string()
        };
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

/// `… (1.23s)` at the end of a message.
fn ends_with_elapsed(message: &str) -> bool {
    let Some(rest) = message.strip_suffix("s)") else {
        return false;
    };
    let Some((_, number)) = rest.rsplit_once(" (") else {
        return false;
    };
    number.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty() && b.len() == 2 && a.chars().chain(b.chars()).all(|c| c.is_ascii_digit())
    })
}

#[tokio::test]
async fn a_successful_install_follows_spec_3_step_by_step() {
    let server = common::server(&[]).await;
    let (job, events) = install(&server.url, DEBIAN).await;

    assert_eq!(steps(&events), STEPS, "{events:#?}");
    assert!(events.last().is_some_and(Sse::is_close));

    // Ids count up from 1, one per data event.
    let ids: Vec<u64> = events.iter().filter_map(|e| e.id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());

    for e in events.iter().filter(|e| !e.is_close()) {
        let m = e.message();
        assert!(
            m.starts_with("[*]") || m.starts_with("[+]") || m.starts_with("  "),
            "message prefix: {m}"
        );
        assert_ne!(e.status(), "error", "{m}");
        if e.status() == "success" && e.step() != "VM initialization > finalizing" {
            assert!(ends_with_elapsed(m), "elapsed time: {m}");
        }
    }

    // The demo cluster: 101-105 and 110 exist, something answers on .100.
    let first = &events[1];
    assert_eq!(
        first.message().split(" (").next(),
        Some("[+] auto-assigned VMID: 106")
    );
    let finals: Vec<&Sse> = events
        .iter()
        .filter(|e| e.step() == "VM initialization > finalizing")
        .collect();
    assert_eq!(finals.len(), 4);
    assert!(
        finals[0]
            .message()
            .starts_with("[+] VM installation completed in ")
    );
    assert_eq!(finals[1].message(), "[*] VMID: 106");
    assert_eq!(finals[2].message(), format!("[*] IP: {}", common::ip(106)));
    assert_eq!(finals[3].message(), "[*] User: debian");
    for f in &finals {
        assert_eq!(f.data["vm_id"], 106);
        assert_eq!(f.data["ip"], common::ip(106));
    }

    // The importdisk output is relayed, with the volume Proxmox named.
    assert!(
        events
            .iter()
            .any(|e| e.message()
                == "  unused0: successfully imported disk 'local-zfs:vm-106-disk-0'")
    );
    // The init script's lines are relayed under their step.
    let script: Vec<&str> = events
        .iter()
        .filter(|e| e.step() == "VM initialization > SSH initialization")
        .map(Sse::message)
        .filter(|m| m.starts_with("  "))
        .collect();
    assert_eq!(script.last(), Some(&"  [pvedeck] initialization complete"));
    // The cluster CPU baseline of pve1 (v4), pve2 (v3), pve3 (v2 + AES).
    assert!(
        events
            .iter()
            .any(|e| e.message() == "[*] CPU type: x86-64-v2-AES (cluster baseline)")
    );

    // The VM is there, running, with the asked name, and the job succeeded.
    let list = common::json(&format!("{}/api/vm/list", server.url)).await;
    let vm = list["list"]
        .as_array()
        .and_then(|l| l.iter().find(|v| v["vmid"] == 106))
        .cloned()
        .expect("VM 106 listed");
    assert_eq!(vm["name"], "web-106");
    assert_eq!(vm["running"], true);
    assert_eq!(vm["os"], "debian");
    assert_eq!(vm["disk"], 16.0);
    let job = common::json(&format!("{}/api/jobs/{job}", server.url)).await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["vmid"], 106);
}

#[tokio::test]
async fn relayed_output_with_quotes_backslashes_and_unicode_stays_valid_json() {
    let server = common::server(&[("INIT_SCRIPTS", "test")]).await;
    let (_, events) = install(&server.url, r#"{"os":"ubuntu","version":"24.04"}"#).await;
    // `read_events` parsed every data line as JSON; the text survived intact.
    assert!(
        events.iter().any(|e| e.message()
            == r#"  [pvedeck] quoting survives: "double" 'single' back\slash and ünïcödé"#),
        "{events:#?}"
    );
}

#[tokio::test]
async fn limits_clamp_with_an_event_each() {
    let server = common::server(&[
        ("VM_MAX_CPU", "4"),
        ("VM_MAX_RAM", "4096"),
        ("VM_MAX_DISK", "32"),
        ("VM_BALLOON_MIN", "1024"),
    ])
    .await;
    let body = r#"{"os":"rockylinux","version":"9","cpu":16,"ram":100000,"disk":"64G"}"#;
    let (_, events) = install(&server.url, body).await;
    let messages: Vec<&str> = events.iter().map(Sse::message).collect();
    for expected in [
        "[*] setting CPU to maximum 4",
        "[*] setting RAM to maximum 4096",
        "[*] setting disk to maximum 32G",
    ] {
        assert!(messages.contains(&expected), "{expected} in {messages:#?}");
    }
    let (_, events) = install(
        &server.url,
        r#"{"os":"rockylinux","version":"9","cpu":-1,"ram":256,"disk":"2G"}"#,
    )
    .await;
    let messages: Vec<&str> = events.iter().map(Sse::message).collect();
    for expected in [
        "[*] setting CPU to minimum 1",
        "[*] setting RAM to minimum 512 for system stability",
        "[*] setting disk to minimum 16G",
    ] {
        assert!(messages.contains(&expected), "{expected} in {messages:#?}");
    }
    assert!(events.iter().all(|e| e.status() != "error"));
    let list = common::json(&format!("{}/api/vm/list", server.url)).await;
    let first = list["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 106)
        .unwrap()
        .clone();
    assert_eq!(first["cpu"], 4);
    assert_eq!(first["memory"], 4.0);
    assert_eq!(first["disk"], 32.0);
}

#[tokio::test]
async fn thirty_concurrent_installs_get_thirty_vmids_and_ips() {
    let server = common::server(&[]).await;
    let installs = (0..30).map(|i| {
        let url = server.url.clone();
        tokio::spawn(async move {
            let body = format!(r#"{{"os":"debian","version":"12","name":"n{i}"}}"#);
            install(&url, &body).await
        })
    });
    let mut vmids = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeSet::new();
    for handle in installs {
        let (_, events) = handle.await.expect("install task");
        assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
        let last = events.iter().rev().find(|e| !e.is_close()).expect("events");
        vmids.insert(last.data["vm_id"].as_u64().expect("vm_id"));
        ips.insert(last.data["ip"].as_str().expect("ip").to_string());
    }
    assert_eq!(vmids.len(), 30);
    assert_eq!(ips.len(), 30);
    assert!(
        !vmids.contains(&100),
        "the address where a host answers is skipped"
    );
    let list = common::json(&format!("{}/api/vm/list", server.url)).await;
    assert_eq!(list["count"], 36);
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_field_and_run_no_command() {
    let server = common::server(&[]).await;
    // What ran before any request (the api backend's start-up checks).
    let before = common::commands(&server).await;
    let url = format!("{}/api/vm/install", server.url);
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    let cases = [
        ("{not json", "request body is not valid JSON"),
        (r#"{"os":"arch","version":"1"}"#, "os 'arch'"),
        (r#"{"os":"debian","version":"10"}"#, "version '10'"),
        (r#"{"os":"debian","version":"12","id":99}"#, "id 99"),
        (r#"{"os":"debian","version":"12","id":300}"#, "id 300"),
        (
            r#"{"os":"debian","version":"12","cpu":"two"}"#,
            "cpu must be an integer",
        ),
        (
            r#"{"os":"debian","version":"12","ram":[1]}"#,
            "ram must be an integer",
        ),
        (
            r#"{"os":"debian","version":"12","disk":"16GB"}"#,
            "disk '16GB'",
        ),
        (
            r#"{"os":"debian","version":"12","disk":16}"#,
            "disk must be a string",
        ),
        (
            r#"{"os":"debian","version":"12","name":"-bad"}"#,
            "name '-bad'",
        ),
        (
            r#"{"os":"debian","version":"12","user":"Root Admin"}"#,
            "user 'Root Admin'",
        ),
        (
            r#"{"os":"debian","version":"12","pubkey":"ssh-ed25519"}"#,
            "pubkey is not",
        ),
    ];
    for (body, expected) in cases {
        let (status, text) = common::post_json(&url, body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(
            text.contains(expected),
            "{body}: '{text}' should name '{expected}'"
        );
    }
    let ok = format!(r#"{{"os":"debian","version":"12","pubkey":"{key} me@host"}}"#);
    assert_eq!(common::commands(&server).await, before, "no command ran");
    let (_, events) = install(&server.url, &ok).await;
    assert!(events.iter().all(|e| e.status() != "error"));
}

#[tokio::test]
async fn an_explicit_id_that_exists_or_is_reserved_is_refused_before_anything_is_created() {
    let server = common::server(&[("RESERVED", "150:nas")]).await;
    let url = format!("{}/api/vm/install", server.url);
    let (status, text) =
        common::post_json(&url, r#"{"os":"debian","version":"12","id":101}"#).await;
    assert_eq!(
        (status, text.as_str()),
        (409, "VM 101 already exists on node 'pve1'")
    );
    let (status, text) =
        common::post_json(&url, r#"{"os":"debian","version":"12","id":150}"#).await;
    assert_eq!((status, text.as_str()), (400, "id 150 is reserved (nas)"));
    assert!(
        common::commands(&server)
            .await
            .iter()
            .all(|c| !c.starts_with("qm "))
    );

    let (_, events) = install(&server.url, r#"{"os":"debian","version":"12","id":140}"#).await;
    assert_eq!(
        events[1].message().split(" (").next(),
        Some("[+] using specified VMID: 140")
    );
    // Auto-assignment skips the reserved id too.
    let list = common::json(&format!("{}/api/vm/list", server.url)).await;
    assert!(
        list["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["vmid"] == 150 && v["reserved"] == true)
    );
}

#[tokio::test]
async fn installs_to_another_node_migrate_and_relay_the_migration() {
    let server = common::server(&[]).await;
    let (_, events) = install(
        &server.url,
        r#"{"os":"debian","version":"13","node":"pve2"}"#,
    )
    .await;
    let migration: Vec<&str> = events
        .iter()
        .filter(|e| e.step() == "VM initialization > migrating VM")
        .map(Sse::message)
        .collect();
    assert!(
        migration
            .iter()
            .any(|m| m.contains("starting migration of VM 106 to node 'pve2'"))
    );
    assert!(
        migration
            .iter()
            .any(|m| m.contains("migration finished successfully"))
    );
    let list = common::json(&format!("{}/api/vm/list", server.url)).await;
    let vm = list["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 106)
        .unwrap()
        .clone();
    assert_eq!(vm["node"], "pve2");
    // Commands for a VM on pve2 went to pve2 (the simulator refuses others).
    assert_eq!(vm["running"], true);
}

#[tokio::test]
async fn a_second_install_of_the_same_image_uses_the_cache() {
    let server = common::server(&[]).await;
    let (_, first) = install(&server.url, DEBIAN).await;
    assert!(
        first
            .iter()
            .any(|e| e.step() == "OS preparation > downloading OS image")
    );
    let (_, second) = install(&server.url, DEBIAN).await;
    assert!(
        second
            .iter()
            .any(|e| e.step() == "OS preparation > using OS image")
    );
    assert!(
        !second
            .iter()
            .any(|e| e.step() == "OS preparation > downloading OS image")
    );
    assert!(
        second
            .iter()
            .any(|e| e.step() == "SSH preparation > checking SSH key"
                && e.message().starts_with("[+] completed SSH preparation"))
    );
    if common::lane() == common::Lane::Api {
        // The node fetched it, into its `import` content, named by its
        // checksum; pvedeck holds no copy.
        assert!(second.iter().any(|e| {
            e.step() == "OS preparation > using OS image"
                && e.message()
                    .starts_with("[+] using OS image local:import/debian-12-generic-amd64-")
        }));
        assert!(
            !server
                .data_dir
                .join("images/debian-12-generic-amd64.qcow2")
                .exists()
        );
    } else {
        // The simulated image landed in DATA_DIR/images, not /tmp.
        assert!(
            server
                .data_dir
                .join("images/debian-12-generic-amd64.qcow2")
                .is_file()
        );
    }
}

#[tokio::test]
async fn on_a_dir_storage_the_imported_disk_is_named_as_proxmox_names_it() {
    let server = common::server(&[("ASSIGN_STORAGE", "local")]).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    // `qm importdisk`'s last line (the API's `import-from` says nothing
    // like it: the volume is read from the config).
    assert!(
        common::lane() == common::Lane::Api
            || events.iter().any(|e| e.message()
                == "  unused0: successfully imported disk 'local:106/vm-106-disk-0.raw'")
    );
    let commands = common::commands(&server).await;
    let set = commands
        .iter()
        .find(|c| c.starts_with("qm set 106 ") && c.contains(" --ide2 "))
        .expect("qm set");
    assert!(
        set.contains(" --scsi0 local:106/vm-106-disk-0.raw "),
        "{set}"
    );
    assert!(set.contains(" --ide2 local:cloudinit "), "{set}");
    assert_eq!(
        common::vm(&server.url, 106).await.expect("106")["disk"],
        16.0
    );
}

#[tokio::test]
async fn without_a_password_the_user_logs_in_with_keys_only_and_passwd_still_works() {
    let server = common::server(&[]).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    // go-pve-qemu's old default, asked for by name, is what it was.
    let body = r#"{"os":"debian","version":"12","passwd":"passwd"}"#;
    let (_, events) = install(&server.url, body).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let commands = common::commands(&server).await;
    let set = |vmid: u32| {
        commands
            .iter()
            // The one with cloud-init's user (the REST face sorts options).
            .find(|c| c.starts_with(&format!("qm set {vmid} ")) && c.contains("--ciuser"))
            .unwrap_or_else(|| panic!("no qm set of {vmid}: {commands:#?}"))
            .clone()
    };
    assert!(!set(106).contains("--cipassword"), "{}", set(106));
    assert!(set(107).contains("--cipassword"), "{}", set(107));
    // What the guest's cloud-init gets: no password line without one.
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(server.data_dir.join("sim/cluster.json")).expect("sim state"),
    )
    .expect("sim state JSON");
    assert!(state["vms"]["106"]["config"].get("cipassword").is_none());
    assert!(state["vms"]["107"]["config"].get("cipassword").is_some());
}

/// The Proxmox commands (`qm`, `pvesh`, `pvesm`) in the command log.
async fn proxmox_calls(server: &common::Server) -> Vec<String> {
    common::commands(server)
        .await
        .into_iter()
        .filter(|c| ["qm ", "pvesh ", "pvesm "].iter().any(|p| c.starts_with(p)))
        .collect()
}

/// Eight, and with `VM_IP_FILTER=auto` a ninth: the datacenter firewall's
/// options (`pvesh get /cluster/firewall/options`), read before `qm create`.
#[tokio::test]
async fn an_install_makes_eight_proxmox_calls() {
    // No timed refresh in between: only the installs' own calls count.
    let server = common::server(&[("SNAPSHOT_INTERVAL_MS", "600000")]).await;
    // The first install reads the snapshot and the nodes' CPU flags once.
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let before = proxmox_calls(&server).await.len();
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let calls = proxmox_calls(&server).await.split_off(before);
    let verbs: Vec<String> = calls
        .iter()
        .map(|c| c.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    let expected: &[&str] = if common::lane() == common::Lane::Api {
        // The API has no importdisk: `import-from` in a config change
        // imports and attaches (the simulator logs it as the import), and
        // the volume's name is read back from the config.
        &[
            "pvesh get",
            "pvesh get",
            "qm create",
            "qm importdisk",
            "qm config",
            "qm set",
            "qm resize",
            "qm config",
            "qm start",
            "qm reboot",
        ]
    } else {
        &[
            "pvesh get",
            "pvesh get",
            "qm create",
            "qm importdisk",
            "qm set",
            "qm resize",
            "qm config",
            "qm start",
            "qm reboot",
        ]
    };
    assert_eq!(verbs, expected, "{calls:#?}");
    assert!(
        calls[1].starts_with("pvesh get /cluster/firewall/options"),
        "{calls:#?}"
    );
}

#[tokio::test]
async fn readiness_is_noticed_when_the_port_opens_not_at_the_next_poll() {
    if common::process_lane() {
        // The cli lane's guests are simulated behind `ssh` only: no port to
        // knock on (the real-SSH lane knocks on a real sshd).
        return;
    }
    // An `ssh` turn every ten minutes: only the port knock can notice the
    // boots within the test's time.
    let server = common::server(&[("SSH_POLL_INTERVAL_MS", "600000")]).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let tries = common::commands(&server)
        .await
        .iter()
        .filter(|c| c.starts_with("ssh debian@"))
        .count();
    // Per wait, the first turn (the VM most likely still boots) and the try
    // when the port opened; and the init script's session. Without the
    // knock the second try of a wait would come ten minutes later.
    assert!((3..=5).contains(&tries), "{tries} ssh sessions");
}
