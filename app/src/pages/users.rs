use leptos::prelude::*;
use pvedeck_domain::account::{Role, UserChange, UserRow};

use crate::api::{get_users, update_user};
use crate::error::UiError;

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
                view! { <UserTable initial/> }
            })}
        </Suspense>
    }
}

#[island(lazy)]
fn UserTable(initial: Result<Vec<UserRow>, UiError>) -> impl IntoView {
    let rows = RwSignal::new(initial);
    let message = RwSignal::new(None::<(bool, String)>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            rows.set(get_users().await.and_then(|a| a));
        });
    };
    view! {
        {move || message.get().map(|(ok, text)| view! {
            <p class=if ok { "note note-ok" } else { "note error" } role="status">{text}</p>
        })}
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
