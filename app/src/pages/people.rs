use leptos::prelude::*;
use pvedeck_domain::account::{AuditEntry, AuditFilter, Role, TokenInfo, UserChange, UserRow};
use pvedeck_domain::format::utc;
use serde::{Deserialize, Serialize};

use crate::api::{create_token, get_audit, get_tokens, get_users, revoke_token, update_user};
use crate::components::said::Said;
use crate::error::UiError;

/// What the people's pages show live (`/account`, `/users`, `/audit`): one island for the three, so that
/// they add one split point to the bundle rather than three (wasm-split
/// makes a module of the code each set of islands shares: every island
/// more multiplies the small modules every page loads).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Panel {
    Tokens(Result<Vec<TokenInfo>, UiError>),
    Users(Result<Vec<UserRow>, UiError>),
    Audit(Result<Vec<AuditEntry>, UiError>),
}

#[island(lazy)]
pub fn People(panel: Panel) -> impl IntoView {
    match panel {
        Panel::Tokens(initial) => view! { <Tokens initial/> }.into_any(),
        Panel::Users(initial) => view! { <UserTable initial/> }.into_any(),
        Panel::Audit(initial) => view! { <AuditTable initial/> }.into_any(),
    }
}

/// The account page's tokens: create (shown once), revoke.
#[component]
pub fn Tokens(initial: Result<Vec<TokenInfo>, UiError>) -> impl IntoView {
    let tokens = RwSignal::new(initial);
    let name = RwSignal::new(String::new());
    let days = RwSignal::new(String::new());
    let shown = RwSignal::new(None::<String>);
    let message = RwSignal::new(None::<String>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            tokens.set(get_tokens().await.and_then(|a| a));
        });
    };
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = days.get();
        let expires = match typed.trim() {
            "" => None,
            n => match n.parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    message.set(Some("Days must be a whole number from 1.".to_string()));
                    return;
                }
            },
        };
        let label = name.get();
        leptos::task::spawn_local(async move {
            match create_token(label, expires).await.and_then(|a| a) {
                Ok(token) => {
                    shown.set(Some(token));
                    message.set(None);
                    name.set(String::new());
                    reload();
                }
                Err(e) => message.set(Some(e.message)),
            }
        });
    };
    let revoke = move |id: String| {
        leptos::task::spawn_local(async move {
            match revoke_token(id.clone()).await.and_then(|a| a) {
                Ok(()) => {
                    message.set(Some(format!("Token {id} revoked.")));
                    reload();
                }
                Err(e) => message.set(Some(e.message)),
            }
        });
    };
    let rows = move || tokens.get().unwrap_or_default();
    view! {
        {move || shown.get().map(|token| view! {
            <div class="note note-ok token-shown" role="status">
                <p>"Your new token (copy it now: it is not shown again):"</p>
                <code class="token-value">{token}</code>
            </div>
        })}
        {move || message.get().map(|m| view! { <p class="note error" role="alert">{m}</p> })}
        <div class="table-wrap" tabindex="0" role="region" aria-label="API tokens">
            <table class="tokens-table">
                <thead>
                    <tr>
                        <th scope="col">"Id"</th>
                        <th scope="col">"User"</th>
                        <th scope="col">"Name"</th>
                        <th scope="col">"Created (UTC)"</th>
                        <th scope="col">"Expires"</th>
                        <th scope="col">"Last used"</th>
                        <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                    </tr>
                </thead>
                <tbody>
                    <For each=rows key=|t| t.id.clone() let:token>
                        <tr data-token=token.id.clone()>
                            <td><code>{token.id.clone()}</code></td>
                            <td>{token.user.clone()}</td>
                            <td>{token.name.clone()}</td>
                            <td>{utc(token.created)}</td>
                            <td>{token.expires.map_or_else(|| "never".to_string(), utc)}</td>
                            <td>{token.last_used.map_or_else(|| "never".to_string(), utc)}</td>
                            <td>
                                <button type="button" class="revoke"
                                    aria-label=format!("Revoke token {}", token.id)
                                    on:click={
                                        let id = token.id.clone();
                                        move |_| revoke(id.clone())
                                    }>"Revoke"</button>
                            </td>
                        </tr>
                    </For>
                </tbody>
            </table>
        </div>
        <form class="inline-form token-form" on:submit=create>
            <label for="token-name">"Name"</label>
            <input id="token-name" type="text" placeholder="ci, laptop…"
                prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
            <label for="token-days">"Expires after (days)"</label>
            <input id="token-days" type="number" min="1" placeholder="never"
                prop:value=move || days.get() on:input=move |ev| days.set(event_target_value(&ev))/>
            <button type="submit" class="primary">"Create token"</button>
        </form>
    }
}

/// The users page's table, a row saved at a time.
#[component]
pub fn UserTable(initial: Result<Vec<UserRow>, UiError>) -> impl IntoView {
    let rows = RwSignal::new(initial);
    let message = RwSignal::new(None::<(bool, String)>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            rows.set(get_users().await.and_then(|a| a));
        });
    };
    view! {
        <Said message/>
        {move || match rows.get() {
            Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Ok(list) if list.is_empty() => view! { <p>"No users yet."</p> }.into_any(),
            Ok(list) => view! {
                <div class="table-wrap" tabindex="0" role="region" aria-label="Users">
                    <table class="users-table">
                        <thead>
                            <tr>
                                <th scope="col">"User"</th>
                                <th scope="col">"Role"</th>
                                <th scope="col">"Groups"</th>
                                <th scope="col">"Own quota"</th>
                                <th scope="col">"Holds"</th>
                                <th scope="col" class="num">"Tokens"</th>
                                <th scope="col"><span class="visually-hidden">"Save"</span></th>
                            </tr>
                        </thead>
                        <tbody>
                            {list.into_iter().map(|row| view! { <UserLine row message reload/> }).collect_view()}
                        </tbody>
                    </table>
                </div>
            }.into_any(),
        }}
    }
}

