//! `/metrics` after real work: the names the README documents are there,
//! counted, and nothing in them belongs to a user.

mod common;

const DEBIAN: &str = r#"{"os":"debian","version":"12","name":"secret-project-vm"}"#;

/// The value of the sample `series` (name and labels, exactly), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn an_install_and_a_failed_one_are_counted_by_kind_step_operation_and_route() {
    let s = common::server(&[]).await;
    let (_, events) = common::install(&s.url, DEBIAN).await;
    assert!(events.iter().any(|e| e.message() == "[*] VMID: 106"));
    common::fault(&s, r#"{"op":"create","action":"fail"}"#).await;
    let _ = common::post_sse(&format!("{}/api/vm/install", s.url), DEBIAN).await;
    let (status, _) = common::get(&format!("{}/api/vm/4242/status", s.url)).await;
    assert_eq!(status, 404);

    let res = reqwest::get(format!("{}/metrics", s.url)).await.unwrap();
    assert_eq!(res.status(), 200);
    let kind = res.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = res.text().await.unwrap();

    let counted =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}:\n{text}"));
    assert_eq!(
        counted(r#"pvedeck_jobs_started_total{kind="install"}"#),
        2.0
    );
    assert_eq!(
        counted(r#"pvedeck_jobs_finished_total{kind="install",outcome="succeeded"}"#),
        1.0
    );
    assert_eq!(
        counted(r#"pvedeck_jobs_finished_total{kind="install",outcome="failed"}"#),
        1.0
    );
    assert_eq!(
        counted(
            r#"pvedeck_step_duration_seconds_count{step="VM creation > importing disk image",outcome="success"}"#
        ),
        1.0
    );
    assert_eq!(
        counted(
            r#"pvedeck_step_duration_seconds_count{step="VM creation > creating VM",outcome="error"}"#
        ),
        1.0
    );
    assert!(counted(r#"pvedeck_pve_call_duration_seconds_count{operation="import_disk"}"#) >= 1.0);
    assert!(counted(r#"pvedeck_pve_call_failures_total{operation="create"}"#) >= 1.0);
    assert!(counted(r#"pvedeck_snapshot_refreshes_total{outcome="ok"}"#) >= 1.0);
    assert!(counted("pvedeck_snapshot_age_seconds") >= 0.0);
    assert_eq!(
        counted("pvedeck_sse_followers"),
        0.0,
        "every stream has ended"
    );
    assert_eq!(
        counted(
            r#"pvedeck_http_requests_total{route="/api/vm/install",method="POST",status="200"}"#
        ),
        2.0
    );
    assert_eq!(
        counted(
            r#"pvedeck_http_requests_total{route="/api/vm/{id}/status",method="GET",status="404"}"#
        ),
        1.0,
        "a route is its template, not the path as sent"
    );
    assert!(!text.contains("4242"));
    assert!(!text.contains("secret-project-vm"), "no VM names");
    assert!(!text.contains(&common::ip(106)), "no addresses");
    assert!(text.ends_with("# EOF\n"));
}

#[tokio::test]
async fn metrics_are_for_admins_once_sign_in_is_configured_and_show_no_token() {
    const TOKEN: &str = "metrics-test-token-0123456789abcdef";
    let s = common::server(&[("API_TOKENS", TOKEN)]).await;
    let (status, refused) = common::post_json(&format!("{}/api/vm/install", s.url), DEBIAN).await;
    assert_eq!(status, 401, "{refused}");
    let (status, text) = common::get(&format!("{}/metrics", s.url)).await;
    assert_eq!(status, 401, "an anonymous read is refused: {text}");
    let res = reqwest::Client::new()
        .get(format!("{}/metrics", s.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    assert!(!text.contains(TOKEN));
    assert_eq!(
        sample(
            &text,
            r#"pvedeck_http_requests_total{route="/api/vm/install",method="POST",status="401"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"pvedeck_jobs_started_total{kind="install"}"#),
        None,
        "a refused request starts no job"
    );
}
