//! Helpers shared by the integration tests: a server on a free loopback port,
//! in-process, configured only by what the test passes.

#![allow(dead_code)]

use pvedeck::config::Config;
use pvedeck::server::{Running, spawn};

pub async fn server(vars: &[(&str, &str)]) -> Running {
    let mut all = vec![("PORT", "0"), ("BIND_ADDR", "127.0.0.1")];
    all.extend_from_slice(vars);
    let config = Config::from_vars(all.iter().copied()).expect("test configuration");
    spawn(config).await.expect("server starts")
}

pub async fn get(url: &str) -> (u16, String) {
    let res = reqwest::get(url).await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

pub async fn post(url: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .post(url)
        .send()
        .await
        .expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}
