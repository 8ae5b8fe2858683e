//! Safe to put on a network (docs/security.md): what a page on another site can make
//! a browser send is refused before anything runs.

mod common;

const INSTALL: &str = r#"{"os":"debian","version":"12"}"#;

/// A POST with the headers a browser would add.
async fn post_as(url: &str, headers: &[(&str, &str)], body: Option<(&str, &str)>) -> (u16, String) {
    let mut req = reqwest::Client::new().post(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some((content_type, body)) = body {
        req = req
            .header("content-type", content_type)
            .body(body.to_string());
    }
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

/// The `qm` commands run so far.
async fn qm_runs(server: &common::Server) -> usize {
    common::commands(server)
        .await
        .iter()
        .filter(|c| c.starts_with("qm "))
        .count()
}

#[tokio::test]
async fn cross_site_requests_are_refused_before_any_command_runs() {
    let server = common::server(&[("ALLOWED_ORIGINS", "https://portal.example.org")]).await;
    let url = &server.url;
    let own = url.trim_end_matches('/');
    let before = qm_runs(&server).await;

    // A `text/plain` fetch needs no CORS preflight: the body must be JSON.
    let (status, body) = post_as(
        &format!("{url}/api/vm/install"),
        &[],
        Some(("text/plain", INSTALL)),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (
            415,
            "a request body must be JSON: Content-Type: application/json (got text/plain)"
        )
    );
    // A plain HTML form on another site posting to `/destroy`.
    let evil = [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, body) = post_as(
        &format!("{url}/api/vm/103/destroy"),
        &evil,
        Some(("application/x-www-form-urlencoded", "")),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (
            403,
            "cross-site request refused: Origin https://evil.example is not this server's (set \
             ALLOWED_ORIGINS to allow it)"
        )
    );
    // Fetch metadata without Origin says the same; so does the UI's own
    // server function route.
    let (status, _) = post_as(
        &format!("{url}/api/vm/103/destroy"),
        &[("sec-fetch-site", "same-site")],
        None,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post_as(
        &format!("{url}/fn/action"),
        &evil,
        Some(("application/json", r#"{"vmid":103,"action":"destroy"}"#)),
    )
    .await;
    assert_eq!(status, 403);
    // DNS rebinding: the attacker's name now points here, and the page is
    // "same-origin" with it; the name is not this server's.
    let (status, body) = post_as(
        &format!("{url}/api/vm/103/destroy"),
        &[
            ("host", "attacker.example:8080"),
            ("origin", "http://attacker.example:8080"),
        ],
        None,
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (
            403,
            "Host 'attacker.example:8080' is not a name of this server: set PUBLIC_URL or \
             ALLOWED_HOSTS to answer to it"
        )
    );
    assert_eq!(qm_runs(&server).await, before, "nothing ran");
    assert!(
        common::vm(url, 103).await.is_some(),
        "VM 103 is still there"
    );

    // Reads are not changes; the server's own pages, a listed origin and
    // scripts without browser headers pass.
    let (status, _) = post_as(
        &format!("{url}/api/vm/103/start"),
        &[("origin", own), ("sec-fetch-site", "same-origin")],
        None,
    )
    .await;
    assert_eq!(status, 200, "same origin");
    let (status, body) = post_as(
        &format!("{url}/api/vm/103/set/cpu"),
        &[("origin", "https://portal.example.org")],
        Some(("application/json; charset=utf-8", r#"{"cpu":2}"#)),
    )
    .await;
    assert_ne!(status, 403, "{body}");
    assert_ne!(status, 415, "{body}");
    let (status, _) = post_as(&format!("{url}/api/vm/101/stop"), &[], None).await;
    assert_eq!(status, 200, "curl");
}

#[tokio::test]
async fn actions_apply_only_to_vms_pvedeck_manages_and_the_list_marks_the_others() {
    let server = common::server(&[]).await;
    let url = &server.url;
    let before = qm_runs(&server).await;
    // 110 was made by go-pve-qemu: listed, marked, not acted on.
    let (status, body) = common::post(&format!("{url}/api/vm/110/stop")).await;
    assert_eq!(
        (status, body.as_str()),
        (
            403,
            "VM 110 is not managed by pvedeck (MANAGE=pvedeck: only VMs tagged 'pvedeck'); set \
             MANAGE=all to act on every VM"
        )
    );
    assert_eq!(qm_runs(&server).await, before, "nothing ran");
    let monitor = common::vm(url, 110).await.expect("110 is listed");
    assert_eq!(monitor["managed"], false);
    assert_eq!(common::vm(url, 101).await.expect("101")["managed"], true);
    // What pvedeck installs carries its tag, whatever order Proxmox keeps.
    let (_, events) = common::install(url, INSTALL).await;
    let vmid = events.iter().rfind(|e| !e.is_close()).expect("events").data["vm_id"]
        .as_u64()
        .expect("vm_id");
    let made = common::vm(url, vmid).await.expect("installed");
    assert_eq!(
        (made["managed"].clone(), made["os"].clone()),
        (true.into(), "debian".into())
    );
    assert!(
        common::commands(&server)
            .await
            .iter()
            .any(|c| c.starts_with(&format!("qm create {vmid} "))
                && c.contains("--tags debian;pvedeck")),
        "tagged from its first moment"
    );

    // go-pve-qemu's VMs too, when asked.
    let seed = common::server(&[("MANAGE", "pvedeck+seed")]).await;
    let (status, body) = common::post(&format!("{}/api/vm/110/stop", seed.url)).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn a_ui_login_opens_a_session_that_is_not_the_token_and_failed_logins_are_limited() {
    const TOKEN: &str = "a-token-of-at-least-16-chars";
    let server = common::server(&[("API_TOKENS", TOKEN), ("ALLOW_IPS", "127.0.0.1")]).await;
    let url = &server.url;
    let stop = r#"{"vmid":101,"action":"stop"}"#;

    // With ALLOW_IPS restricted, a wrong token used to be accepted.
    let (_, cookie, body) =
        common::call_fn(url, "login", r#"{"token":"not-the-token-at-all"}"#, None).await;
    assert!(cookie.is_none(), "{cookie:?}");
    assert!(
        body.contains("that token is not one of API_TOKENS"),
        "{body}"
    );
    assert!(body.contains("401"), "{body}");

    let (_, cookie, body) =
        common::call_fn(url, "login", &format!(r#"{{"token":"{TOKEN}"}}"#), None).await;
    let cookie = cookie.unwrap_or_else(|| panic!("no cookie: {body}"));
    assert!(
        !cookie.contains(TOKEN),
        "the cookie holds the token: {cookie}"
    );
    for part in ["HttpOnly", "SameSite=Strict", "Max-Age=43200", "Path=/"] {
        assert!(cookie.contains(part), "{part} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "no PUBLIC_URL=https: {cookie}");
    let session = common::session_of(&cookie);
    assert_eq!(session.len(), 64);

    // The session acts; without it, or after logout, nothing does.
    let (status, _, body) = common::call_fn(url, "action", stop, None).await;
    assert_eq!(status, 401, "{body}");
    let (_, _, body) = common::call_fn(url, "action", stop, Some(&session)).await;
    assert!(body.contains("Ok"), "{body}");
    let (_, cookie, _) = common::call_fn(url, "logout", "{}", Some(&session)).await;
    assert!(cookie.is_some_and(|c| c.contains("Max-Age=0")));
    let start = r#"{"vmid":101,"action":"start"}"#;
    let (status, _, body) = common::call_fn(url, "action", start, Some(&session)).await;
    assert_eq!(status, 401, "{body}");

    // Five failures a minute per address, then even the right token waits.
    for _ in 0..5 {
        let (_, _, body) =
            common::call_fn(url, "login", r#"{"token":"guess-guess-guess-guess"}"#, None).await;
        assert!(body.contains("401"), "{body}");
    }
    let (_, cookie, body) =
        common::call_fn(url, "login", &format!(r#"{{"token":"{TOKEN}"}}"#), None).await;
    assert!(cookie.is_none());
    assert!(
        body.contains("429") && body.contains("too many failed logins from 127.0.0.1"),
        "{body}"
    );
}

/// The summary line that carries a generated root password.
const ROOT_LINE: &str = "[*] Root password: ";

#[tokio::test]
async fn each_vm_gets_its_own_root_password_shown_once_and_kept_nowhere() {
    use sha_crypt::{PasswordHash, PasswordVerifier, ShaCrypt};

    let server = common::server(&[("VM_ROOT_PASSWORD", "random")]).await;
    let url = &server.url;
    let mut seen = Vec::new();
    for name in ["first", "second"] {
        let body = format!(r#"{{"os":"debian","version":"12","name":"{name}"}}"#);
        let (job, events) = common::install(url, &body).await;
        let line = events
            .iter()
            .find(|e| e.message().starts_with(ROOT_LINE))
            .unwrap_or_else(|| panic!("no root password in the live summary: {events:#?}"));
        assert_eq!(line.step(), "VM initialization > finalizing");
        let password = line.message()[ROOT_LINE.len()..].to_string();
        assert_eq!(password.len(), 20, "{password}");
        let vmid = line.data["vm_id"].as_u64().expect("vm_id");

        // The guest got a hash of exactly that password.
        let state: serde_json::Value = serde_json::from_slice(
            &std::fs::read(server.data_dir.join("sim/cluster.json")).expect("sim state"),
        )
        .expect("sim state JSON");
        let hash = state["vms"][vmid.to_string()]["inside"]["root_hash"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let parsed = PasswordHash::new(&hash).expect("a crypt hash in /etc/shadow");
        assert!(
            ShaCrypt::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok(),
            "the VM's hash is not of the password shown"
        );

        // Replayed later, the line says it was shown; nothing else has it.
        let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
        let text = detail.to_string();
        assert!(!text.contains(&password), "password kept in the job");
        assert!(
            text.contains("[*] Root password: shown once"),
            "the replay says a password was shown: {text}"
        );
        for file in [
            "pvedeck.db",
            "pvedeck.db-wal",
            "server.log",
            "sim/cluster.json",
        ] {
            let bytes = std::fs::read(server.data_dir.join(file)).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&password),
                "password in {file}"
            );
        }
        seen.push(password);
    }
    assert_ne!(seen[0], seen[1], "each VM its own password");
}

#[tokio::test]
async fn no_page_can_be_framed_and_a_page_runs_only_its_own_scripts() {
    let server = common::server(&[]).await;
    let page = reqwest::get(format!("{}/", server.url))
        .await
        .expect("the overview");
    let headers = page.headers().clone();
    let html = page.text().await.expect("html");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "same-origin");
    assert!(
        !headers.contains_key("strict-transport-security"),
        "plain HTTP"
    );
    let csp = headers["content-security-policy"].to_str().expect("ascii");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or_else(|| panic!("a nonce in {csp}"));
    // Every script the page carries is one the policy lets run.
    let scripts: Vec<&str> = html.split("<script").skip(1).collect();
    assert!(!scripts.is_empty(), "{html}");
    for script in scripts {
        let tag = script.split('>').next().unwrap_or_default();
        assert!(tag.contains(&format!("nonce=\"{nonce}\"")), "{tag}");
    }
    // A fresh nonce for every page.
    let again = reqwest::get(format!("{}/", server.url))
        .await
        .expect("again");
    let csp_again = again.headers()["content-security-policy"].clone();
    assert_ne!(csp_again.to_str().ok(), Some(csp));
    // The API's answers say the same.
    let list = reqwest::get(format!("{}/api/vm/list", server.url))
        .await
        .expect("list");
    assert_eq!(list.headers()["x-frame-options"], "DENY");
    assert!(
        list.headers()["content-security-policy"]
            .to_str()
            .is_ok_and(|p| p.contains("frame-ancestors 'none'") && !p.contains("nonce"))
    );
}

/// Sends `head` and then `body` on a connection of its own, and reads the
/// whole answer: a request as a client that will not stop would
/// send it, without a client library's own idea of when to give up.
async fn raw_request(url: &str, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(body).await.expect("body");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn bodies_above_a_megabyte_get_413_before_anything_decodes_them() {
    let server = common::server(&[]).await;
    let before = qm_runs(&server).await;
    let host = server.url.trim_start_matches("http://").to_string();
    // Announced as 50 MB: refused on its headers, before a byte of it is
    // read (none is sent).
    for path in ["/fn/action", "/api/vm/install"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: 52428800\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_request(&server.url, &head, b"").await;
        assert!(
            answer.starts_with("HTTP/1.1 413 Payload Too Large"),
            "{path}: {answer}"
        );
        assert!(
            answer.contains("the request body is larger than 1048576 bytes"),
            "{answer}"
        );
    }
    // Sent in chunks, without a length: read up to the limit, no further.
    let mut chunked = Vec::new();
    for _ in 0..17 {
        chunked.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        chunked.extend_from_slice(&[b' '; 64 * 1024]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    for path in ["/fn/action", "/api/vm/install"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_request(&server.url, &head, &chunked).await;
        assert!(
            answer.starts_with("HTTP/1.1 413 Payload Too Large"),
            "{path}: {answer}"
        );
    }
    assert_eq!(qm_runs(&server).await, before, "nothing ran");
}

/// A `GET /api/vm/list` with `token` and, when given, `X-Forwarded-For`.
async fn list_as(url: &str, token: &str, forwarded_for: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(format!("{url}/api/vm/list"))
        .bearer_auth(token);
    if let Some(client) = forwarded_for {
        req = req.header("x-forwarded-for", client);
    }
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

const TOKEN: &str = "the-one-admin-token-here";
const GUESS: &str = "a-guess-at-the-admin-token";

#[tokio::test]
async fn token_guessing_is_limited_per_client_and_a_header_alone_names_no_one() {
    let server = common::server(&[("API_TOKENS", TOKEN)]).await;
    let url = &server.url;
    for n in 0..5 {
        // A client may claim to be someone else: without TRUSTED_PROXIES
        // that is not believed, and all five count for 127.0.0.1.
        let (status, body) = list_as(url, GUESS, Some(&format!("198.51.100.{n}"))).await;
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = list_as(url, GUESS, Some("198.51.100.99")).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("too many failed tokens from 127.0.0.1: try again in"),
        "{body}"
    );
    // Locked out is the client, whatever it sends now.
    assert_eq!(list_as(url, TOKEN, None).await.0, 429);
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_is_limited_alone() {
    let server = common::server(&[("API_TOKENS", TOKEN), ("TRUSTED_PROXIES", "127.0.0.1")]).await;
    let url = &server.url;
    // The attacker, as the proxy names it (what it wrote further left is
    // its own say).
    let attacker = "203.0.113.66, 198.51.100.7";
    for _ in 0..5 {
        assert_eq!(list_as(url, GUESS, Some(attacker)).await.0, 401);
    }
    let (status, body) = list_as(url, GUESS, Some(attacker)).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("from 198.51.100.7"), "{body}");
    // Everyone else behind the same proxy goes on.
    assert_eq!(list_as(url, TOKEN, Some("198.51.100.8")).await.0, 200);
    assert_eq!(list_as(url, GUESS, Some("198.51.100.9")).await.0, 401);
    assert_eq!(list_as(url, TOKEN, None).await.0, 200, "the proxy itself");
    // An IPv6 client is its /64: another address of it does not start over.
    for n in 1..=5 {
        let client = format!("2001:db8:5:6::{n}");
        assert_eq!(list_as(url, GUESS, Some(&client)).await.0, 401);
    }
    let (status, body) = list_as(url, GUESS, Some("2001:db8:5:6:abcd::1")).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("from 2001:db8:5:6::/64"), "{body}");
    assert_eq!(list_as(url, TOKEN, Some("2001:db8:5:7::1")).await.0, 200);
}

/// The words of the start-up warning about one root password for all.
const SHARED_ROOT: &str = "VM_ROOT_PASSWORD is one password for every VM while users sign in";

#[tokio::test]
async fn a_shared_root_password_with_users_warns_at_start_up_recommending_random() {
    let log = |server: &common::Server| {
        std::fs::read_to_string(server.data_dir.join("server.log")).unwrap_or_default()
    };
    // Users sign in (API_TOKENS): every tenant's VM would hold the same hash.
    let token = ("API_TOKENS", "a-token-of-sixteen-chars");
    let dir = common::temp_dir("shared-root");
    let server = common::process_server(&dir, &[token, ("VM_ROOT_PASSWORD", "Shared!1")]).await;
    let said = log(&server);
    assert!(said.contains(SHARED_ROOT), "{said}");
    assert!(said.contains("VM_ROOT_PASSWORD=random"), "{said}");
    assert!(
        !said.contains("Shared!1"),
        "the password itself is not shown"
    );
    drop(server);

    // `random`, or nobody signing in: nothing to warn of.
    for vars in [
        vec![token, ("VM_ROOT_PASSWORD", "random")],
        vec![("VM_ROOT_PASSWORD", "Shared!1")],
    ] {
        let dir = common::temp_dir("root-ok");
        let server = common::process_server(&dir, &vars).await;
        let said = log(&server);
        assert!(!said.contains(SHARED_ROOT), "{vars:?}: {said}");
    }
}
