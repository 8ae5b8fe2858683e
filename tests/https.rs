//! pvedeck's own HTTPS (`TLS_CERT_FILE`, `TLS_KEY_FILE`; docs/operations.md#https):
//! served with the configured certificate, HSTS on every answer, a renewed
//! certificate taken on `SIGHUP` without a restart, a broken one refused at
//! start and kept out on reload.

mod common;

use std::path::Path;

/// A self-signed certificate for 127.0.0.1 (`CA:FALSE`, so that a client
/// may trust it as its own root), written as `cert.pem` and `key.pem` in
/// `dir`; its PEM.
fn certificate(dir: &Path, name: &str) -> String {
    use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType};
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.subject_alt_names = vec![SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())];
    params.is_ca = IsCa::ExplicitNoCa;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(30);
    let cert = params.self_signed(&key).expect("certificate");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("cert.pem");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("key.pem");
    cert.pem()
}

/// A client that trusts `pem` alone.
fn client(pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem"))
        .build()
        .expect("client")
}

#[tokio::test]
async fn https_is_served_with_hsts_and_a_renewed_certificate_is_taken_on_sighup() {
    let data = common::temp_dir("https");
    let tls = common::temp_dir("https-files");
    let first = certificate(&tls, "first");
    let cert = tls.join("cert.pem").to_string_lossy().into_owned();
    let key = tls.join("key.pem").to_string_lossy().into_owned();
    let env = common::lane_env(&data, &[("TLS_CERT_FILE", &cert), ("TLS_KEY_FILE", &key)]).await;
    let (child, url, lines) = common::start_process_with_lines(&data, &env);
    let pid = child.id();
    let _server = common::Killed(child);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    let answer = client(&first)
        .get(format!("{url}/api/health"))
        .send()
        .await
        .expect("https with the first certificate");
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    // Plain HTTP on the same port is not served.
    let plain = url.replacen("https://", "http://", 1);
    assert!(
        reqwest::get(format!("{plain}/api/health"))
            .await
            .map_or(true, |r| r.status() != 200)
    );

    // A broken certificate on SIGHUP: refused, the first one stays.
    std::fs::write(tls.join("cert.pem"), "not a certificate").expect("write");
    let hup = |pid: u32| {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    };
    hup(pid);
    let said = wait_for(&lines, "SIGHUP: certificate");
    assert!(said.contains("not reloaded, the old one stays"), "{said}");
    let still = client(&first).get(format!("{url}/api/health")).send().await;
    assert!(still.is_ok_and(|r| r.status() == 200));

    // A renewed one: taken without a restart.
    let second = certificate(&tls, "second");
    hup(pid);
    let said = wait_for(&lines, "SIGHUP: certificate");
    assert!(said.contains("certificate reloaded"), "{said}");
    let renewed = client(&second)
        .get(format!("{url}/api/health"))
        .send()
        .await;
    assert!(renewed.is_ok_and(|r| r.status() == 200));
    assert!(
        client(&first)
            .get(format!("{url}/api/health"))
            .send()
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
}

#[tokio::test]
async fn a_certificate_that_cannot_be_read_stops_the_start() {
    let data = common::temp_dir("https-bad");
    let tls = common::temp_dir("https-bad-files");
    certificate(&tls, "unused");
    std::fs::write(tls.join("key.pem"), "no key here").expect("write");
    let env = common::with(
        common::base_env(&data),
        &[
            ("TLS_CERT_FILE", &tls.join("cert.pem").to_string_lossy()),
            ("TLS_KEY_FILE", &tls.join("key.pem").to_string_lossy()),
        ],
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pvedeck"))
        .current_dir(&data)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("pvedeck");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cannot serve HTTPS"), "{said}");
    assert!(said.contains("key.pem"), "{said}");
}

/// The next line of the server's log holding `needle`.
fn wait_for(lines: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the server never said '{needle}'"));
        if line.contains(needle) {
            return line;
        }
    }
}
