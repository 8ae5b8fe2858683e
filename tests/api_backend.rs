//! `PVE_BACKEND=api` against the simulator's REST API face (`pvedeck sim
//! api`, its own process over HTTPS with a self-signed certificate and a
//! token): an install end to end with no `qm`/`pvesh`/`pvesm` run and no
//! `ssh root@<node>`, and the start-up checks that name what to change.

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
    // The token's secret is in no log line, event or database row.
    let secret = api.token.rsplit_once('=').expect("secret").1.to_string();
    for file in ["server.log", "pvedeck.db", "pvedeck.db-wal"] {
        let bytes = std::fs::read(dir.join(file)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&secret),
            "token in {file}"
        );
    }
    assert!(!detail.to_string().contains(&secret));
}

#[tokio::test]
async fn a_changed_certificate_or_a_refused_privilege_stops_the_start() {
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

    set(&mut env, "IMPORT_STORAGE", "local-zfs");
    let said = refused_start(&dir, &env);
    assert!(
        said.contains("IMPORT_STORAGE local-zfs does not allow the `import` content"),
        "{said}"
    );
}
