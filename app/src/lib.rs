//! The pvedeck web UI: one Leptos app, rendered on the server (`ssr`) and
//! hydrated in the browser (`hydrate`). What it shows and sends is
//! `pvedeck-domain`'s vocabulary, the same the server and the client use.
// `AnyView` of a job panel nests deep enough in its async hydration types
// to pass the default limit.
#![recursion_limit = "256"]

pub mod api;
#[cfg(feature = "ssr")]
pub mod backend;
#[cfg(feature = "ssr")]
pub mod charts;
mod codec;
mod components;
pub mod error;
mod keys;
#[cfg(feature = "hydrate")]
mod live;
mod pages;
mod refresh;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode,
    components::{A, Route, Router, Routes},
    path,
};

use components::whoami::WhoAmI;
use pages::account::Account;
use pages::audit::Audit;
use pages::console::ConsolePage;
use pages::jobs::{JobPage, Jobs};
use pages::login::Login;
use pages::new_vm::NewVm;
use pages::node::NodePage;
use pages::templates::Templates;
use pages::users::Users;
use pages::vm::VmPage;
use pages::{not_found::NotFound, overview::Overview};

/// The stem of the built files under `/pkg` (`pvedeck.js`, `pvedeck_bg.wasm`,
/// `pvedeck.css`).
pub const OUTPUT_NAME: &str = "pvedeck";

/// Sets `data-hydrated="true"` on `<main>` once the browser has hydrated
/// the page's islands (they come before it, and the browser hydrates in
/// document order): tests and styles can tell a live page from
/// server-rendered HTML.
#[island]
fn Hydrated() -> impl IntoView {
    #[cfg(feature = "hydrate")]
    if let Ok(Some(main)) = document().query_selector("main") {
        let _ = main.set_attribute("data-hydrated", "true");
    }
}

/// The HTML document around the app, rendered on the server only.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options islands=true/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();

    view! {
        <Stylesheet id="leptos" href=format!("/pkg/{OUTPUT_NAME}.css")/>
        <Title text="pvedeck"/>
        <Router>
            <header class="topbar">
                <A href="/" attr:class="brand">"pvedeck"</A>
                <nav aria-label="main">
                    <A href="/" exact=true>"Overview"</A>
                    <A href="/new">"New VM"</A>
                    <A href="/templates">"Templates"</A>
                    <A href="/jobs">"Jobs"</A>
                </nav>
                <WhoAmI/>
            </header>
            <main data-hydrated="false">
                <Routes fallback=NotFound>
                    <Route path=path!("/") view=Overview ssr=SsrMode::Async/>
                    <Route path=path!("/new") view=NewVm ssr=SsrMode::Async/>
                    <Route path=path!("/vm/:id") view=VmPage ssr=SsrMode::Async/>
                    <Route path=path!("/vm/:id/console") view=ConsolePage ssr=SsrMode::Async/>
                    <Route path=path!("/node/:name") view=NodePage ssr=SsrMode::Async/>
                    <Route path=path!("/templates") view=Templates ssr=SsrMode::Async/>
                    <Route path=path!("/jobs") view=Jobs ssr=SsrMode::Async/>
                    <Route path=path!("/jobs/:id") view=JobPage ssr=SsrMode::Async/>
                    <Route path=path!("/login") view=Login ssr=SsrMode::Async/>
                    <Route path=path!("/account") view=Account ssr=SsrMode::Async/>
                    <Route path=path!("/users") view=Users ssr=SsrMode::Async/>
                    <Route path=path!("/audit") view=Audit ssr=SsrMode::Async/>
                </Routes>
                <Hydrated/>
            </main>
        </Router>
    }
}
