//! 10,000 random install bodies over HTTP (docs/development.md#property-tests): none gets a
//! 5xx, and none that is refused runs a Proxmox command — the simulated
//! cluster's command log proves it, on both lanes.
//!
//! Every body is one the server must refuse, so that the log can tell: a
//! body the request check refuses (decided here with the same `pvedeck_domain::request`
//! code) must run nothing at all; a body that passes the check is given one
//! thing the engine refuses — a VMID outside the addresses or the assignable
//! range, a reserved one, one a VM has, a node the cluster lacks — and may
//! read the cluster (`pvesh get`, `pvesm status`: it must, to know the VMID
//! is taken or the node missing) but change nothing.

mod common;

use std::time::Instant;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use pvedeck_domain::request::{Body, InstallBody};
use pvedeck_domain::rules::Limits;
use serde_json::{Map, Value};

const BODIES: usize = 10_000;
/// Bodies the request check refuses between two reads of the log.
const BATCH: usize = 100;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";

/// A valid install, the start of the text mutations.
const VALID: &str = r#"{"os":"debian","version":"12","name":"web","cpu":2,"ram":2048,"disk":"16G","user":"debian","passwd":"pw","method":"import"}"#;

/// Where the server is set up to refuse: VMIDs 241–254 are addresses but
/// outside the range, 150 is reserved.
const VARS: &[(&str, &str)] = &[("ASSIGN_IP_END", "240"), ("RESERVED", "150:fuzz")];

/// What the engine is asked that it must refuse, once the check passed.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// A VMID that is no address (`id 255 is outside 100-254`).
    NoAddress(i64),
    /// An address outside `ASSIGN_IP_START`–`ASSIGN_IP_END`.
    Unassignable(i64),
    Reserved,
    /// A VMID the seeded cluster has (101–105 on both lanes): 409.
    Taken(i64),
    UnknownNode,
}

fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

/// Text a client might send in a string field: near-valid, any characters
/// (control ones, other planes), or long.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => any_text(24),
        1 => "[\\x00-\\x1f\\x7f]{1,8}",
        1 => (1usize..65_536, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n)),
    ]
}

/// Any JSON value: numbers past every integer type, fractions, nested.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(&[1e308, -0.0, 0.5, 1e-300][..]).prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 20, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any_text(12), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A field's value: what it takes, something close, or anything at all.
fn value(field: &'static str) -> BoxedStrategy<Value> {
    let re = |re: &'static str| re.prop_map(Value::from).boxed();
    let (valid, near): (BoxedStrategy<Value>, BoxedStrategy<Value>) = match field {
        "os" => (
            prop::sample::select(&["debian", "ubuntu", "rockylinux"][..])
                .prop_map(Value::from)
                .boxed(),
            re("(Debian|arch|debian |)"),
        ),
        "version" => (
            prop::sample::select(&["11", "12", "13", "22.04", "24.04", "9"][..])
                .prop_map(Value::from)
                .boxed(),
            prop_oneof![
                prop::sample::select(&[12.0, 22.04, 1e300, -9.0][..]).prop_map(Value::from),
                (-5i64..30).prop_map(Value::from),
            ]
            .boxed(),
        ),
        "name" => (
            re("([a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?)?"),
            re("[a-zA-Z0-9_. -]{0,70}"),
        ),
        "node" => (re("pve[1-3]"), re("[a-zA-Z0-9_. -]{0,70}")),
        "id" => (
            prop_oneof![Just(0i64), 100i64..=254]
                .prop_map(Value::from)
                .boxed(),
            prop_oneof![
                -10i64..100,
                255i64..10_000,
                Just(i64::MIN),
                Just(4_294_967_397)
            ]
            .prop_map(Value::from)
            .boxed(),
        ),
        "cpu" | "ram" => (
            (-10i64..70_000).prop_map(Value::from).boxed(),
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                Just(Value::from(u64::MAX)),
                Just(Value::from(1.5))
            ]
            .boxed(),
        ),
        "disk" => (re("[0-9]{1,6}G"), re("-?[0-9]{0,9}[GgMT]?B?")),
        "user" => (
            re("[a-z_][a-z0-9_-]{0,20}"),
            re("[a-zA-Z_.][a-z0-9_-]{0,40}"),
        ),
        "passwd" => (
            re("[^\\n\\r\\x00]{0,30}"),
            text().prop_map(|t| Value::from(format!("a\n{t}"))).boxed(),
        ),
        "pubkey" => (
            Just(Value::from(KEY)).boxed(),
            prop_oneof![
                (0usize..KEY.len()).prop_map(|n| KEY[..n].to_string()),
                text().prop_map(|t| format!("{KEY}\n{t}")),
            ]
            .prop_map(Value::from)
            .boxed(),
        ),
        "method" => (
            prop::sample::select(&["import", "clone"][..])
                .prop_map(Value::from)
                .boxed(),
            re("(Clone|| import|template)"),
        ),
        _ => (text().prop_map(Value::from).boxed(), json().boxed()),
    };
    prop_oneof![12 => valid, 2 => near, 1 => json()].boxed()
}

