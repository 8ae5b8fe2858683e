use leptos::prelude::*;
use pvedeck_domain::account::{Me, TokenInfo};
use pvedeck_domain::format::utc;

use crate::api::{create_token, get_me, get_tokens, revoke_token};
use crate::error::UiError;

/// `/account`: who you are, what you hold against your quota, and your
/// personal API tokens (for scripts and `pvedeck-cli`).
#[component]
pub fn Account() -> impl IntoView {
    view! {
        <h1>"Your account"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading your account…"</p> }>
            {Suspend::new(async move {
                let me = get_me().await.and_then(|a| a);
                let tokens = get_tokens().await.and_then(|a| a);
                view! { <AccountView me tokens/> }
            })}
        </Suspense>
    }
}

#[component]
fn AccountView(me: Result<Me, UiError>, tokens: Result<Vec<TokenInfo>, UiError>) -> impl IntoView {
    let me = match me {
        Ok(me) => me,
        Err(e) => return view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
    };
    let Some(principal) = me.principal.clone() else {
        return view! { <p>"Not signed in: this server needs no sign-in, or you have not signed in."</p> }
            .into_any();
    };
    let groups = if principal.groups.is_empty() {
        "none".to_string()
    } else {
        principal.groups.join(", ")
    };
    let usage = match &me.allowance {
        Some(a) => a.used.against(a.quota),
        None => "no quota: admins are unlimited".to_string(),
    };
    view! {
        <dl class="facts">
            <dt>"Name"</dt><dd class="account-name">{principal.name.clone()}</dd>
            <dt>"Role"</dt><dd>{principal.role.as_str()}</dd>
            <dt>"Groups"</dt><dd>{groups}</dd>
            <dt>"Usage"</dt><dd class="usage">{usage}</dd>
        </dl>
        <h2>"API tokens"</h2>
        <p class="lead">
            "A personal token acts as you on /api and with pvedeck-cli "
            "(PVEDECK_TOKEN). It is shown once, when made; pvedeck keeps only its hash."
        </p>
        <Tokens initial=tokens/>
    }
    .into_any()
}

#[island(lazy)]
fn Tokens(initial: Result<Vec<TokenInfo>, UiError>) -> impl IntoView {
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
