//! The people as the browser manages them: a user's own tokens and usage
//! (the account page), and for admins the users, their roles, groups and
//! quotas, and who owns which VM. The rules are `accounts`'; here they are
//! applied for whoever asks, and audited under their name.

use std::sync::Arc;

use pvedeck_domain::account::{Allowance, Me, Quota, Role, TokenInfo, UserChange, UserRow};
use pvedeck_support::clock::now_ms;

use super::accounts::{self, AccountError, By};
use super::quota::quota_of;
use super::tenancy::admins_only;
use super::{Actor, Engine, EngineError};
use crate::store::Store;

impl From<AccountError> for EngineError {
    fn from(e: AccountError) -> EngineError {
        match e {
            AccountError::NoSuchUser(_) | AccountError::NoSuchToken(_) => {
                EngineError::NotFound(e.to_string())
            }
            AccountError::Taken(_) => EngineError::Conflict(e.to_string()),
            AccountError::Store(e) => EngineError::Store(e),
            AccountError::Random(_) => EngineError::Internal(e.to_string()),
            other => EngineError::BadRequest(other.to_string()),
        }
    }
}

fn by(actor: &Actor) -> By {
    By {
        user: actor.name().to_string(),
        client: actor.client.map(|ip| ip.to_string()),
    }
}

impl Engine {
    /// Runs a change of the people on a blocking thread and reads them
    /// again, so that the next request sees it.
    async fn change_people<T, F>(&self, change: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, AccountError> + Send + 'static,
    {
        let directory = self.directory.clone();
        tokio::task::spawn_blocking(move || {
            let done = change(directory.store().as_ref())?;
            directory.reload()?;
            Ok::<T, EngineError>(done)
        })
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?
    }

    /// Who the browser is, how one signs in here, and (a user's) allowance.
    pub async fn me(&self, actor: &Actor) -> Result<Me, EngineError> {
        Ok(Me {
            principal: actor.principal.clone(),
            sign_in: self.sign_in_configured(),
            oidc: self.has_oidc(),
            allowance: self.allowance(actor).await?,
        })
    }

    /// The caller's own tokens; an admin's list has everyone's.
    pub fn tokens_of(&self, actor: &Actor) -> Vec<TokenInfo> {
        let people = self.directory.people();
        let mut tokens: Vec<TokenInfo> = people
            .tokens
            .values()
            .filter(|t| {
                actor.is_admin() || actor.principal.as_ref().is_some_and(|p| p.name == t.user)
            })
            .cloned()
            .collect();
        tokens.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        tokens
    }

    /// A new personal token for the caller: shown this once.
    pub async fn create_token_as(
        &self,
        actor: &Actor,
        name: String,
        expires_days: Option<u32>,
    ) -> Result<String, EngineError> {
        let user = actor
            .principal
            .as_ref()
            .filter(|p| self.directory.people().users.contains_key(&p.name))
            .map(|p| p.name.clone())
            .ok_or_else(|| {
                EngineError::bad(
                    "personal tokens are for users: sign in as one (API_TOKENS are the \
                     server's own)",
                )
            })?;
        let by = by(actor);
        self.change_people(move |store| {
            accounts::create_token(store, &by, &user, &name, expires_days, now_ms())
                .map(|(token, _)| token)
        })
        .await
    }

    /// Revokes one of the caller's tokens (an admin: anyone's). Another
    /// user's token is 404, as if it did not exist.
    pub async fn revoke_token_as(&self, actor: &Actor, id: String) -> Result<(), EngineError> {
        let theirs = self.directory.people().tokens.values().any(|t| {
            t.id == id
                && (actor.is_admin() || actor.principal.as_ref().is_some_and(|p| p.name == t.user))
        });
        if !theirs {
            return Err(AccountError::NoSuchToken(id).into());
        }
        let by = by(actor);
        self.change_people(move |store| {
            accounts::revoke_token(store, &by, &id, now_ms()).map(|_| ())
        })
        .await
    }

    /// Every user, with quota and holdings (admins).
    pub async fn users_as(&self, actor: &Actor) -> Result<Vec<UserRow>, EngineError> {
        admins_only(actor, "the list of users")?;
        let people = self.directory.people();
        let view = self.cluster.read().await?;
        let jobs = self.jobs.clone();
        let running = |id: u64| jobs.is_running(id);
        let mut rows: Vec<UserRow> = people
            .users
            .values()
            .map(|user| UserRow {
                allowance: (user.role == Role::User).then(|| Allowance {
                    quota: quota_of(&self.config, user),
                    used: self
                        .ledger
                        .usage(&view.snapshot, &people, &user.name, &running),
                }),
                tokens: people
                    .tokens
                    .values()
                    .filter(|t| t.user == user.name)
                    .count(),
                user: user.clone(),
            })
            .collect();
        rows.sort_by(|a, b| a.user.name.cmp(&b.user.name));
        Ok(rows)
    }

    /// An admin changes a user's role, groups and own quota (empty text:
    /// none of their own). A user of an OpenID provider gets role and
    /// groups from it again at their next sign-in.
    pub async fn update_user_as(
        &self,
        actor: &Actor,
        change: UserChange,
    ) -> Result<(), EngineError> {
        admins_only(actor, "changing users")?;
        let quota = match change.quota.trim() {
            "" => None,
            text => Some(Quota::parse(text).map_err(EngineError::BadRequest)?),
        };
        let groups = accounts::check_groups(&change.groups)?;
        let by = by(actor);
        self.change_people(move |store| {
            if !store.set_role(&change.name, change.role, &groups)? {
                return Err(AccountError::NoSuchUser(change.name));
            }
            accounts::audit(
                store,
                &by,
                now_ms(),
                "user change",
                &format!("user {}", change.name),
                &format!(
                    "ok: role {}, groups {}",
                    change.role.as_str(),
                    groups.join(",")
                ),
            );
            accounts::set_quota(store, &by, &change.name, quota, now_ms())
        })
        .await
    }

    /// An admin gives a VM to a user (or, with `None`, back to the
    /// admins): in the database, and in the VM's Proxmox notes.
    pub async fn assign_as(
        self: &Arc<Self>,
        actor: &Actor,
        vmid: u32,
        user: Option<String>,
    ) -> Result<(), EngineError> {
        admins_only(actor, "assigning VMs")?;
        let vm = self.locate(vmid).await?;
        if let Some(name) = &user
            && !self.directory.people().users.contains_key(name)
        {
            return Err(AccountError::NoSuchUser(name.clone()).into());
        }
        let notes = user
            .as_deref()
            .map(super::tenancy::owner_notes)
            .unwrap_or_default();
        let options = match notes.as_str() {
            "" => vec![("delete".to_string(), "description".to_string())],
            text => vec![("description".to_string(), text.to_string())],
        };
        self.proxmox.set(&vm.node, vmid, &options).await?;
        let by = by(actor);
        let cluster = self.config.cluster.clone();
        self.change_people(move |store| match user {
            Some(name) => accounts::assign(store, &by, &cluster, vmid, &name, now_ms()),
            None => {
                store.remove_owner(&cluster, vmid)?;
                accounts::audit(
                    store,
                    &by,
                    now_ms(),
                    "vm assign",
                    &format!("vm {vmid}"),
                    "ok: to the admins",
                );
                Ok(())
            }
        })
        .await
    }
}