const FIELDS: &[(&str, f64)] = &[
    ("os", 0.95),
    ("version", 0.95),
    ("name", 0.4),
    ("id", 0.3),
    ("node", 0.2),
    ("cpu", 0.4),
    ("ram", 0.4),
    ("disk", 0.4),
    ("user", 0.3),
    ("passwd", 0.3),
    ("pubkey", 0.2),
    ("method", 0.3),
];

/// An object of some of the install's fields, maybe with others.
fn object() -> impl Strategy<Value = Value> {
    let fields: Vec<BoxedStrategy<Option<Value>>> = FIELDS
        .iter()
        .map(|(f, p)| proptest::option::weighted(*p, value(f)).boxed())
        .collect();
    let extra = prop_oneof![
        4 => Just(Vec::new()),
        1 => prop::collection::vec((any_text(12), json()), 1..3),
    ];
    (fields, extra).prop_map(|(values, extra)| {
        let mut object: Map<String, Value> = extra.into_iter().collect();
        for ((name, _), value) in FIELDS.iter().zip(values) {
            if let Some(value) = value {
                object.insert(name.to_string(), value);
            }
        }
        Value::Object(object)
    })
}

/// One install body, as bytes on the wire.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let place = || any::<prop::sample::Index>();
    prop_oneof![
        // Objects, most of them near-valid.
        12 => object().prop_map(|v| v.to_string().into_bytes()),
        // Anything else JSON: arrays, numbers, strings, null.
        2 => json().prop_map(|v| v.to_string().into_bytes()),
        // A valid body cut, or with something put in: mostly no JSON.
        2 => place().prop_map(|at| {
            let mut b = VALID.as_bytes().to_vec();
            b.truncate(at.index(b.len()));
            b
        }),
        2 => (place(), prop::collection::vec(any::<u8>(), 1..6)).prop_map(|(at, junk)| {
            let mut b = VALID.as_bytes().to_vec();
            let at = at.index(b.len() + 1);
            b.splice(at..at, junk);
            b
        }),
        // A field twice, a second document, a byte-order mark, blanks.
        1 => prop::sample::select(&[
            r#"{"os":"debian","os":"ubuntu","version":"12"}"#,
            r#"{"os":"debian","version":"12"} {"os":"debian"}"#,
            "\u{feff}{\"os\":\"debian\",\"version\":\"12\"}",
            " \t\r\n",
            "",
            "{\"os\":\"debian\",\"version\":\"12\",\"name\":\"a\\ud800\"}",
        ][..])
        .prop_map(|s| s.as_bytes().to_vec()),
        // Bytes that are not UTF-8, inside a string or alone.
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|junk| {
            let mut b = br#"{"os":"debian","version":"12","name":""#.to_vec();
            b.extend(junk);
            b.extend(br#""}"#);
            b
        }),
        // Nesting in a field, within serde_json's depth limit and past it.
        1 => (1usize..2000, prop::sample::select(&[("[", "]"), ("{\"a\":", "}")][..])).prop_map(
            |(n, (open, close))| {
                let nested = format!("{}1{}", open.repeat(n), close.repeat(n));
                format!(r#"{{"os":"debian","version":"12","passwd":{nested}}}"#).into_bytes()
            }
        ),
    ]
}

/// Whether the request check (`decode` + `check`, as the server's edge
/// runs them) lets `bytes` through to the engine.
fn passes_check(bytes: &[u8]) -> bool {
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    object
        && serde_json::from_slice::<InstallBody>(bytes)
            .is_ok_and(|b| b.check(&Limits::default()).is_ok())
}

/// `bytes` (a body that passes the check) given what `refused` asks.
fn refuse(bytes: &[u8], refused: Refused) -> Vec<u8> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(bytes) else {
        panic!("a body that passed the check is an object")
    };
    match refused {
        Refused::NoAddress(id) | Refused::Unassignable(id) | Refused::Taken(id) => {
            body.insert("id".into(), id.into());
        }
        Refused::Reserved => {
            body.insert("id".into(), 150.into());
        }
        Refused::UnknownNode => {
            body.insert("node".into(), "pve9".into());
        }
    }
    let out = Value::Object(body).to_string().into_bytes();
    assert!(
        passes_check(&out),
        "{refused:?} keeps the body past the check"
    );
    out
}

fn refusal() -> impl Strategy<Value = Refused> {
    prop_oneof![
        prop::sample::select(&[-1i64, -100, 99, 255, 9000, i64::MAX, 4_294_967_397][..])
            .prop_map(Refused::NoAddress),
        (241i64..=254).prop_map(Refused::Unassignable),
        Just(Refused::Reserved),
        (101i64..=105).prop_map(Refused::Taken),
        Just(Refused::UnknownNode),
    ]
}

