//! A hostile guest printing a gigabyte without a newline while the init
//! script runs (docs/security.md#what-a-guest-prints): pvedeck reads it in
//! bounded chunks, so its memory stays where it was, the install goes on,
//! and what is kept of the line is cut. One test in this file: on the `sim`
//! lane the server is this process, whose memory nothing else may move.

mod common;

const DEBIAN: &str = r#"{"os":"debian","version":"12"}"#;
const FLOOD: u64 = 1 << 30;

/// `VmRSS` and `VmHWM` (the peak since the last reset) of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test]
async fn a_gigabyte_without_a_newline_leaves_memory_where_it_was() {
    let server = common::server(&[]).await;
    // An ordinary install first: what a running server holds anyway
    // (connections, the database's pages, the job tables) is held before
    // the measure starts.
    let (job, events) = common::install(&server.url, DEBIAN).await;
    let state = common::json(&format!("{}/api/jobs/{job}", server.url)).await;
    assert_eq!(state["state"], "succeeded", "{events:#?}");
    common::fault(
        &server,
        &format!(r#"{{"op":"ssh-init","action":"flood","bytes":{FLOOD},"times":1}}"#),
    )
    .await;
    let pid = server.pid();
    // The peak is counted from here (proc(5), clear_refs: 5).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak");
    let (before, _) = memory_kib(pid);
    let (job, events) = common::install(&server.url, DEBIAN).await;
    let (_, peak) = memory_kib(pid);

    let state = common::json(&format!("{}/api/jobs/{job}", server.url)).await;
    assert_eq!(state["state"], "succeeded", "{events:#?}");
    let flood = events
        .iter()
        .find(|e| e.message().contains("bytes cut)"))
        .unwrap_or_else(|| panic!("the flood's line, cut, in {events:#?}"));
    assert_eq!(flood.step(), "VM initialization > SSH initialization");
    assert!(flood.message().len() < 4200, "{}", flood.message().len());
    assert!(
        flood
            .message()
            .ends_with(&format!("… ({} bytes cut)", FLOOD - 4000)),
        "{}",
        &flood.message()[4000..]
    );
    let grew_mib = peak.saturating_sub(before) / 1024;
    println!("memory before {before} KiB, peak during the flood {peak} KiB (+{grew_mib} MiB)");
    assert!(grew_mib <= 20, "the flood grew pvedeck by {grew_mib} MiB");
}
