//! The `cli` backend end to end: a pvedeck process whose `qm`, `pvesh`,
//! `pvesm` and `ssh` are the simulator's command-line stand-ins, which record
//! every argument vector they are called with.

mod common;

use std::path::Path;

const PASSWORD: &str = "pw-Secret-123";
const ROOT_PASSWORD: &str = "root-Secret-456";

async fn cli_server(data_dir: &Path, vars: &[(&str, &str)]) -> (std::process::Child, String) {
    let env = common::with(common::cli_env(data_dir, false).await, vars);
    common::start_process(data_dir, &env)
}

/// Every argument vector the stand-ins were called with, in order.
fn argvs(data_dir: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(data_dir.join("sim/argv.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("argv JSON"))
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn an_install_runs_the_exact_commands_of_spec_3_and_no_argv_holds_a_password() {
    let dir = common::temp_dir("argv");
    let (child, url) = cli_server(&dir, &[("VM_ROOT_PASSWORD", ROOT_PASSWORD)]).await;
    let _server = common::Killed(child);
    let body = format!(r#"{{"os":"debian","version":"12","name":"web","passwd":"{PASSWORD}"}}"#);
    let (job, events) = common::install(&url, &body).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");

    let all = argvs(&dir);
    for argv in &all {
        let line = argv.join(" ");
        assert!(!line.contains(PASSWORD), "password in argv: {line}");
        assert!(
            !line.contains(ROOT_PASSWORD),
            "root password in argv: {line}"
        );
    }

    let qm: Vec<&Vec<String>> = all.iter().filter(|a| a[0] == "qm").collect();
    let create = qm.iter().find(|a| a[1] == "create").expect("qm create");
    assert_eq!(
        **create,
        strings(&[
            "qm",
            "create",
            "106",
            "--name",
            "web-106",
            "--cores",
            "2",
            "--cpu",
            "x86-64-v2-AES",
            "--scsihw",
            "virtio-scsi-pci",
            "--memory",
            "2048",
            "--ostype",
            "l26",
            "--agent",
            "1",
            "--net0",
            "virtio,bridge=vmbr0",
            "--serial0",
            "socket",
            "--tags",
            "debian;pvedeck",
        ])
    );
    let sets: Vec<&Vec<String>> = qm
        .iter()
        .filter(|a| a[1] == "set" || a[1..3] == ["disk", "resize"])
        .copied()
        .collect();
    // One `qm set` with every option, then the resize of the attached disk.
    assert_eq!(sets.len(), 2, "{sets:#?}");
    let set = sets[0];
    assert_eq!(set[..4], strings(&["qm", "set", "106", "--sshkeys"]));
    let keys_file = &set[4];
    assert!(keys_file.contains("/tmp/sshkeys-"), "{keys_file}");
    assert!(
        !Path::new(keys_file).exists(),
        "the key file is removed afterwards"
    );
    assert_eq!(
        set[5..9],
        strings(&["--ciuser", "debian", "--cipassword", set[8].as_str()])
    );
    assert!(set[8].starts_with("$6$"), "a SHA-512 crypt hash");
    assert_eq!(
        set[9..],
        strings(&[
            "--ciupgrade",
            "0",
            "--scsi0",
            "local-zfs:vm-106-disk-0",
            "--ide2",
            "local-zfs:cloudinit",
            "--boot",
            "c",
            "--bootdisk",
            "scsi0",
            "--ipconfig0",
            "ip=127.0.0.106/24,gw=127.0.0.1",
        ])
    );
    // Proxmox's current names, not the aliases kept for old scripts.
    assert_eq!(
        *sets[1],
        strings(&["qm", "disk", "resize", "106", "scsi0", "16G"])
    );
    let import = qm
        .iter()
        .find(|a| a[1..3] == ["disk", "import"])
        .expect("qm disk import");
    assert_eq!(import[3], "106");
    assert!(import[4].ends_with("images/debian-12-generic-amd64.qcow2"));
    assert_eq!(import[5], "local-zfs");
    assert!(
        !qm.iter()
            .any(|a| ["importdisk", "resize", "agent"].contains(&a[1].as_str())),
        "no alias: {qm:#?}"
    );

    // A destroy takes the disks its config does not name too.
    assert_eq!(common::post(&format!("{url}/api/vm/106/stop")).await.0, 200);
    let (status, body) = common::post(&format!("{url}/api/vm/106/destroy")).await;
    assert_eq!(status, 200, "{body}");
    let all = argvs(&dir);
    let destroy = all
        .iter()
        .find(|a| a[0] == "qm" && a[1] == "destroy")
        .expect("qm destroy");
    assert_eq!(
        destroy[2..],
        strings(&["106", "--purge", "--destroy-unreferenced-disks", "1"])
    );
    // The VM's address was reached with pvedeck's key, as the requested user.
    assert!(all.iter().any(|a| a[0] == "ssh"
        && a.contains(&"debian@127.0.0.106".to_string())
        && a.last().is_some_and(|c| c.ends_with("echo ready"))));

    // No secret in the events, the job database or the log.
    let detail = common::json(&format!("{url}/api/jobs/{job}"))
        .await
        .to_string();
    for secret in [PASSWORD, ROOT_PASSWORD] {
        assert!(!detail.contains(secret), "secret in the job's events");
        for file in [
            "pvedeck.db",
            "pvedeck.db-wal",
            "server.log",
            "sim/cluster.json",
        ] {
            let bytes = std::fs::read(dir.join(file)).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret), "secret in {file}");
        }
    }
}

#[tokio::test]
async fn commands_for_a_vm_on_another_node_go_through_ssh_to_that_node() {
    let dir = common::temp_dir("route");
    let (child, url) = cli_server(&dir, &[]).await;
    let _server = common::Killed(child);
    // 104 lives on pve2 (127.0.0.12).
    assert_eq!(
        common::post(&format!("{url}/api/vm/104/stop")).await,
        (200, "ok".into())
    );
    let all = argvs(&dir);
    let ssh = all
        .iter()
        .find(|a| a[0] == "ssh" && a.last().is_some_and(|c| c == "qm stop 104"))
        .expect("ssh root@pve2 qm stop 104");
    assert_eq!(
        ssh[..7],
        strings(&[
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "--",
            "root@127.0.0.12"
        ])
    );
    assert_eq!(
        common::get(&format!("{url}/api/vm/104/status")).await.1,
        "stopped"
    );
}

#[tokio::test]
async fn a_node_without_an_address_is_a_clear_error() {
    let dir = common::temp_dir("noaddr");
    let (child, url) = cli_server(&dir, &[("NODE_pve3", "")]).await;
    let _server = common::Killed(child);
    // 105 lives on pve3, whose NODE_pve3 is not set.
    let (status, body) = common::post(&format!("{url}/api/vm/105/start")).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("no address for node 'pve3': set NODE_pve3"),
        "{body}"
    );
}

#[tokio::test]
async fn output_that_does_not_parse_is_an_error_naming_command_and_line() {
    let dir = common::temp_dir("garbage");
    // A `pvesh` that prints nonsense, ahead of the stand-ins on PATH.
    let bin = common::temp_dir("garbage-bin");
    let fake = bin.join("pvesh");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'Use of uninitialized value $x in concatenation'\n",
    )
    .unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();

    let mut env = common::cli_env(&dir, false).await;
    for (k, v) in env.iter_mut() {
        if k == "PATH" {
            *v = format!("{}:{v}", bin.display());
        }
    }
    let (child, url) = common::start_process(&dir, &env);
    let _server = common::Killed(child);
    let (status, body) = common::get(&format!("{url}/api/vm/list")).await;
    assert_eq!(status, 500);
    // The list reads VMs and nodes at once: either read may fail first.
    let command = body
        .split(": cannot parse output:")
        .next()
        .unwrap_or_default();
    assert!(
        [
            "pvesh get /cluster/resources --type vm --output-format json",
            "pvesh get /cluster/resources --type node --output-format json",
        ]
        .contains(&command),
        "{body}"
    );
    assert!(
        body.contains("'Use of uninitialized value $x in concatenation'"),
        "{body}"
    );
}

