//! The server binary's admin commands (`pvedeck user …`, `pvedeck token …`,
//! `pvedeck vm assign`): they work on `DATA_DIR`'s database whether or not a
//! server runs on it (a running one reads the change within seconds), print
//! what they did, and exit 2 with the reason on a refusal.

use std::fmt::Write as _;

use clap::Subcommand;
use pvedeck_domain::account::{Quota, Role};
use pvedeck_support::clock::now_ms;

use crate::engine::accounts::{self, AccountError, By};
use crate::store::Location;

#[derive(Debug, Subcommand)]
pub enum Admin {
    /// Users: add, list, remove, set a quota.
    #[command(subcommand)]
    User(UserCommand),
    /// Personal API tokens: create, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// VM ownership.
    #[command(subcommand)]
    Vm(VmCommand),
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Adds a user (a `user` unless --admin).
    Add {
        name: String,
        /// An administrator: everything, as API_TOKENS.
        #[arg(long)]
        admin: bool,
        /// A group the user is in (QUOTA_GROUP_<name>); repeatable.
        #[arg(long = "group", value_name = "G")]
        groups: Vec<String>,
    },
    /// Lists the users.
    List,
    /// Removes a user and their tokens; their VMs keep them as owner.
    Remove { name: String },
    /// Sets a user's own quota: vms=N,cores=N,memory=GIB,disk=GIB (any of
    /// them, each a number or `unlimited`), or `default` to clear it.
    Quota { name: String, quota: String },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Creates a personal token for a user: the token alone on stdout,
    /// its id on stderr. It is shown this once.
    Create {
        /// The user it acts as.
        user: String,
        /// Days until it stops working (none: it does not expire).
        #[arg(long, value_name = "N")]
        expires_days: Option<u32>,
        /// What it is for (shown in lists).
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revokes a token by its id.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Gives a VM to a user.
    Assign {
        vmid: u32,
        user: String,
        /// The VM's cluster (`CLUSTERS`); the default one when absent.
        #[arg(long)]
        cluster: Option<String>,
    },
}

/// The cluster `/api/vm/:id` means.
fn default_cluster() -> String {
    pvedeck_config::clusters::default_of(std::env::var("CLUSTERS").ok().as_deref())
}

/// What a command prints: on stdout, and on stderr.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Printed {
    pub out: String,
    pub err: String,
}

