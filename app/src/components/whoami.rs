use leptos::prelude::*;
use pvedeck_domain::account::Me;

use crate::api::{get_me, logout};

/// The header's right side: who is signed in and the way out, and the
/// admin pages' links for admins.
#[component]
pub fn WhoAmI() -> impl IntoView {
    view! {
        <Suspense fallback=|| ()>
            {Suspend::new(async move {
                let me = get_me().await.and_then(|a| a).unwrap_or_default();
                view! { <Signed me/> }
            })}
        </Suspense>
    }
}

#[component]
fn Signed(me: Me) -> impl IntoView {
    let admin = me.is_admin();
    let links = admin.then(|| {
        view! {
            <a href="/users">"Users"</a>
            <a href="/audit">"Audit"</a>
        }
    });
    let person = me.principal.map(|p| {
        view! {
            <a href="/account" class="whoami" title=format!("{}: your account", p.role.as_str())>{p.name}</a>
            <SignOut/>
        }
    });
    view! { <span class="account-links">{links}{person}</span> }
}

/// Ends this browser's session and goes to the sign-in page. Not lazy:
/// it is on every page of a signed-in browser, and what it reaches — the
/// server functions' client, which every island uses — is then in the
/// main module once instead of split across many small shared modules.
#[island]
fn SignOut() -> impl IntoView {
    let sign_out = move |_| {
        leptos::task::spawn_local(async move {
            let _ = logout().await;
            #[cfg(feature = "hydrate")]
            {
                let _ = window().location().assign("/login");
            }
        });
    };
    view! { <button type="button" class="sign-out" on:click=sign_out>"Sign out"</button> }
}
