use std::time::Duration;

use leptos::prelude::*;
use pvedeck_domain::format::{age, utc};
use pvedeck_domain::os::RELEASES;
use pvedeck_domain::request::{Field, TemplateBody, Version};
use pvedeck_domain::types::{TemplateInfo, TemplatesPage};

use crate::api::{build_template, delete_template, get_templates, rebuild_template};
use crate::components::vm_actions::{Outcome, OutcomeNote};
use crate::error::UiError;
use crate::keys;
use crate::refresh::Latest;

/// `/templates`: a golden template per release, its state, age and image,
/// and the buttons that build, rebuild and delete them.
#[component]
pub fn Templates() -> impl IntoView {
    view! {
        <h1>"Templates"</h1>
        <p class="lead">
            "A release with a ready template installs by cloning it: no image import, no init "
            "script, no reboot. A rebuild makes a fresh one from the current image; the old one "
            "goes once no linked clone uses its disk."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Reading the templates…"</p> }>
            {Suspend::new(async move {
                let initial = get_templates().await.and_then(|a| a);
                view! { <LiveTemplates initial/> }
            })}
        </Suspense>
    }
}

/// One line of the table: a release and its template, or a retired one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    pub os: &'static str,
    pub version: &'static str,
    pub template: Option<TemplateInfo>,
    /// `5 min ago`, by the server's clock.
    pub age: Option<String>,
}

fn row_key(row: &Row) -> u64 {
    keys::hash(row)
}

/// Every release, with the template clones come from (if any); then the
/// retired templates, which no clone comes from.
pub fn rows(page: &TemplatesPage) -> Vec<Row> {
    let row = |os, version, template: Option<&TemplateInfo>| Row {
        os,
        version,
        age: template.and_then(|t| t.built).map(|b| age(page.now - b)),
        template: template.cloned(),
    };
    let mut rows: Vec<Row> = RELEASES
        .iter()
        .map(|r| {
            let name = r.template_name();
            let current = page
                .templates
                .iter()
                .find(|t| t.name == name && t.state != "retired");
            row(r.os.name(), r.version, current)
        })
        .collect();
    for retired in page.templates.iter().filter(|t| t.state == "retired") {
        let release = RELEASES.iter().find(|r| r.template_name() == retired.name);
        rows.push(row(
            release.map_or("", |r| r.os.name()),
            release.map_or("", |r| r.version),
            Some(retired),
        ));
    }
    rows
}

/// What a button asks of the server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ask {
    Build(&'static str, &'static str),
    Rebuild(u32),
    Delete(u32),
}

impl Ask {
    async fn send(self) -> Outcome {
        match self {
            Ask::Build(os, version) => {
                let body = TemplateBody {
                    os: Field::Given(os.to_string()),
                    version: Field::Given(Version(version.to_string())),
                };
                let what = format!("building the template of {os} {version}");
                match build_template(body).await.and_then(|a| a) {
                    Ok(job) => Outcome::Job(job, what),
                    Err(e) => Outcome::Refused(format!("{what}: {}", e.message)),
                }
            }
            Ask::Rebuild(vmid) => {
                let what = format!("rebuilding template {vmid}");
                match rebuild_template(vmid).await.and_then(|a| a) {
                    Ok(job) => Outcome::Job(job, what),
                    Err(e) => Outcome::Refused(format!("{what}: {}", e.message)),
                }
            }
            Ask::Delete(vmid) => match delete_template(vmid).await.and_then(|a| a) {
                Ok(()) => Outcome::Done(format!("template {vmid} deleted")),
                Err(e) => Outcome::Refused(format!("deleting template {vmid}: {}", e.message)),
            },
        }
    }
}

