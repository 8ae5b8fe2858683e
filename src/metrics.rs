//! `/metrics`: what pvedeck did, in the Prometheus text format. One
//! `Metrics` per server, held by the job store (every job and step passes
//! there) and handed to the timed port and the cluster snapshot.
//!
//! Labels are closed sets chosen by pvedeck — job kinds, outcomes, step
//! names, port operations, route templates, status codes — never a VM
//! name, an address, a token or a path as sent: a scrape shows no one's
//! data, and the number of series stays bounded whatever clients send.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Finished {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Refresh {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    route: String,
    method: &'static str,
    status: u16,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Steps and Proxmox calls take from a few milliseconds (`qm set` on the
/// simulator) to many minutes (an image import): 10 ms … ~10 min.
fn durations() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 3.0, 11))
}

/// Methods as labels: the standard ones, and one word for any other a
/// client makes up.
fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

pub struct Metrics {
    registry: Registry,
    jobs_started: Family<Kind, Counter>,
    jobs_finished: Family<Finished, Counter>,
    steps: Histograms<StepLabels>,
    calls: Histograms<Operation>,
    call_failures: Family<Operation, Counter>,
    refreshes: Family<Refresh, Counter>,
    snapshot_age: Gauge<f64, AtomicU64>,
    followers: Gauge,
    requests: Family<Request, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The port's calls, timed by `pvedeck_proxmox::Timed`.
impl pvedeck_proxmox::timed::CallObserver for Metrics {
    fn call(&self, operation: &'static str, ok: bool, took: Duration) {
        Metrics::call(self, operation, ok, took);
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("pvedeck");
        let jobs_started = Family::<Kind, Counter>::default();
        let jobs_finished = Family::<Finished, Counter>::default();
        let steps = Histograms::<StepLabels>::new_with_constructor(durations as fn() -> Histogram);
        let calls = Histograms::<Operation>::new_with_constructor(durations as fn() -> Histogram);
        let call_failures = Family::<Operation, Counter>::default();
        let refreshes = Family::<Refresh, Counter>::default();
        let snapshot_age = Gauge::<f64, AtomicU64>::default();
        let followers = Gauge::default();
        let requests = Family::<Request, Counter>::default();
        registry.register(
            "jobs_started",
            "Jobs started, by kind (install, start, reboot, migrate, template)",
            jobs_started.clone(),
        );
        registry.register(
            "jobs_finished",
            "Jobs ended, by kind and outcome (succeeded, failed, interrupted)",
            jobs_finished.clone(),
        );
        registry.register(
            "step_duration_seconds",
            "How long a job's steps took, by step name and outcome (success, error)",
            steps.clone(),
        );
        registry.register(
            "pve_call_duration_seconds",
            "How long calls to Proxmox took (a command with the cli backend, a request with \
             the api backend), by operation",
            calls.clone(),
        );
        registry.register(
            "pve_call_failures",
            "Calls to Proxmox that failed or timed out, by operation",
            call_failures.clone(),
        );
        registry.register(
            "snapshot_refreshes",
            "Refreshes of the cluster snapshot, by outcome (ok, failed)",
            refreshes.clone(),
        );
        registry.register(
            "snapshot_age_seconds",
            "Age of the cluster snapshot lists and pages are served from (-1: none yet)",
            snapshot_age.clone(),
        );
        registry.register(
            "sse_followers",
            "Job event streams open now",
            followers.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status",
            requests.clone(),
        );
        Metrics {
            registry,
            jobs_started,
            jobs_finished,
            steps,
            calls,
            call_failures,
            refreshes,
            snapshot_age,
            followers,
            requests,
        }
    }

    pub fn job_started(&self, kind: &'static str) {
        self.jobs_started.get_or_create(&Kind { kind }).inc();
    }

    pub fn job_finished(&self, kind: &'static str, outcome: &'static str) {
        self.jobs_finished
            .get_or_create(&Finished { kind, outcome })
            .inc();
    }

    /// A step's name is one of the pipeline's own (`install > creating
    /// VM`): no user data in it.
    pub fn step(&self, step: &str, ok: bool, took: Duration) {
        let labels = StepLabels {
            step: step.to_string(),
            outcome: if ok { "success" } else { "error" },
        };
        self.steps
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn call(&self, operation: &'static str, ok: bool, took: Duration) {
        let labels = Operation { operation };
        self.calls
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if !ok {
            self.call_failures.get_or_create(&labels).inc();
        }
    }

    pub fn refreshed(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.refreshes.get_or_create(&Refresh { outcome }).inc();
    }

    pub fn follower_opened(&self) {
        self.followers.inc();
    }

    pub fn follower_closed(&self) {
        self.followers.dec();
    }

    /// `route` is the matched route's template (`/api/vm/{id}/start`), or
    /// a fixed word for what matched none: never the path as sent.
    pub fn request(&self, route: &str, method: &str, status: u16) {
        let labels = Request {
            route: route.to_string(),
            method: method_label(method),
            status,
        };
        self.requests.get_or_create(&labels).inc();
    }

    /// The text a scrape gets; the snapshot's age is read as of now.
    pub fn render(&self, snapshot_age: Option<Duration>) -> String {
        self.snapshot_age
            .set(snapshot_age.map_or(-1.0, |age| age.as_secs_f64()));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_named_and_counts_what_it_is_told() {
        let metrics = Metrics::new();
        metrics.job_started("install");
        metrics.job_finished("install", "succeeded");
        metrics.step("install > creating VM", true, Duration::from_millis(20));
        metrics.call("create", false, Duration::from_millis(3));
        metrics.refreshed(true);
        metrics.follower_opened();
        metrics.request("/api/vm/list", "GET", 200);
        let text = metrics.render(Some(Duration::from_secs(2)));
        for line in [
            "pvedeck_jobs_started_total{kind=\"install\"} 1",
            "pvedeck_jobs_finished_total{kind=\"install\",outcome=\"succeeded\"} 1",
            "pvedeck_step_duration_seconds_count{step=\"install > creating VM\",outcome=\"success\"} 1",
            "pvedeck_pve_call_duration_seconds_count{operation=\"create\"} 1",
            "pvedeck_pve_call_failures_total{operation=\"create\"} 1",
            "pvedeck_snapshot_refreshes_total{outcome=\"ok\"} 1",
            "pvedeck_snapshot_age_seconds 2.0",
            "pvedeck_sse_followers 1",
            "pvedeck_http_requests_total{route=\"/api/vm/list\",method=\"GET\",status=\"200\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_made_up_method_is_other() {
        let metrics = Metrics::new();
        metrics.request("(none)", "BREW", 405);
        let text = metrics.render(None);
        assert!(text.contains("method=\"other\""), "{text}");
        assert!(!text.contains("BREW"));
    }

    #[test]
    fn no_snapshot_yet_is_minus_one() {
        let text = Metrics::new().render(None);
        assert!(text.contains("pvedeck_snapshot_age_seconds -1.0"), "{text}");
    }
}