/// Runs a command on the store at `location` (`DATABASE_URL`, or the
/// SQLite file in `DATA_DIR`).
pub fn run(location: Location<'_>, command: Admin) -> Result<Printed, AccountError> {
    let store = crate::store::open(location)?;
    let store = store.as_ref();
    let by = By::command();
    let now = now_ms();
    let mut printed = Printed::default();
    match command {
        Admin::User(UserCommand::Add {
            name,
            admin,
            groups,
        }) => {
            let role = if admin { Role::Admin } else { Role::User };
            let user = accounts::add_user(store, &by, &name, role, &groups, now)?;
            let groups = match user.groups.as_slice() {
                [] => String::new(),
                g => format!(", groups {}", g.join(", ")),
            };
            printed.out = format!("user {} added: {}{groups}\n", user.name, role.as_str());
        }
        Admin::User(UserCommand::List) => {
            let tokens = store.tokens()?;
            let mut out = String::from("NAME\tROLE\tGROUPS\tQUOTA\tSOURCE\tTOKENS\n");
            for user in store.users()? {
                let count = tokens.iter().filter(|t| t.info.user == user.name).count();
                let _ = writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}\t{count}",
                    user.name,
                    user.role.as_str(),
                    if user.groups.is_empty() {
                        "-".to_string()
                    } else {
                        user.groups.join(",")
                    },
                    user.quota.map_or_else(|| "-".to_string(), Quota::text),
                    user.source,
                );
            }
            printed.out = out;
        }
        Admin::User(UserCommand::Remove { name }) => {
            accounts::remove_user(store, &by, &name, now)?;
            printed.out = format!("user {name} removed, with their tokens\n");
        }
        Admin::User(UserCommand::Quota { name, quota }) => {
            let quota = match quota.trim() {
                "default" => None,
                text => Some(Quota::parse(text).map_err(AccountError::Bad)?),
            };
            accounts::set_quota(store, &by, &name, quota, now)?;
            printed.out = match quota {
                Some(q) => format!("user {name}: quota {}\n", q.text()),
                None => format!("user {name}: own quota cleared (group or default applies)\n"),
            };
        }
        Admin::Token(TokenCommand::Create {
            user,
            expires_days,
            name,
        }) => {
            let (token, info) =
                accounts::create_token(store, &by, &user, &name, expires_days, now)?;
            printed.out = format!("{token}\n");
            let expiry = info.expires.map_or_else(
                || "does not expire".to_string(),
                |ms| format!("expires {} UTC", pvedeck_domain::format::utc(ms)),
            );
            printed.err = format!("token {} created for {user}, {expiry}\n", info.id);
        }
        Admin::Token(TokenCommand::Revoke { id }) => {
            let user = accounts::revoke_token(store, &by, &id, now)?;
            printed.out = format!("token {id} of {user} revoked\n");
        }
        Admin::Vm(VmCommand::Assign {
            vmid,
            user,
            cluster,
        }) => {
            if !(100..=999_999_999).contains(&vmid) {
                return Err(AccountError::Bad(format!(
                    "invalid VM id '{vmid}': a VMID is a number from 100"
                )));
            }
            let cluster = cluster.unwrap_or_else(default_cluster);
            if !pvedeck_config::clusters::is_cluster_name(&cluster) {
                return Err(AccountError::Bad(format!(
                    "invalid cluster '{cluster}': letters and digits, from a letter"
                )));
            }
            accounts::assign(store, &by, &cluster, vmid, &user, now)?;
            printed.out = format!("VM {vmid} assigned to {user}\n");
        }
    }
    Ok(printed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_print_what_they_did_and_refuse_with_a_reason() {
        let dir = std::env::temp_dir().join(format!("pvedeck-admin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = dir.join("pvedeck.db");
        let dir = Location::Sqlite(&db);
        let added = run(
            dir.clone(),
            Admin::User(UserCommand::Add {
                name: "alice".into(),
                admin: false,
                groups: vec!["dev".into()],
            }),
        )
        .unwrap();
        assert_eq!(added.out, "user alice added: user, groups dev\n");
        let again = run(
            dir.clone(),
            Admin::User(UserCommand::Add {
                name: "alice".into(),
                admin: true,
                groups: vec![],
            }),
        );
        assert_eq!(
            again.map_err(|e| e.to_string()),
            Err("user 'alice' already exists".to_string())
        );
        let quota = run(
            dir.clone(),
            Admin::User(UserCommand::Quota {
                name: "alice".into(),
                quota: "vms=2,cpus=3".into(),
            }),
        );
        assert!(
            quota
                .unwrap_err()
                .to_string()
                .contains("'cpus' is not a measure")
        );
        let token = run(
            dir.clone(),
            Admin::Token(TokenCommand::Create {
                user: "alice".into(),
                expires_days: Some(7),
                name: "ci".into(),
            }),
        )
        .unwrap();
        assert!(token.out.starts_with(accounts::TOKEN_PREFIX), "{token:?}");
        assert_eq!(token.out.lines().count(), 1, "the token alone");
        assert!(
            token.err.contains("created for alice, expires"),
            "{token:?}"
        );
        let listed = run(dir.clone(), Admin::User(UserCommand::List)).unwrap();
        assert!(
            listed.out.contains("alice\tuser\tdev\t-\tlocal\t1"),
            "{}",
            listed.out
        );
        let assign = run(
            dir.clone(),
            Admin::Vm(VmCommand::Assign {
                vmid: 101,
                user: "bob".into(),
                cluster: None,
            }),
        );
        assert_eq!(assign.unwrap_err().to_string(), "no user 'bob'");
    }
}
