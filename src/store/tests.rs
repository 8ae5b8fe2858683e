//! The store's contract, run against both implementations: SQLite in a
//! temporary file and a real PostgreSQL (a fresh database of the test
//! process's server, `pvedeck_testkit::postgres`).

use std::sync::Arc;

use pvedeck_domain::account::{AuditEntry, Quota, Role, TokenInfo, UserInfo};
use pvedeck_domain::types::{JobKind, JobState, StepEvent, StepStatus, VmOutcome};
use pvedeck_testkit::postgres::Postgres;

use super::*;

/// Opens the same store again (a restart, another process).
type Reopen<'a> = &'a dyn Fn() -> Arc<dyn Store>;

/// Runs `test` once on SQLite and once on PostgreSQL (when the machine has
/// it; `PVEDECK_REQUIRE_POSTGRES` makes its absence a failure).
fn on_both(name: &str, test: impl Fn(Reopen<'_>)) {
    let dir = std::env::temp_dir().join(format!("pvedeck-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("pvedeck.db");
    test(&|| open(Location::Sqlite(&path)).unwrap());
    if let Some(pg) = Postgres::shared() {
        let url = pg.database();
        test(&|| open(Location::Postgres(&url)).unwrap());
    }
}

fn event(step: &str, message: &str) -> StepEvent {
    StepEvent {
        step: step.into(),
        status: StepStatus::Success,
        message: message.into(),
        vm_id: None,
        ip: None,
        host_key: None,
    }
}

fn alice() -> UserInfo {
    UserInfo {
        name: "alice".into(),
        role: Role::User,
        groups: vec!["dev".into()],
        quota: None,
        source: "local".into(),
        created: 1,
    }
}

#[test]
fn pruning_removes_ended_jobs_older_than_the_cut_with_their_events() {
    on_both("prune", |open| {
        let store = open();
        let ended = store
            .create_job("default", JobKind::Install, None, "old", 1, None, None)
            .unwrap();
        store.append(ended, 1, 2, &event("s", "m")).unwrap();
        store
            .finish(ended, JobState::Succeeded, 10, None, None)
            .unwrap();
        let running = store
            .create_job("default", JobKind::Install, None, "runs", 1, None, None)
            .unwrap();
        assert_eq!(store.prune(10).unwrap(), 0, "ended at 10: not before");
        assert_eq!(store.prune(11).unwrap(), 1);
        assert!(store.job(ended).unwrap().is_none());
        assert!(store.events(ended, 0).unwrap().is_empty());
        assert!(store.job(running).unwrap().is_some(), "a running job stays");
    });
}

#[test]
fn jobs_and_events_survive_reopening() {
    on_both("reopen", |open| {
        let id = {
            let store = open();
            let id = store
                .create_job(
                    "default",
                    JobKind::Install,
                    None,
                    "install debian 12",
                    1,
                    Some("alice"),
                    None,
                )
                .unwrap();
            let ev = StepEvent {
                step: "preparation > checking VMID".into(),
                status: StepStatus::Success,
                message: "[+] \"quoted\" ünïcode \\ back '; DROP TABLE jobs; --".into(),
                vm_id: Some(101),
                ip: Some("192.168.0.101".into()),
                host_key: Some("SHA256:abc".into()),
            };
            store.append(id, 1, 2, &ev).unwrap();
            store.set_vmid(id, 101).unwrap();
            store
                .finish(
                    id,
                    JobState::Failed,
                    3,
                    Some(VmOutcome::Kept),
                    Some("x > y"),
                )
                .unwrap();
            store.flush().unwrap();
            id
        };
        let store = open();
        assert_eq!(store.prune(3).unwrap(), 0, "it ended at 3: kept");
        let job = store.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.vmid, Some(101));
        assert_eq!(job.outcome, Some(VmOutcome::Kept));
        assert_eq!(job.failed_step.as_deref(), Some("x > y"));
        assert_eq!(job.owner.as_deref(), Some("alice"));
        let events = store.events(id, 0).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(
            events[0].event.message,
            "[+] \"quoted\" ünïcode \\ back '; DROP TABLE jobs; --"
        );
        assert_eq!(events[0].event.vm_id, Some(101));
        assert_eq!(events[0].event.host_key.as_deref(), Some("SHA256:abc"));
        assert!(store.events(id, 1).unwrap().is_empty());
        assert_eq!(store.last_seq(id).unwrap(), 1);
        assert_eq!(store.last_seq(id + 1000).unwrap(), 0);
        assert!(store.running_jobs().unwrap().is_empty());
    });
}

#[test]
fn running_jobs_carry_their_stake_and_task_and_lists_come_newest_first() {
    on_both("running", |open| {
        let store = open();
        let a = store
            .create_job(
                "default",
                JobKind::Install,
                Some(7),
                "a",
                1,
                Some("alice"),
                None,
            )
            .unwrap();
        let b = store
            .create_job(
                "default",
                JobKind::Start,
                Some(8),
                "b",
                2,
                Some("bob"),
                None,
            )
            .unwrap();
        let stake = Stake {
            vmid: 107,
            node: "pve2".into(),
            on_stop: OnStop::Destroy,
        };
        store.set_stake(a, Some(&stake)).unwrap();
        store
            .set_task(a, Some("UPID:pve2:0001:qmcreate:107:root@pam:"))
            .unwrap();
        let running = store.running_jobs().unwrap();
        assert_eq!(running.len(), 2);
        assert_eq!(running[0].job.id, a);
        assert_eq!(running[0].stake.as_ref(), Some(&stake));
        assert_eq!(
            running[0].task.as_deref(),
            Some("UPID:pve2:0001:qmcreate:107:root@pam:")
        );
        assert_eq!(running[1].stake, None, "nothing at stake yet");
        store.set_stake(a, None).unwrap();
        store.set_task(a, None).unwrap();
        let again = store.running_jobs().unwrap();
        assert_eq!(
            (again[0].stake.as_ref(), again[0].task.as_ref()),
            (None, None)
        );

        let ids =
            |jobs: Vec<pvedeck_domain::types::Job>| jobs.iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(ids(store.jobs(10).unwrap()), [b, a]);
        assert_eq!(ids(store.jobs(1).unwrap()), [b]);
        assert_eq!(ids(store.jobs_of("alice", 10).unwrap()), [a]);
        store.finish(b, JobState::Succeeded, 3, None, None).unwrap();
        assert_eq!(store.running_jobs().unwrap().len(), 1);
    });
}

#[test]
fn events_come_in_pages_in_order() {
    on_both("pages", |open| {
        let store = open();
        let id = store
            .create_job("default", JobKind::Install, None, "long", 1, None, None)
            .unwrap();
        for seq in 1..=10 {
            store
                .append(id, seq, seq as i64, &event("s", &format!("line {seq}")))
                .unwrap();
        }
        let page = store.events_page(id, 3, 4).unwrap();
        let seqs: Vec<u64> = page.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [4, 5, 6, 7]);
        assert_eq!(page[0].event.message, "line 4");
        assert_eq!(store.events(id, 0).unwrap().len(), 10);
        assert!(
            store.append(id, 10, 11, &event("s", "again")).is_err(),
            "a sequence number is written once"
        );
    });
}

#[test]
fn templates_and_identities_keep_the_last_record_of_each_vm() {
    on_both("templates", |open| {
        let store = open();
        let built = TemplateBuilt {
            vmid: 9001,
            image: "debian-12-generic-amd64.qcow2".into(),
            built: 5,
            job: 3,
        };
        store.record_template("default", &built).unwrap();
        store
            .record_template(
                "default",
                &TemplateBuilt {
                    built: 6,
                    ..built.clone()
                },
            )
            .unwrap();
        assert_eq!(
            store.templates("default").unwrap(),
            [TemplateBuilt { built: 6, ..built }]
        );
        store
            .record_identity("default", 107, "m", "ssh-ed25519 K", 2)
            .unwrap();
        store
            .record_identity("default", 107, "m2", "ssh-ed25519 K2", 3)
            .unwrap();
        assert_eq!(
            store.identities("default").unwrap(),
            vec![(107, "m2".to_string(), "ssh-ed25519 K2".to_string())]
        );
    });
}

#[test]
fn users_tokens_and_owners_round_trip_and_a_removed_user_takes_their_tokens() {
    on_both("people", |open| {
        let s = open();
        assert!(s.add_user(&alice()).unwrap());
        assert!(!s.add_user(&alice()).unwrap(), "the name is taken");
        let quota = Quota::parse("vms=2,disk=unlimited").unwrap();
        assert!(s.set_quota("alice", Some(quota)).unwrap());
        assert!(!s.set_quota("bob", Some(quota)).unwrap());
        assert_eq!(s.user("alice").unwrap().unwrap().quota, Some(quota));
        assert_eq!(s.user("bob").unwrap(), None);

        let token = TokenRow {
            info: TokenInfo {
                id: "0a1b2c3d".into(),
                user: "alice".into(),
                name: "ci".into(),
                created: 2,
                expires: Some(9),
                last_used: None,
            },
            hash: "ff".repeat(32),
        };
        s.add_token(&token).unwrap();
        s.touch_tokens(&[("0a1b2c3d".into(), 5)]).unwrap();
        s.touch_tokens(&[("0a1b2c3d".into(), 4)]).unwrap();
        assert_eq!(s.tokens().unwrap()[0].info.last_used, Some(5), "never back");
        assert_eq!(s.tokens().unwrap()[0].hash, "ff".repeat(32));

        s.set_owner("default", 101, "alice", 3).unwrap();
        s.set_owner("default", 101, "bob", 4).unwrap();
        s.set_owner("default", 102, "alice", 4).unwrap();
        s.remove_owner("default", 102).unwrap();
        assert_eq!(s.owners("default").unwrap(), [(101, "bob".to_string())]);

        let mut again = alice();
        again.role = Role::Admin;
        again.groups = vec!["ops".into()];
        s.upsert_user(&again).unwrap();
        let read = s.user("alice").unwrap().unwrap();
        assert_eq!((read.role, read.groups), (Role::Admin, vec!["ops".into()]));
        assert_eq!(read.quota, Some(quota), "a sign-in keeps the quota");
        assert!(s.set_role("alice", Role::User, &[]).unwrap());
        assert_eq!(s.users().unwrap().len(), 1);

        assert!(s.remove_user("alice").unwrap());
        assert!(!s.remove_user("alice").unwrap());
        assert!(s.tokens().unwrap().is_empty());
        assert_eq!(s.revoke_token("0a1b2c3d").unwrap(), None);
        assert_eq!(
            s.owners("default").unwrap().len(),
            1,
            "the VM keeps its owner"
        );
    });
}

#[test]
fn revoking_a_token_names_its_user() {
    on_both("revoke", |open| {
        let s = open();
        s.add_user(&alice()).unwrap();
        let token = TokenRow {
            info: TokenInfo {
                id: "feed".into(),
                user: "alice".into(),
                name: "laptop".into(),
                created: 1,
                expires: None,
                last_used: None,
            },
            hash: "ab".repeat(32),
        };
        s.add_token(&token).unwrap();
        assert!(s.add_token(&token).is_err(), "an id is taken once");
        assert_eq!(s.revoke_token("feed").unwrap().as_deref(), Some("alice"));
        assert_eq!(s.revoke_token("feed").unwrap(), None);
    });
}

#[test]
fn another_connections_change_of_the_people_moves_the_version() {
    on_both("version", |open| {
        let mine = open();
        let theirs = open();
        let before = mine.data_version().unwrap();
        theirs.add_user(&alice()).unwrap();
        let after = mine.data_version().unwrap();
        assert_ne!(before, after, "a user added elsewhere is seen");
        theirs.touch_tokens(&[("none".into(), 1)]).unwrap();
        assert_eq!(
            mine.data_version().unwrap(),
            after,
            "a token's last use is not a change of the people"
        );
    });
}

fn entry(at: i64, user: &str, target: &str) -> AuditEntry {
    AuditEntry {
        id: 0,
        at,
        user: user.into(),
        client: Some("127.0.0.1".into()),
        action: "stop".into(),
        target: Some(target.into()),
        summary: String::new(),
        outcome: "ok".into(),
    }
}

#[test]
fn audit_entries_filter_page_and_prune() {
    on_both("audit", |open| {
        let s = open();
        for (at, user, target) in [
            (1, "alice", "vm 101"),
            (2, "bob", "vm 102"),
            (3, "alice", "vm 1010"),
            (4, "alice", "vm 101"),
        ] {
            s.append_audit(&entry(at, user, target)).unwrap();
        }
        let all = |q: AuditQuery| {
            s.audit(&AuditQuery { limit: 10, ..q })
                .unwrap()
                .iter()
                .map(|e| e.at)
                .collect::<Vec<_>>()
        };
        assert_eq!(all(AuditQuery::default()), [4, 3, 2, 1]);
        let alice = Some("alice".to_string());
        assert_eq!(
            all(AuditQuery {
                user: alice.clone(),
                ..AuditQuery::default()
            }),
            [4, 3, 1]
        );
        assert_eq!(
            all(AuditQuery {
                user: Some("alice' OR '1'='1".into()),
                ..AuditQuery::default()
            }),
            [0i64; 0],
            "a value is a value"
        );
        assert_eq!(
            all(AuditQuery {
                vmid: Some(101),
                ..AuditQuery::default()
            }),
            [4, 1],
            "vm 1010 is another VM"
        );
        assert_eq!(
            all(AuditQuery {
                since: Some(2),
                until: Some(3),
                ..AuditQuery::default()
            }),
            [3, 2]
        );
        let page = s
            .audit(&AuditQuery {
                limit: 2,
                ..AuditQuery::default()
            })
            .unwrap();
        assert_eq!(
            all(AuditQuery {
                before: Some(page[1].id),
                ..AuditQuery::default()
            }),
            [2, 1]
        );
        assert_eq!(s.prune_audit(3).unwrap(), 2);
        assert_eq!(all(AuditQuery::default()), [4, 3]);
    });
}

#[test]
fn an_unreachable_postgres_is_refused_with_the_url_masked() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = format!("postgres://pvedeck:hunter2@127.0.0.1:{port}/pvedeck");
    let Err(e) = open(Location::Postgres(&url)) else {
        panic!("nothing listens on {port}");
    };
    let shown = e.to_string();
    assert!(
        shown.starts_with("DATABASE_URL=postgres://pvedeck:***@127.0.0.1"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn a_postgres_schema_is_migrated_once_and_a_newer_one_is_refused() {
    let Some(pg) = Postgres::shared() else {
        return;
    };
    let url = pg.database();
    let first = open(Location::Postgres(&url)).unwrap();
    first.add_user(&alice()).unwrap();
    drop(first);
    let again = open(Location::Postgres(&url)).unwrap();
    assert_eq!(again.users().unwrap().len(), 1, "reopening keeps the rows");
    let db = url.rsplit('/').next().unwrap();
    let applied = pg.psql_in(db, "SELECT count(*) FROM schema_migrations");
    assert_eq!(applied, "3", "every migration, once each");
    pg.psql_in(
        db,
        "INSERT INTO schema_migrations VALUES (999, 'future', 0)",
    );
    let Err(e) = open(Location::Postgres(&url)) else {
        panic!("a schema from a newer pvedeck was taken");
    };
    assert!(e.to_string().contains("version 999"), "{e}");
}

fn lease(replica: &str, until: i64) -> Lease {
    Lease {
        replica: replica.into(),
        until,
    }
}

#[test]
fn a_lapsed_job_is_taken_over_once_and_a_held_one_is_not() {
    on_both("takeover", |open| {
        let store = open();
        let held = store
            .create_job(
                "default",
                JobKind::Install,
                Some(101),
                "held",
                1,
                None,
                Some(&lease("a", 100)),
            )
            .unwrap();
        let lapsed = store
            .create_job(
                "default",
                JobKind::Install,
                Some(102),
                "lapsed",
                1,
                None,
                Some(&lease("a", 10)),
            )
            .unwrap();
        store.set_task(lapsed, Some("UPID:x")).unwrap();
        let taken = store
            .take_over("default", &lease("b", 200), 50, false)
            .unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].orphan.job.id, lapsed);
        assert_eq!(taken[0].from.as_deref(), Some("a"));
        assert_eq!(taken[0].lapsed, Some(10));
        assert_eq!(taken[0].orphan.task.as_deref(), Some("UPID:x"));
        assert!(
            store
                .take_over("default", &lease("c", 300), 60, false)
                .unwrap()
                .is_empty(),
            "b holds it now, until 200"
        );
        store.renew(&lease("a", 400)).unwrap();
        let everything = store
            .take_over("default", &lease("d", 500), 60, true)
            .unwrap();
        let ids: Vec<u64> = everything.iter().map(|t| t.orphan.job.id).collect();
        assert_eq!(
            ids,
            [held, lapsed],
            "at start-up of a lone process: every running job"
        );
    });
}

#[test]
fn a_postgres_vmid_is_held_by_one_lease_at_a_time() {
    let Some(pg) = Postgres::shared() else {
        return;
    };
    let url = pg.database();
    let a = open(Location::Postgres(&url)).unwrap();
    let b = open(Location::Postgres(&url)).unwrap();
    assert!(a.reserve_vmid("default", 101, &lease("a", 100), 0).unwrap());
    assert!(
        !b.reserve_vmid("default", 101, &lease("b", 100), 1).unwrap(),
        "a holds it"
    );
    a.renew(&lease("a", 300)).unwrap();
    assert!(
        !b.reserve_vmid("default", 101, &lease("b", 400), 200)
            .unwrap(),
        "renewed to 300"
    );
    assert!(
        b.reserve_vmid("default", 101, &lease("b", 400), 301)
            .unwrap(),
        "a's lease ran out"
    );
    b.release_vmid("default", 101, "b").unwrap();
    assert!(
        a.reserve_vmid("default", 101, &lease("a", 500), 302)
            .unwrap(),
        "released"
    );
}

/// Two stores on one fresh PostgreSQL database, `b` listening (its
/// listener has said so), and a runtime to wait for what `b` hears.
struct Listening {
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
    heard: tokio::sync::broadcast::Receiver<Notice>,
    rt: tokio::runtime::Runtime,
}

fn listening() -> Option<Listening> {
    let url = Postgres::shared()?.database();
    let a = open(Location::Postgres(&url)).unwrap();
    let b = open(Location::Postgres(&url)).unwrap();
    let mut heard = b.notices().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The listener says it listens (a Resync) before anything is sent.
    rt.block_on(async { while heard.recv().await.unwrap() != Notice::Resync {} });
    Some(Listening { a, b, heard, rt })
}

#[test]
fn a_postgres_session_is_read_by_every_store_and_closed_for_all() {
    let Some(Listening {
        a,
        b,
        mut heard,
        rt,
    }) = listening()
    else {
        return;
    };
    let now = pvedeck_support::clock::now_ms();
    a.put_session("h1", "user:alice", now + 60_000).unwrap();
    assert_eq!(
        b.session("h1", now).unwrap(),
        Some(("user:alice".into(), now + 60_000))
    );
    assert_eq!(b.session("h1", now + 60_000).unwrap(), None, "ended then");
    a.close_session("h1").unwrap();
    assert_eq!(b.session("h1", now).unwrap(), None);
    let closed = rt.block_on(async {
        loop {
            if let Notice::SessionClosed { hash } = heard.recv().await.unwrap()
                && hash == "h1"
            {
                break hash;
            }
        }
    });
    assert_eq!(closed, "h1");
}

#[test]
fn postgres_announces_events_ends_people_and_changes_to_the_others() {
    // `b` stays open: its listener is what hears.
    let Some(Listening {
        a,
        b: _b,
        mut heard,
        rt,
    }) = listening()
    else {
        return;
    };
    let job = a
        .create_job("default", JobKind::Install, None, "j", 1, None, None)
        .unwrap();
    a.append(job, 1, 2, &event("s", "m")).unwrap();
    a.finish(job, JobState::Succeeded, 3, None, None).unwrap();
    a.add_user(&alice()).unwrap();
    a.announce_change("replica-a");
    let want = [
        Notice::Event { job, seq: 1 },
        Notice::Ended { job },
        Notice::People,
        Notice::Changed {
            from: "replica-a".into(),
        },
    ];
    let got: Vec<Notice> = rt.block_on(async {
        let mut got = Vec::new();
        while got.len() < want.len() {
            match heard.recv().await.unwrap() {
                Notice::Resync => {}
                n => got.push(n),
            }
        }
        got
    });
    assert_eq!(got, want);
}

#[test]
fn each_cluster_keeps_its_own_owners_identities_templates_and_jobs() {
    on_both("clusters", |open| {
        let s = open();
        s.set_owner("east", 101, "alice", 1).unwrap();
        s.set_owner("west", 101, "bob", 2).unwrap();
        assert_eq!(s.owners("east").unwrap(), [(101, "alice".to_string())]);
        assert_eq!(s.owners("west").unwrap(), [(101, "bob".to_string())]);
        s.remove_owner("west", 101).unwrap();
        assert_eq!(
            s.owners("east").unwrap().len(),
            1,
            "east's 101 is another VM"
        );

        s.record_identity("east", 107, "m-east", "ssh-ed25519 E", 1)
            .unwrap();
        s.record_identity("west", 107, "m-west", "ssh-ed25519 W", 1)
            .unwrap();
        assert_eq!(s.identities("west").unwrap()[0].1, "m-west");
        assert_eq!(s.identities("east").unwrap()[0].1, "m-east");

        let built = |image: &str| TemplateBuilt {
            vmid: 9000,
            image: image.into(),
            built: 1,
            job: 1,
        };
        s.record_template("east", &built("a.qcow2")).unwrap();
        s.record_template("west", &built("b.qcow2")).unwrap();
        assert_eq!(s.templates("east").unwrap(), [built("a.qcow2")]);
        assert_eq!(s.templates("west").unwrap(), [built("b.qcow2")]);

        let west = s
            .create_job("west", JobKind::Install, None, "w", 1, None, None)
            .unwrap();
        s.create_job("east", JobKind::Install, None, "e", 1, None, None)
            .unwrap();
        let taken = s.take_over("west", &lease("r", 10), 5, true).unwrap();
        let ids: Vec<u64> = taken.iter().map(|t| t.orphan.job.id).collect();
        assert_eq!(ids, [west], "each cluster's engine takes its own jobs");
    });
}

#[test]
fn a_postgres_vmid_is_reserved_per_cluster() {
    let Some(pg) = Postgres::shared() else {
        return;
    };
    let url = pg.database();
    let s = open(Location::Postgres(&url)).unwrap();
    assert!(s.reserve_vmid("east", 101, &lease("a", 100), 0).unwrap());
    assert!(
        s.reserve_vmid("west", 101, &lease("b", 100), 0).unwrap(),
        "another cluster's 101"
    );
    assert!(!s.reserve_vmid("east", 101, &lease("b", 100), 1).unwrap());
    s.release_vmid("east", 101, "a").unwrap();
    assert!(s.reserve_vmid("east", 101, &lease("b", 100), 1).unwrap());
}
