use crate::api::get_users;
use crate::pages::people::{Panel, People};
use leptos::prelude::*;

/// `/users` (admins): every user, their role, groups, own quota and what
/// they hold; each row saved on its own.
#[component]
pub fn Users() -> impl IntoView {
    view! {
        <h1>"Users"</h1>
        <p class="lead">
            "People are added by their first OpenID Connect sign-in, or with "
            <code>"pvedeck user add"</code>". A quota left empty is the user's groups' "
            "(QUOTA_GROUP_<name>) or QUOTA_DEFAULT; admins have none."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Reading the users…"</p> }>
            {Suspend::new(async move {
                let initial = get_users().await.and_then(|a| a);
                view! { <People panel=Panel::Users(initial)/> }
            })}
        </Suspense>
    }
}
