use leptos::prelude::*;

use crate::api::{login, logout, needs_login};

/// `/login`: when `API_TOKENS` is set, a token opens a session for the UI.
#[component]
pub fn Login() -> impl IntoView {
    view! {
        <h1>"Log in"</h1>
        <Suspense fallback=|| ()>
            {Suspend::new(async move {
                match needs_login().await {
                    Ok(false) => view! { <p>"This server needs no login: it has no API_TOKENS."</p> }.into_any(),
                    _ => view! { <LoginForm/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[island(lazy)]
fn LoginForm() -> impl IntoView {
    let token = RwSignal::new(String::new());
    let message = RwSignal::new(None::<(bool, String)>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let value = token.get();
        leptos::task::spawn_local(async move {
            message.set(Some(match login(value).await.and_then(|a| a) {
                Ok(()) => (
                    true,
                    "Logged in: this browser may now change the cluster.".to_string(),
                ),
                Err(e) => (false, e.message),
            }));
        });
    };
    view! {
        <form class="vm-form" on:submit=submit>
            <div class="field">
                <label for="token">"API token"</label>
                <input id="token" type="password" autocomplete="current-password"
                    prop:value=move || token.get()
                    on:input=move |ev| token.set(event_target_value(&ev))/>
            </div>
            <button type="submit" class="primary">"Log in"</button>
            <button type="button" on:click=move |_| {
                leptos::task::spawn_local(async move {
                    message.set(Some(match logout().await.and_then(|a| a) {
                        Ok(()) => (true, "Logged out.".to_string()),
                        Err(e) => (false, e.message),
                    }));
                });
            }>"Log out"</button>
        </form>
        {move || message.get().map(|(ok, text)| view! {
            <p class=if ok { "note note-ok" } else { "note error" } role="status">{text}</p>
        })}
    }
}