/// Runs a stand-in tool as the `cli` backend would, on `node`.
fn tool(env: &[(String, String)], node: &str, argv: &[&str]) -> (i32, String, String) {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.split(':').next().unwrap_or_default().to_string())
        .expect("PATH");
    let out = std::process::Command::new(Path::new(&path).join(argv[0]))
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("PVEDECK_SIM_NODE", node)
        .output()
        .expect("run the stand-in");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_simulated_qm_makes_templates_and_linked_clones_and_its_agent_answers_like_proxmox() {
    let dir = common::temp_dir("clone");
    let env = common::cli_env(&dir, false).await;
    let qm = |args: &[&str]| {
        let mut argv = vec!["qm"];
        argv.extend(args);
        tool(&env, "pve2", &argv)
    };

    // A VM's disk is not a base volume: no linked clone of it.
    let (code, _, err) = qm(&["clone", "103", "250", "--name", "c", "--full", "0"]);
    assert_eq!(
        (code, err.trim()),
        (
            255,
            "Linked clone feature is not supported for drive 'scsi0'"
        )
    );
    let (code, _, err) = qm(&["agent", "103", "ping"]);
    assert_eq!((code, err.trim()), (255, "VM 103 is not running"));

    // A template: its disks become base volumes, and it cannot start.
    assert_eq!(qm(&["template", "103"]).0, 0);
    let (_, config, _) = qm(&["config", "103"]);
    assert!(config.contains("\ntemplate: 1\n"), "{config}");
    assert!(
        config.contains("scsi0: local-zfs:base-103-disk-0,size=64G"),
        "{config}"
    );
    let (code, _, err) = qm(&["template", "103"]);
    assert_eq!(
        (code, err.trim()),
        (255, "you can't convert a template to a template")
    );
    let (code, _, err) = qm(&["start", "103"]);
    assert_eq!(
        (code, err.trim()),
        (255, "you can't start a vm if it's a template")
    );

    // From a template a clone is linked by default, its disk on the base.
    let (code, out, err) = qm(&["clone", "103", "251", "--name", "web"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("create linked clone of drive scsi0 (local-zfs:base-103-disk-0)"),
        "{out}"
    );
    assert!(
        out.contains("create full clone of drive ide2 (local-zfs:vm-103-cloudinit)"),
        "{out}"
    );
    let (_, config, _) = qm(&["config", "251"]);
    assert!(
        config.contains("scsi0: local-zfs:base-103-disk-0/vm-251-disk-0,size=64G"),
        "{config}"
    );
    assert!(
        config.contains("name: web\n") && !config.contains("template:"),
        "{config}"
    );
    let (code, _, err) = qm(&["destroy", "103"]);
    assert_eq!(
        (code, err.trim()),
        (
            255,
            "base volume 'base-103-disk-0' is still in use by linked cloned"
        )
    );

    // The clone's disk came from a booted, uncleaned VM: same machine-id.
    assert_eq!(qm(&["start", "251"]).0, 0);
    let read_id = |vmid: &str| {
        // The agent answers once the guest has booted; each try is one
        // `qm guest exec`, which waits for the agent itself.
        (0..50)
            .map(|_| qm(&["guest", "exec", vmid, "--", "cat", "/etc/machine-id"]))
            .find(|(code, _, _)| *code == 0)
            .expect("the agent answers")
            .1
    };
    let report = read_id("251");
    assert!(
        report.starts_with("{\n   \"exitcode\" : 0,\n   \"exited\" : 1,\n   \"out-data\" : \""),
        "{report}"
    );
    let machine_id = |report: &str| {
        let value: serde_json::Value = serde_json::from_str(report).expect("JSON");
        value["out-data"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let (_, snapshot, _) = tool(
        &env,
        "pve1",
        &[
            "pvesh",
            "get",
            "/cluster/resources",
            "--type",
            "vm",
            "--output-format",
            "json",
        ],
    );
    assert!(snapshot.contains("\"template\":1"), "{snapshot}");
    let shared = machine_id(&report);
    assert_eq!(shared.len(), 32, "{report}");

    // Cleaned, the next boot writes a new identity.
    let clean = "cloud-init clean --logs --machine-id && rm -f /etc/ssh/ssh_host_*";
    let (code, _, err) = qm(&["guest", "exec", "251", "--", "sh", "-c", clean]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(qm(&["reboot", "251"]).0, 0);
    let fresh = machine_id(&read_id("251"));
    assert_eq!(fresh.len(), 32);
    assert_ne!(fresh, shared);
    let (_, report, _) = qm(&[
        "guest",
        "exec",
        "251",
        "--",
        "cloud-init",
        "status",
        "--wait",
    ]);
    assert!(
        report.contains("\"out-data\" : \"status: done\\n\""),
        "{report}"
    );
    let (_, report, _) = qm(&["guest", "exec", "251", "--", "apt-get", "update"]);
    assert!(report.contains("\"exitcode\" : 127"), "{report}");
}

#[tokio::test]
async fn qm_reads_a_keys_file_on_its_own_node_so_another_node_gets_the_keys_on_stdin() {
    let dir = common::temp_dir("keys-remote");
    let (child, url) = cli_server(&dir, &[]).await;
    let _server = common::Killed(child);
    let env = common::cli_env(&dir, false).await;

    // Through ssh, `qm` runs on pve2, where pvedeck's files are not.
    let keys = dir.join("keys.pub");
    std::fs::write(
        &keys,
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBdX0Qhc9JKHtt2VTWaOlzUGOZuHcFdkKZ2Uoi1BIStV t@x\n",
    )
    .expect("keys");
    let keys = keys.to_string_lossy().into_owned();
    let (code, _, err) = tool(
        &env,
        "pve1",
        &[
            "ssh",
            "root@127.0.0.12",
            &format!("qm set 103 --sshkeys {keys}"),
        ],
    );
    assert_eq!(code, 255, "{err}");
    assert!(
        err.contains(&format!("can't open '{keys}' - No such file or directory")),
        "{err}"
    );

    // A template that lives on pve2: the clone's `qm set` runs there.
    let clone = r#"{"os":"debian","version":"12","method":"clone"}"#;
    let (_, events) = common::install(&url, clone).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let (code, _, err) = tool(&env, "pve1", &["qm", "migrate", "9001", "pve2"]);
    assert_eq!(code, 0, "{err}");
    let mut moved = false;
    for _ in 0..100 {
        let list = common::json(&format!("{url}/api/templates")).await;
        if list.to_string().contains(r#""node":"pve2""#) {
            moved = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(moved, "the template is listed on pve2");
    let (job, events) = common::install(&url, clone).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    let vmid = detail["vmid"].as_u64().expect("vmid");
    let all = argvs(&dir);
    // A clone is ready when its agent answers, asked by the current name.
    assert!(
        all.iter()
            .any(|a| a.len() > 4 && a[0] == "qm" && a[1..3] == ["guest", "cmd"] && a[4] == "ping"),
        "the agent is asked with `qm guest cmd`: {all:#?}"
    );
    let set = all
        .iter()
        .find(|a| {
            a[0] == "ssh"
                && a.last()
                    .is_some_and(|c| c.starts_with(&format!("qm set {vmid} ")))
        })
        .expect("qm set through ssh to pve2");
    let remote = set.last().expect("command");
    assert!(remote.contains("--sshkeys /dev/stdin"), "{remote}");
    assert_eq!(detail["state"], "succeeded");
}