#[component]
fn UserLine(
    row: UserRow,
    message: RwSignal<Option<(bool, String)>>,
    reload: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let name = row.user.name.clone();
    let admin = RwSignal::new(row.user.role == Role::Admin);
    let groups = RwSignal::new(row.user.groups.join(", "));
    let quota = RwSignal::new(row.user.quota.map(|q| q.text()).unwrap_or_default());
    let holds = match &row.allowance {
        Some(a) => a.used.against(a.quota),
        None => "unlimited (admin)".to_string(),
    };
    let id = |what: &str| format!("{what}-{}", row.user.name);
    let save = {
        let name = name.clone();
        move |_| {
            let change = UserChange {
                name: name.clone(),
                role: if admin.get() { Role::Admin } else { Role::User },
                groups: groups
                    .get()
                    .split([',', ' '])
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect(),
                quota: quota.get(),
            };
            let name = name.clone();
            leptos::task::spawn_local(async move {
                match update_user(change).await.and_then(|a| a) {
                    Ok(()) => {
                        message.set(Some((true, format!("{name} saved."))));
                        reload();
                    }
                    Err(e) => message.set(Some((false, format!("{name}: {}", e.message)))),
                }
            });
        }
    };
    view! {
        <tr data-user=name.clone()>
            <th scope="row">{name.clone()}<span class="hint">{format!(" ({})", row.user.source)}</span></th>
            <td>
                <label class="check">
                    <input id=id("admin") type="checkbox" prop:checked=move || admin.get()
                        on:change=move |ev| admin.set(event_target_checked(&ev))/>
                    " admin"
                </label>
            </td>
            <td>
                <label class="visually-hidden" for=id("groups")>{format!("Groups of {name}")}</label>
                <input id=id("groups") type="text" prop:value=move || groups.get()
                    on:input=move |ev| groups.set(event_target_value(&ev))/>
            </td>
            <td>
                <label class="visually-hidden" for=id("quota")>{format!("Quota of {name}")}</label>
                <input id=id("quota") type="text" placeholder="vms=5,cores=16" prop:value=move || quota.get()
                    on:input=move |ev| quota.set(event_target_value(&ev))/>
            </td>
            <td class="usage">{holds}</td>
            <td class="num">{row.tokens}</td>
            <td><button type="button" class="save" on:click=save>"Save"</button></td>
        </tr>
    }
}

/// The audit page's table, filtered, a page at a time.
#[component]
pub fn AuditTable(initial: Result<Vec<AuditEntry>, UiError>) -> impl IntoView {
    let entries = RwSignal::new(initial);
    let user = RwSignal::new(String::new());
    let vmid = RwSignal::new(String::new());
    let filter = move |before: Option<u64>| AuditFilter {
        user: Some(user.get()).filter(|u| !u.trim().is_empty()),
        vmid: vmid.get().trim().parse().ok(),
        before,
    };
    let load = move |before: Option<u64>| {
        let asked = filter(before);
        leptos::task::spawn_local(async move {
            entries.set(get_audit(asked).await.and_then(|a| a));
        });
    };
    let search = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        load(None);
    };
    let older = move |_| {
        let last = entries.with(|e| e.as_ref().ok().and_then(|list| list.last()).map(|e| e.id));
        load(last);
    };
    let rows = move || entries.get().unwrap_or_default();
    view! {
        <form class="inline-form audit-filter" on:submit=search>
            <div class="field">
                <label for="audit-user">"User"</label>
                <input id="audit-user" type="text" prop:value=move || user.get()
                    on:input=move |ev| user.set(event_target_value(&ev))/>
            </div>
            <div class="field">
                <label for="audit-vm">"VM"</label>
                <input id="audit-vm" type="number" min="100" prop:value=move || vmid.get()
                    on:input=move |ev| vmid.set(event_target_value(&ev))/>
            </div>
            <button type="submit" class="primary">"Filter"</button>
        </form>
        {move || entries.get().err().map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
        <div class="table-wrap" tabindex="0" role="region" aria-label="Audit log">
            <table class="audit-table">
                <thead>
                    <tr>
                        <th scope="col">"When (UTC)"</th>
                        <th scope="col">"Who"</th>
                        <th scope="col">"From"</th>
                        <th scope="col">"Action"</th>
                        <th scope="col">"Target"</th>
                        <th scope="col">"What"</th>
                        <th scope="col">"Outcome"</th>
                    </tr>
                </thead>
                <tbody>
                    <For each=rows key=|e| e.id let:entry>
                        <tr data-audit=entry.id>
                            <td>{utc(entry.at)}</td>
                            <td>{entry.user.clone()}</td>
                            <td>{entry.client.clone().unwrap_or_default()}</td>
                            <td>{entry.action.clone()}</td>
                            <td>{entry.target.clone().unwrap_or_default()}</td>
                            <td>{entry.summary.clone()}</td>
                            <td>{entry.outcome.clone()}</td>
                        </tr>
                    </For>
                </tbody>
            </table>
        </div>
        <p><button type="button" class="older" on:click=older>"Older entries"</button></p>
    }
}