/// What a refused body may leave in the log: reads only.
fn is_read(command: &str) -> bool {
    command.starts_with("pvesh get ") || command.starts_with("pvesm status")
}

/// A body past the limit, announced on a connection of its own: the
/// server answers 413 on the headers alone, so only they are sent (a
/// client still writing a body the server will not read may see the
/// connection reset before the answer). Its status and text.
async fn send_huge(url: &str, bytes: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the oversized body got no answer: {answer}"));
    let text = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, text)
}

struct Log<'a> {
    server: &'a common::Server,
    seen: usize,
}

impl Log<'_> {
    /// The commands run since the last look.
    async fn new_lines(&mut self) -> Vec<String> {
        let all = common::commands(self.server).await;
        let new = all[self.seen.min(all.len())..].to_vec();
        self.seen = all.len();
        new
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_random_install_bodies_get_no_5xx_and_run_nothing() {
    let server = common::server(VARS).await;
    let url = format!("{}/api/vm/install", server.url);
    let client = reqwest::Client::new();
    let mut runner = TestRunner::deterministic();
    let (bodies, refusals) = (body(), refusal());
    let mut log = Log {
        server: &server,
        seen: 0,
    };
    // The api backend's start-up checks read; nothing else has run.
    let idle = log.new_lines().await;
    assert!(
        idle.iter().all(|c| is_read(c)),
        "an idle server ran {idle:?}"
    );

    let started = Instant::now();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let (mut unchecked, mut engine_refused, mut reads) = (0, 0, 0);
    for n in 0..BODIES {
        let mut bytes = bodies.new_tree(&mut runner).expect("body").current();
        // A valid install past the 2 MiB body limit, now and then: 413
        // before the body is read.
        let huge = n % 2500 == 1234;
        if huge {
            let mut body: Map<String, Value> = serde_json::from_str(VALID).expect("valid");
            body.insert("passwd".into(), "x".repeat(3 << 20).into());
            bytes = Value::Object(body).to_string().into_bytes();
        }
        let asked = (!huge && passes_check(&bytes)).then(|| {
            let refused = refusals.new_tree(&mut runner).expect("refusal").current();
            bytes = refuse(&bytes, refused);
            refused
        });
        if asked.is_some() && unchecked > 0 {
            let ran = log.new_lines().await;
            assert!(ran.is_empty(), "bodies the check refused ran {ran:?}");
            unchecked = 0;
        }
        let (status, text) = if huge {
            send_huge(&url, &bytes).await
        } else {
            let res = client
                .post(&url)
                .header("content-type", "application/json")
                .body(bytes.clone())
                .send()
                .await
                .expect("request");
            let status = res.status().as_u16();
            (status, res.text().await.expect("answer"))
        };
        let shown = || String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
        assert!(
            (400..500).contains(&status),
            "body {n} answered {status} ({text}): {}",
            shown()
        );
        assert!(!text.trim().is_empty(), "body {n}: {status} says nothing");
        assert!(!huge || status == 413, "body {n}: {status} {text}");
        *statuses.entry(status).or_default() += 1;
        match asked {
            Some(refused) => {
                engine_refused += 1;
                if let Refused::Taken(_) = refused {
                    assert!(
                        status == 409 || text.contains("not a node of the cluster"),
                        "body {n} ({refused:?}): {status} {text}"
                    );
                }
                let ran = log.new_lines().await;
                reads += ran.len();
                assert!(
                    ran.iter().all(|c| is_read(c)),
                    "body {n} ({refused:?}, {status} {text}) ran {ran:?}: {}",
                    shown()
                );
            }
            None => {
                unchecked += 1;
                if unchecked == BATCH {
                    let ran = log.new_lines().await;
                    assert!(ran.is_empty(), "bodies the check refused ran {ran:?}");
                    unchecked = 0;
                }
            }
        }
    }
    let ran = log.new_lines().await;
    assert!(ran.is_empty(), "bodies the check refused ran {ran:?}");
    // Every kind of refusal was tried, not only the cheap ones.
    assert!(
        engine_refused > 500,
        "{engine_refused} bodies passed the check"
    );
    assert!(
        statuses.contains_key(&409) && statuses.contains_key(&413),
        "{statuses:?}"
    );
    // The log does see what runs: a taken VMID is found by reading.
    assert!(reads > 0, "no read was logged");
    let jobs = common::json(&format!("{}/api/jobs", server.url)).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{jobs}");
    eprintln!(
        "{BODIES} bodies in {:.1}s: {statuses:?}; {engine_refused} past the check, \
         {reads} reads for them",
        started.elapsed().as_secs_f64()
    );
}
