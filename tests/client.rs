//! `pvedeck-cli` against a simulated server: install, list, jobs, follow,
//! refusals, tokens and Ctrl-C, through the binary as a user runs it.

mod common;

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

const INSTALL: [&str; 6] = ["vm", "install", "--os", "debian", "--version", "12"];

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn cli(url: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    let out = tokio::process::Command::new(common::client_binary())
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("PVEDECK_URL")
        .env_remove("PVEDECK_TOKEN")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("pvedeck-cli runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn install_list_jobs_and_follow_against_the_simulator() {
    let s = common::server(&[]).await;
    let run = cli(&s.url, &[], &[&INSTALL[..], &["--name", "web"]].concat()).await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let ip = common::ip(106);
    for line in [
        "preparation > checking VMID".to_string(),
        "  [+] auto-assigned VMID: 106".to_string(),
        "VM creation > importing disk image".to_string(),
        "  transferred".to_string(),
        "  VMID      106".to_string(),
        format!("  IP        {ip}"),
        format!("  ssh       ssh debian@{ip}"),
    ] {
        assert!(
            run.stdout.contains(&line),
            "{line:?} missing:\n{}",
            run.stdout
        );
    }
    assert!(
        run.stderr.contains("job 1 (Ctrl-C stops following"),
        "{}",
        run.stderr
    );

    let list = cli(&s.url, &[], &["vm", "list"]).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    let row = list
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("106 "))
        .unwrap_or_else(|| panic!("no VM 106:\n{}", list.stdout));
    assert!(row.contains("web-106") && row.contains("running"), "{row}");

    let jobs = cli(&s.url, &[], &["jobs"]).await;
    assert_eq!(jobs.code, Some(0), "{}", jobs.stderr);
    assert!(
        jobs.stdout
            .lines()
            .any(|l| l.contains("install") && l.contains("succeeded")),
        "{}",
        jobs.stdout
    );

    // Following an ended job replays it and ends the same way.
    let follow = cli(&s.url, &[], &["--json", "jobs", "follow", "1"]).await;
    assert_eq!(follow.code, Some(0), "{}", follow.stderr);
    let lines = json_lines(&follow.stdout);
    let last = lines.last().expect("a summary");
    assert_eq!(last["state"], "succeeded");
    assert_eq!(last["vmid"], 106);
    assert_eq!(last["ip"], ip.as_str());
    assert_eq!(last["ssh"], format!("ssh debian@{ip}").as_str());
    let seqs: Vec<u64> = lines[..lines.len() - 1]
        .iter()
        .filter_map(|l| l["seq"].as_u64())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "every event once, in order"
    );

    let status = cli(&s.url, &[], &["vm", "status", "106"]).await;
    assert_eq!((status.code, status.stdout.trim()), (Some(0), "running"));
    let stop = cli(&s.url, &[], &["vm", "stop", "106"]).await;
    assert_eq!(stop.code, Some(0), "{}", stop.stderr);
    let start = cli(&s.url, &[], &["vm", "start", "106"]).await;
    assert_eq!(
        start.code,
        Some(0),
        "start is a job: {}\n{}",
        start.stdout,
        start.stderr
    );
    assert!(start.stderr.contains("job 2"), "{}", start.stderr);
}

#[tokio::test]
async fn a_failed_install_exits_1_with_the_failed_step_and_a_refusal_exits_2() {
    let s = common::server(&[]).await;
    let refused = cli(
        &s.url,
        &[],
        &["vm", "install", "--os", "plan9", "--version", "4"],
    )
    .await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("refused (400)"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("plan9"),
        "the server's words: {}",
        refused.stderr
    );
    assert!(
        common::commands(&s)
            .await
            .iter()
            .all(|c| !c.starts_with("qm create"))
    );

    common::fault(&s, r#"{"op":"create","action":"fail"}"#).await;
    let failed = cli(&s.url, &[], &[&["--json"][..], &INSTALL].concat()).await;
    assert_eq!(failed.code, Some(1), "{}\n{}", failed.stdout, failed.stderr);
    let last = json_lines(&failed.stdout).pop().expect("a summary");
    assert_eq!(last["state"], "failed");
    assert_eq!(last["failed_step"], "VM creation > creating VM");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|m| m.starts_with("[-] ")),
        "{last}"
    );
    assert!(
        failed
            .stderr
            .contains("at step 'VM creation > creating VM': [-] "),
        "{}",
        failed.stderr
    );

    let wrong = cli(&s.url, &[], &["vm", "start", "not-a-number"]).await;
    assert_eq!(
        wrong.code,
        Some(2),
        "a wrong command line: {}",
        wrong.stderr
    );
    let unreachable = cli(
        &format!("http://127.0.0.1:{}", common::closed_port()),
        &[],
        &["vm", "list"],
    )
    .await;
    assert_eq!(unreachable.code, Some(3), "{}", unreachable.stderr);
}

#[tokio::test]
async fn the_token_comes_from_the_environment_and_is_never_printed() {
    const TOKEN: &str = "client-test-token-0123456789abcdef";
    let s = common::server(&[("API_TOKENS", TOKEN)]).await;
    let args = INSTALL;
    let without = cli(&s.url, &[], &args).await;
    assert_eq!(without.code, Some(2), "{}", without.stderr);
    assert!(
        without.stderr.contains("refused (401)"),
        "{}",
        without.stderr
    );
    let with = cli(&s.url, &[("PVEDECK_TOKEN", TOKEN)], &args).await;
    assert_eq!(with.code, Some(0), "{}", with.stderr);
    assert!(!with.stdout.contains(TOKEN) && !with.stderr.contains(TOKEN));
}

#[tokio::test]
async fn ctrl_c_leaves_the_job_running_and_says_how_to_follow_it() {
    // Slow enough that the install is still running when Ctrl-C comes.
    let s = common::server(&[("SIM_SPEED", "20")]).await;
    let mut child = tokio::process::Command::new(common::client_binary())
        .args(["--url", &s.url])
        .args(INSTALL)
        .env_remove("PVEDECK_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pvedeck-cli runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // The first step on screen: the job is under way.
    while let Some(line) = lines.next_line().await.expect("read") {
        if line.starts_with("preparation > ") {
            break;
        }
    }
    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().await.expect("exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!("pvedeck-cli --url {} jobs follow 1", s.url)),
        "{stderr}"
    );

    let again = cli(&s.url, &[], &["jobs", "follow", "1"]).await;
    assert_eq!(again.code, Some(0), "the job went on: {}", again.stderr);
    assert!(again.stdout.contains("  VMID      106"), "{}", again.stdout);
}