/// What the note says of a build job once the list no longer shows it
/// building: the template it made, ready; or that it made none (a failed
/// build leaves no template; the jobs page has its job). `None` while it
/// is still building.
fn build_end(page: &TemplatesPage, job: u64, what: &str) -> Option<Outcome> {
    let made = |t: &&TemplateInfo| t.job == Some(job);
    if page
        .templates
        .iter()
        .filter(made)
        .any(|t| t.state == "building")
    {
        return None;
    }
    Some(match page.templates.iter().find(made) {
        Some(t) => Outcome::Done(format!(
            "{what}: done — {} (VM {}) is ready",
            t.name, t.vmid
        )),
        None => Outcome::Refused(format!(
            "{what}: job #{job} ended without a template (its page says why)"
        )),
    })
}

/// The table, read again every few seconds in the browser (a build's state
/// turns from `building` to `ready` by itself).
#[island(lazy)]
fn LiveTemplates(initial: Result<TemplatesPage, UiError>) -> impl IntoView {
    let page = RwSignal::new(initial);
    let outcome = RwSignal::new(None::<Outcome>);
    let busy = RwSignal::new(false);
    let confirming = RwSignal::new(None::<u32>);
    let latest = Latest::default();
    let reload = move || {
        latest.load(
            async { get_templates().await.and_then(|a| a) },
            move |answer: Result<TemplatesPage, UiError>| {
                // The note of a build or rebuild (the page's only jobs)
                // follows it to its end. Every answer shown was asked for
                // after the job started (`Latest` drops older ones), so a
                // list without the job building means it has ended.
                if let (Ok(list), Some(Outcome::Job(job, what))) =
                    (&answer, outcome.get_untracked())
                    && let Some(end) = build_end(list, job, &what)
                {
                    outcome.set(Some(end));
                }
                page.set(answer);
            },
        )
    };
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(reload, Duration::from_secs(3)) {
            on_cleanup(move || handle.clear());
        }
    });
    let ask = move |what: Ask| {
        busy.set(true);
        confirming.set(None);
        leptos::task::spawn_local(async move {
            outcome.set(Some(what.send().await));
            busy.set(false);
            reload();
        });
    };
    let lines = move || page.with(|p| p.as_ref().map(rows).unwrap_or_default());
    view! {
        {move || page.get().err().map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
        <OutcomeNote outcome/>
        <div class="table-wrap" tabindex="0" role="region" aria-label="Templates">
            <table class="jobs-table templates-table">
                <thead>
                    <tr>
                        <th scope="col">"Release"</th>
                        <th scope="col">"Template"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Built"</th>
                        <th scope="col">"Image"</th>
                        <th scope="col">"Actions"</th>
                    </tr>
                </thead>
                <tbody>
                    <For each=lines key=row_key let:row>
                        <TemplateRow row ask busy confirming/>
                    </For>
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn TemplateRow(
    row: Row,
    ask: impl Fn(Ask) + Copy + Send + Sync + 'static,
    busy: RwSignal<bool>,
    confirming: RwSignal<Option<u32>>,
) -> impl IntoView {
    let release = format!("{} {}", row.os, row.version);
    let Some(t) = row.template else {
        let (os, version) = (row.os, row.version);
        let aria = format!("Build the template of {release}");
        return view! {
            <tr data-release=release.clone()>
                <td>{release.clone()}</td>
                <td class="muted">"—"</td>
                <td><span class="badge tpl-none">"not built"</span></td>
                <td></td>
                <td></td>
                <td>
                    <div class="actions">
                        <button
                            type="button"
                            disabled=move || busy.get()
                            aria-label=aria
                            on:click=move |_| ask(Ask::Build(os, version))
                        >
                            "Build"
                        </button>
                    </div>
                </td>
            </tr>
        }
        .into_any();
    };
    let vmid = t.vmid;
    let built = t.built.map(utc).unwrap_or_default();
    let actions = match (t.state.as_str(), t.job) {
        ("building", Some(job)) => view! {
            <a href=format!("/jobs/{job}")>{format!("follow job #{job}")}</a>
        }
        .into_any(),
        (state, _) => {
            let ready = state == "ready";
            view! {
                <div class="actions">
                    <Show when=move || ready>
                        <button
                            type="button"
                            disabled=move || busy.get()
                            aria-label=format!("Rebuild template {vmid}")
                            on:click=move |_| ask(Ask::Rebuild(vmid))
                        >
                            "Rebuild"
                        </button>
                    </Show>
                    <button
                        type="button"
                        class="danger"
                        disabled=move || busy.get()
                        aria-label=format!("Delete template {vmid}")
                        on:click=move |_| confirming.set(Some(vmid))
                    >
                        "Delete"
                    </button>
                </div>
                <Show when=move || confirming.get() == Some(vmid)>
                    <div class="confirm" role="alertdialog" aria-label=format!("delete template {vmid}")>
                        <span>{format!("Delete template {vmid}?")}</span>
                        <button type="button" class="danger" on:click=move |_| ask(Ask::Delete(vmid))>
                            {format!("Delete template {vmid}")}
                        </button>
                        <button type="button" on:click=move |_| confirming.set(None)>"Cancel"</button>
                    </div>
                </Show>
            }
            .into_any()
        }
    };
    let label = release.clone();
    view! {
        <tr data-release=release data-template=t.name.clone() data-vmid=vmid>
            <td>{label}</td>
            <td><code>{t.name.clone()}</code>" " <span class="muted">{format!("VM {vmid} on {}", t.node)}</span></td>
            <td><span class=format!("badge tpl-{}", t.state)>{t.state.clone()}</span></td>
            <td title=built>{row.age.unwrap_or_else(|| "—".to_string())}</td>
            <td><code>{t.image.clone().unwrap_or_default()}</code></td>
            <td>{actions}</td>
        </tr>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(vmid: u32, name: &str, state: &str, built: Option<i64>) -> TemplateInfo {
        TemplateInfo {
            vmid,
            name: name.to_string(),
            os: String::new(),
            version: String::new(),
            node: "pve1".to_string(),
            state: state.to_string(),
            job: None,
            built,
            image: None,
        }
    }

    #[test]
    fn the_note_follows_a_build_to_its_end() {
        let what = "building the template of rockylinux 9";
        let page = |templates| TemplatesPage { now: 0, templates };
        let mut building = template(9003, "tpl-rockylinux-9", "building", None);
        building.job = Some(9);
        assert_eq!(build_end(&page(vec![building.clone()]), 9, what), None);
        let ready = TemplateInfo {
            state: "ready".to_string(),
            ..building
        };
        assert_eq!(
            build_end(&page(vec![ready]), 9, what),
            Some(Outcome::Done(format!(
                "{what}: done — tpl-rockylinux-9 (VM 9003) is ready"
            )))
        );
        // Another job's template is not this one's: this build made none.
        let mut other = template(9001, "tpl-debian-12", "ready", Some(0));
        other.job = Some(4);
        assert_eq!(
            build_end(&page(vec![other]), 9, what),
            Some(Outcome::Refused(format!(
                "{what}: job #9 ended without a template (its page says why)"
            )))
        );
    }

    #[test]
    fn every_release_has_a_row_and_retired_templates_come_last() {
        let page = TemplatesPage {
            now: 10 * 60_000,
            templates: vec![
                template(9001, "tpl-debian-12", "retired", Some(0)),
                template(9002, "tpl-debian-12", "ready", Some(5 * 60_000)),
            ],
        };
        let rows = rows(&page);
        assert_eq!(rows.len(), RELEASES.len() + 1);
        let debian = rows
            .iter()
            .find(|r| (r.os, r.version) == ("debian", "12"))
            .expect("debian 12");
        assert_eq!(debian.template.as_ref().map(|t| t.vmid), Some(9002));
        assert_eq!(debian.age.as_deref(), Some("5 min ago"));
        let last = rows.last().expect("rows");
        assert_eq!(
            (last.os, last.template.as_ref().map(|t| t.vmid)),
            ("debian", Some(9001))
        );
        assert!(rows.iter().filter(|r| r.template.is_none()).count() == RELEASES.len() - 1);
    }
}
