use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use pvedeck_domain::account::Me;
use pvedeck_domain::rules::local_path;

use crate::api::{get_me, login};
use crate::components::said::Said;

/// Where a sign-in goes back to: a page of this server.
fn local(next: Option<String>) -> String {
    next.as_deref().map_or("/", local_path).to_string()
}

/// `/login`: the OpenID Connect provider's button where one is configured,
/// and a token form (one of `API_TOKENS`, or a personal token).
#[component]
pub fn Login() -> impl IntoView {
    let next = local(use_query_map().read_untracked().get("next"));
    view! {
        <h1>"Sign in"</h1>
        <Suspense fallback=|| ()>
            {Suspend::new(async move {
                let me = get_me().await.and_then(|a| a).unwrap_or_default();
                view! { <Ways me next=next.clone()/> }
            })}
        </Suspense>
    }
}

#[component]
fn Ways(me: Me, next: String) -> impl IntoView {
    if !me.sign_in {
        return view! { <p>"This server needs no sign-in: it has no API_TOKENS, users or OpenID provider."</p> }
            .into_any();
    }
    let signed = me
        .principal
        .map(|p| view! { <p class="note note-ok">{format!("Signed in as {} ({}).", p.name, p.role.as_str())}</p> });
    let provider = me.oidc.then(|| {
        let href = format!(
            "/auth/login?next={}",
            percent_encoding::utf8_percent_encode(&next, percent_encoding::NON_ALPHANUMERIC)
        );
        view! {
            <p><a class="button primary oidc-sign-in" href=href>"Sign in with OpenID Connect"</a></p>
        }
    });
    view! {
        {signed}
        {provider}
        <LoginForm next/>
    }
    .into_any()
}

#[island(lazy)]
fn LoginForm(next: String) -> impl IntoView {
    let token = RwSignal::new(String::new());
    let message = RwSignal::new(None::<(bool, String)>);
    let next = StoredValue::new(next);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let value = token.get();
        leptos::task::spawn_local(async move {
            match login(value).await.and_then(|a| a) {
                Ok(()) => {
                    message.set(Some((true, "Signed in.".to_string())));
                    #[cfg(feature = "hydrate")]
                    {
                        let _ = window().location().assign(&next.get_value());
                    }
                }
                Err(e) => message.set(Some((false, e.message))),
            }
        });
    };
    let _ = next;
    view! {
        <form class="vm-form" on:submit=submit>
            <div class="field">
                <label for="token">"API token"</label>
                <input id="token" type="password" autocomplete="current-password"
                    prop:value=move || token.get()
                    on:input=move |ev| token.set(event_target_value(&ev))/>
                <p class="hint">"One of API_TOKENS, or a personal token from your account page."</p>
            </div>
            <button type="submit" class="primary">"Sign in with a token"</button>
        </form>
        <Said message/>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_returns_to_a_local_page_only() {
        assert_eq!(local(Some("/vm/101".into())), "/vm/101");
        assert_eq!(local(Some("//evil.example".into())), "/");
        assert_eq!(local(Some("https://evil.example".into())), "/");
        assert_eq!(local(None), "/");
    }
}
