//! Every setting (docs/configuration.md), read once from the environment into typed values.
//!
//! A bad value is reported as one line naming the variable, the value and what
//! was expected; `main` prints it and exits with code 2.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

pub mod allow;
pub mod clusters;
mod database;
pub mod oidc;
pub mod pve_api;
pub mod reference;
pub mod sites;

pub use database::{DatabaseUrl, mask_password};

use pvedeck_domain::os::Os;
pub use pvedeck_domain::rules::Limits;
use pvedeck_domain::rules::{CPU_CEILING, MIN_DISK_GB, MIN_RAM_MB, VMID_ADDRESSES, is_dns_label};
use pvedeck_domain::scripts::ScriptSet;
pub use pvedeck_domain::secret::Secret;

use allow::{AllowList, Proxies};
use pve_api::{ApiSettings, Fingerprint, Trust};
use sites::Sites;

/// The PEM certificates of `PVE_API_CA_FILE`.
fn read_certificates(path: &str) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, String> {
    use rustls_pki_types::pem::PemObject;
    let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot be read: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("holds no readable PEM certificate: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    Ok(certs)
}

/// `TLS_CERT_FILE` and `TLS_KEY_FILE`: the PEM files pvedeck serves
/// HTTPS with (read at start and again on `SIGHUP`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `MANAGE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Manage {
    /// VMs tagged `pvedeck` (the default).
    #[default]
    Pvedeck,
    /// Those, and the VMs go-pve-qemu made: their first tag is an OS it
    /// installs (`debian`, `ubuntu`, `rockylinux`).
    PvedeckAndSeed,
    /// Every QEMU VM, as go-pve-qemu acted.
    All,
}

impl Manage {
    pub fn parse(raw: &str) -> Option<Manage> {
        match raw {
            "pvedeck" => Some(Manage::Pvedeck),
            "pvedeck+seed" => Some(Manage::PvedeckAndSeed),
            "all" => Some(Manage::All),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Manage::Pvedeck => "pvedeck",
            Manage::PvedeckAndSeed => "pvedeck+seed",
            Manage::All => "all",
        }
    }
}

/// What bounds the VM consoles pvedeck relays (docs/security.md#consoles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleLimits {
    /// `CONSOLE_IDLE_SECS`: a console without keys or pointer this long closes.
    pub idle: Duration,
    /// `CONSOLE_MAX`: consoles open at once, all users together.
    pub max_open: usize,
    /// `CONSOLE_BYTES_PER_SEC`: what one console relays per second, each way.
    pub bytes_per_sec: u64,
}

impl ConsoleLimits {
    pub const DEFAULT_MAX_OPEN: usize = 64;
    pub const DEFAULT_BYTES_PER_SEC: u64 = 4 << 20;
}

impl Default for ConsoleLimits {
    fn default() -> ConsoleLimits {
        ConsoleLimits {
            idle: Duration::from_secs(900),
            max_open: ConsoleLimits::DEFAULT_MAX_OPEN,
            bytes_per_sec: ConsoleLimits::DEFAULT_BYTES_PER_SEC,
        }
    }
}

/// What one job may keep, and how long jobs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// `JOB_MAX_EVENTS`: relayed command output lines kept per job (each a
    /// row and a broadcast); past it, one line says the rest was dropped.
    pub max_relayed: u64,
    /// `JOBS_KEEP_DAYS`: ended jobs older than this go at start-up.
    pub keep_days: u32,
    /// `MAX_FOLLOWERS_PER_JOB`, `MAX_FOLLOWERS`: streams open at once.
    pub max_followers_per_job: usize,
    pub max_followers: usize,
    /// `MAX_FOLLOWERS_PER_CLIENT`: streams one client (address, IPv6 /64)
    /// may hold open of jobs it did not start and does not own.
    pub max_followers_per_client: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            max_relayed: 5000,
            keep_days: 90,
            max_followers_per_job: 2000,
            max_followers: 10_000,
            max_followers_per_client: 100,
        }
    }
}

/// How the `api` backend gets a cloud image onto a node (`IMAGE_FETCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFetch {
    /// `download`: the node fetches it from the mirror (`download-url`),
    /// checked against the mirror's checksum; pvedeck moves no image.
    Download,
    /// `upload`: pvedeck uploads its own verified copy, for nodes without
    /// a route to the mirror.
    Upload,
}

/// Whether the VMs pvedeck makes get the Proxmox firewall's IP filter
/// (`VM_IP_FILTER`, docs/security.md#addresses-cannot-be-taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpFilterMode {
    /// Where the datacenter firewall is enabled (read at each install).
    #[default]
    Auto,
    /// Always, enabled or not: it takes effect once the firewall is.
    On,
    /// Never.
    Off,
}

impl IpFilterMode {
    pub fn parse(raw: &str) -> Option<IpFilterMode> {
        match raw {
            "auto" => Some(IpFilterMode::Auto),
            "on" => Some(IpFilterMode::On),
            "off" => Some(IpFilterMode::Off),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IpFilterMode::Auto => "auto",
            IpFilterMode::On => "on",
            IpFilterMode::Off => "off",
        }
    }
}

/// What an install requires of an OS's image before using it
/// (`IMAGE_VERIFY_<OS>`, `IMAGE_KEYRING_<OS>`;
/// docs/provisioning.md#os-images).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ImageVerify {
    /// The mirror's checksum list must name the image (the default): a
    /// mirror without one fails the install.
    #[default]
    Checksum,
    /// The list must also carry a good OpenPGP signature by a key of this
    /// keyring file (armored or binary public keys).
    Signed(PathBuf),
    /// `none`: a published checksum is still checked, but its absence is
    /// accepted (an admin's own mirror that publishes no list).
    Unchecked,
}

/// The root password new VMs get (`VM_ROOT_PASSWORD`).
#[derive(Debug, Clone)]
pub enum RootPassword {
    /// The same for every VM: an admin's choice, kept for go-pve-qemu users.
    Shared(Secret),
    /// `random`: each VM its own, generated at the install and shown once,
    /// in the live summary; nothing keeps it.
    Random,
}

impl RootPassword {
    fn parse(raw: &str) -> RootPassword {
        if raw == "random" {
            RootPassword::Random
        } else {
            RootPassword::Shared(Secret::new(raw))
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{var}={value} {expected}")]
    Invalid {
        var: String,
        value: String,
        expected: String,
    },
    #[error("{var} is not set: {why}")]
    Missing { var: String, why: String },
}

fn invalid(var: &str, value: &str, expected: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sim,
    Cli,
    /// Proxmox's REST API with an API token (docs/backends.md#the-api-backend).
    Api,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Sim => "sim",
            BackendKind::Cli => "cli",
            BackendKind::Api => "api",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// This cluster's name (`CLUSTERS`; `default` without it).
    pub cluster: String,
    /// The clusters after the first, each with its own settings; the
    /// first (the default one) is this configuration itself.
    pub other_clusters: Vec<Config>,
    pub port: u16,
    pub bind: IpAddr,
    pub backend: BackendKind,
    pub gateway: Ipv4Addr,
    pub main_node: String,
    pub nodes: BTreeMap<String, Ipv4Addr>,
    pub assign_storage: String,
    pub assign_ip_start: u8,
    pub assign_ip_end: u8,
    /// `TEMPLATE_ID_START`..=`TEMPLATE_ID_END`: where golden templates go.
    pub template_ids: std::ops::RangeInclusive<u32>,
    pub allow_ips: AllowList,
    /// `TRUSTED_PROXIES`: whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Proxies,
    /// `TLS_CERT_FILE` and `TLS_KEY_FILE`: HTTPS served by pvedeck itself.
    pub tls: Option<TlsFiles>,
    /// `DATABASE_URL`: PostgreSQL instead of the embedded SQLite.
    pub database_url: Option<DatabaseUrl>,
    /// `REPLICA_NAME`: unset means one is made at start-up.
    pub replica_name: Option<String>,
    /// `JOB_LEASE_SECS`: how long a replica holds what it does not renew.
    pub job_lease: Duration,
    /// `CONSOLE_IDLE_SECS`, `CONSOLE_MAX`, `CONSOLE_BYTES_PER_SEC`.
    pub consoles: ConsoleLimits,
    /// `VM_MAX_CPU`, `VM_MAX_RAM`, `VM_MAX_DISK`.
    pub limits: Limits,
    pub vm_balloon_min_mb: Option<u32>,
    /// `MAX_OVERCOMMIT`: how far the VMs' assigned memory and cores on a
    /// node may exceed what it has, as a ratio, when `"node":"auto"`
    /// places an install (docs/provisioning.md#placement).
    pub max_overcommit: f64,
    /// `VM_ROOT_PASSWORD`: none, one for every VM, or `random` (each VM its own).
    pub vm_root_password: Option<RootPassword>,
    /// `VM_IP_FILTER`: whether new VMs may send only from their own address.
    pub vm_ip_filter: IpFilterMode,
    pub reserved: BTreeMap<u32, String>,
    pub data_dir: PathBuf,
    pub image_cache_dir: PathBuf,
    /// `IMAGE_BASE_<OS>` overrides.
    pub image_base: BTreeMap<Os, String>,
    pub api_tokens: Vec<Secret>,
    /// `PVE_API_URL`, `PVE_API_TOKEN` and how its certificate is trusted
    /// (`PVE_BACKEND=api` only).
    pub pve_api: Option<ApiSettings>,
    /// `IMPORT_STORAGE`: where the `api` backend puts images for
    /// `import-from` (default `local`; it needs the `import` content).
    pub import_storage: String,
    /// `IMAGE_FETCH`: `download` (default) or `upload` (`api` backend).
    pub image_fetch: ImageFetch,
    /// `JOB_MAX_EVENTS`, `JOBS_KEEP_DAYS`.
    pub job_limits: JobLimits,
    /// `IMAGE_MAX_BYTES`: the largest cloud image pvedeck downloads.
    pub image_max_bytes: u64,
    /// `IMAGE_VERIFY_<OS>` and `IMAGE_KEYRING_<OS>`; an OS not named
    /// here needs its checksum ([`ImageVerify::Checksum`]).
    pub image_verify: BTreeMap<Os, ImageVerify>,
    /// `IMAGE_DOWNLOAD_TIMEOUT_SECS`: the longest a whole image download
    /// may take, pvedeck's own or a node's.
    pub image_download_timeout: Duration,
    /// `MAX_PVE_COMMANDS`: Proxmox commands running at once, at most.
    pub max_pve_commands: usize,
    /// `SESSION_TTL` (seconds): how long a UI login lasts.
    pub session_ttl: Duration,
    /// `QUOTA_DEFAULT` over pvedeck's own: what a user may hold, every
    /// measure set.
    pub quota_default: pvedeck_domain::account::Quota,
    /// `QUOTA_GROUP_<name>`, by group name, over `quota_default`.
    pub quota_groups: BTreeMap<String, pvedeck_domain::account::Quota>,
    /// `AUDIT_KEEP_DAYS`: audit entries older than this go.
    pub audit_keep_days: u32,
    /// `OIDC_*`: sign-in through an OpenID Connect provider.
    pub oidc: Option<oidc::OidcSettings>,
    /// `SHUTDOWN_GRACE_SECS`: how long running jobs may go on after a
    /// SIGTERM before they are interrupted (with their cleanup).
    pub shutdown_grace: Duration,
    /// `MANAGE`: which VMs pvedeck acts on.
    pub manage: Manage,
    /// `PUBLIC_URL`, `ALLOWED_HOSTS`, `ALLOWED_ORIGINS`: where a
    /// state-changing request may come from.
    pub sites: Sites,
    pub ssh_port: u16,
    pub ssh_poll_interval: Duration,
    pub ssh_poll_attempts: u32,
    /// How much faster than real time the simulated cluster runs.
    pub sim_speed: f64,
    /// How much the simulated guests' memory use wanders (fraction, 0 = still).
    pub sim_jitter: f64,
    /// What each simulated `qm`/`pvesh`/`pvesm` costs in wall-clock time,
    /// as a Perl start-up does on a real node (benchmarks).
    pub sim_pvesh: Duration,
    /// A simulated cluster of this many nodes and VMs instead of the demo
    /// (benchmarks; only when `DATA_DIR/sim` holds no cluster yet).
    pub sim_size: Option<(u32, u32)>,
    /// `SIM_NODE_MEMORY`: the large cluster's nodes' memory in GiB, in
    /// order (benchmarks of placement need nodes of unequal size).
    pub sim_node_memory: Vec<u64>,
    /// Where pvedeck's own SSH key lives (`~/.ssh` for cli, `DATA_DIR/ssh` for sim).
    pub ssh_key_dir: PathBuf,
    /// Extra public keys put into every VM (go-pve-qemu's admin key file).
    pub admin_keys_file: Option<PathBuf>,
    /// Which init scripts `/sh/` serves: the real ones or the harmless test set.
    pub init_scripts: ScriptSet,
    /// `INSTALL_METHOD`: what `/api/vm/install` does without `method`.
    pub install_method: pvedeck_domain::request::InstallMethod,
    /// How often the cluster snapshot is refreshed while anyone reads it.
    pub snapshot_interval: Duration,
    /// Without a reader this long, the snapshot is not refreshed at all.
    pub snapshot_idle: Duration,
    /// Timeout of a short Proxmox command (`qm set`, `qm start`…).
    pub command_timeout: Duration,
    /// Timeout of a long one (`qm importdisk`, `qm migrate`, the init script).
    pub long_command_timeout: Duration,
    /// Where the built site (`pkg/`, static files) lives.
    pub site_root: PathBuf,
    pub log_filter: String,
}

impl Config {
    /// Reads the process environment (after `.env` was loaded into it).
    pub fn from_env() -> Result<Config, ConfigError> {
        let mut config = Config::from_vars(std::env::vars())?;
        // The machine's name: how its admins reach it on their network.
        config.sites.own_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty());
        Ok(config)
    }

    /// Parses a set of variables; used by `from_env` and by tests, which must
    /// not depend on the environment of whoever runs them.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars: BTreeMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        clusters::parse(&vars, &Vars::new(&vars))
    }

    /// Whether browsers reach pvedeck over HTTPS: its own (`TLS_CERT_FILE`)
    /// or a proxy's (`PUBLIC_URL` is `https://`).
    pub fn serves_https(&self) -> bool {
        self.tls.is_some()
            || self
                .sites
                .public
                .as_deref()
                .is_some_and(|url| url.starts_with("https://"))
    }

    /// What a real cluster is open to with these settings: anyone who
    /// reaches the port may create, stop and destroy VMs.
    pub fn exposure(&self) -> Option<String> {
        // On loopback only this machine's users reach it: the advice's own
        // remedy needs no warning.
        let open = self.allow_ips == AllowList::Everyone
            && self.api_tokens.is_empty()
            && !self.bind.is_loopback();
        (open && self.backend != BackendKind::Sim).then(|| {
            format!(
                "PVE_BACKEND={} with ALLOW_IPS open to everyone and no API_TOKENS: anyone who \
                 reaches {}:{} can create, stop and destroy VMs on the cluster. Set ALLOW_IPS to \
                 your admins' addresses, API_TOKENS, or BIND_ADDR=127.0.0.1.",
                self.backend, self.bind, self.port
            )
        })
    }

    pub fn node_ip(&self, node: &str) -> Option<Ipv4Addr> {
        self.nodes.get(node).copied()
    }
}

/// Looks variables up; empty values count as unset, as go-pve-qemu's
/// `os.Getenv(..) == ""` checks did.
struct Vars<'a> {
    all: &'a BTreeMap<String, String>,
    /// Every name looked up (a family such as `NODE_<name>` as written
    /// so): the test that keeps docs/configuration.md whole compares it
    /// with the reference.
    read: std::cell::RefCell<std::collections::BTreeSet<&'static str>>,
}

impl<'a> Vars<'a> {
    fn new(all: &'a BTreeMap<String, String>) -> Vars<'a> {
        Vars {
            all,
            read: Default::default(),
        }
    }

    fn note(&self, name: &'static str) {
        self.read.borrow_mut().insert(name);
    }

    /// `(name, value)` of every variable whose name starts with `prefix`
    /// (a family, documented as `family`).
    fn family(
        &self,
        prefix: &str,
        family: &'static str,
    ) -> impl Iterator<Item = (&'a String, &'a String)> {
        self.note(family);
        let prefix = prefix.to_string();
        self.all.iter().filter(move |(k, _)| k.starts_with(&prefix))
    }

    fn get(&self, var: &'static str) -> Option<&'a str> {
        self.note(var);
        self.all
            .get(var)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn parse_with<T>(
        &self,
        var: &'static str,
        expected: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        match self.get(var) {
            None => Ok(None),
            Some(raw) => parse(raw)
                .map(Some)
                .ok_or_else(|| invalid(var, raw, expected)),
        }
    }

    fn int_in(&self, var: &'static str, min: u64, max: u64) -> Result<Option<u64>, ConfigError> {
        // An upper bound that no one would type is not worth naming.
        let expected = if max >= u64::from(u32::MAX) {
            format!("is not an integer >= {min}")
        } else {
            format!("is not an integer from {min} to {max}")
        };
        self.parse_with(var, &expected, |raw| {
            raw.parse::<u64>().ok().filter(|n| (min..=max).contains(n))
        })
    }

    fn u32_in(&self, var: &'static str, min: u32, max: u32) -> Result<Option<u32>, ConfigError> {
        Ok(self
            .int_in(var, u64::from(min), u64::from(max))?
            .and_then(|n| u32::try_from(n).ok()))
    }

    fn ipv4(&self, var: &'static str) -> Result<Option<Ipv4Addr>, ConfigError> {
        self.parse_with(var, "is not an IPv4 address", |raw| raw.parse().ok())
    }

    fn port(&self, var: &'static str, allow_zero: bool) -> Result<Option<u16>, ConfigError> {
        let min = u64::from(!allow_zero);
        let expected = if allow_zero {
            "is not a port number (0-65535, 0 picks a free port)"
        } else {
            "is not a port number (1-65535)"
        };
        self.parse_with(var, expected, |raw| {
            raw.parse::<u16>().ok().filter(|p| u64::from(*p) >= min)
        })
    }

    /// `PUBLIC_URL`, `ALLOWED_HOSTS`, `ALLOWED_ORIGINS`.
    fn sites(&self) -> Result<Sites, ConfigError> {
        let public = self.parse_with("PUBLIC_URL", "is not an http:// or https:// URL", |raw| {
            sites::origin(raw, true)
        })?;
        let list = |var: &'static str| {
            self.get(var)
                .map(|raw| {
                    raw.split([',', ' '])
                        .filter(|item| !item.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let hosts = list("ALLOWED_HOSTS")
            .into_iter()
            .map(|host| {
                let name = host.to_ascii_lowercase();
                let fits = name
                    .split('.')
                    .all(|label| is_dns_label(label) && !label.is_empty());
                fits.then_some(name).ok_or_else(|| {
                    invalid("ALLOWED_HOSTS", &host, "is not a host name (a comma list)")
                })
            })
            .collect::<Result<_, _>>()?;
        let origins = list("ALLOWED_ORIGINS")
            .into_iter()
            .map(|raw| {
                sites::origin(&raw, false).ok_or_else(|| {
                    invalid(
                        "ALLOWED_ORIGINS",
                        &raw,
                        "is not an origin such as https://portal.example.org (a comma list)",
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Sites {
            public,
            hosts,
            origins,
            own_name: None,
        })
    }

    fn parse(&self) -> Result<Config, ConfigError> {
        let backend = match self.get("PVE_BACKEND") {
            None | Some("sim") => BackendKind::Sim,
            Some("cli") => BackendKind::Cli,
            Some("api") => BackendKind::Api,
            Some(other) => {
                return Err(invalid(
                    "PVE_BACKEND",
                    other,
                    "is not one of: sim, cli, api",
                ));
            }
        };
        let required = |var: &str| ConfigError::Missing {
            var: var.to_string(),
            why: format!("required when PVE_BACKEND={backend}"),
        };

        let port = self.port("PORT", true)?.unwrap_or(8080);
        let bind = self
            .parse_with("BIND_ADDR", "is not an IP address", |raw| raw.parse().ok())?
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));

        let gateway = match (self.ipv4("GATEWAY")?, backend) {
            (Some(gw), _) => gw,
            (None, BackendKind::Sim) => Ipv4Addr::new(192, 168, 0, 1),
            (None, _) => return Err(required("GATEWAY")),
        };

        let main_node = match (self.get("MAIN_NODE"), backend) {
            (Some(raw), _) if is_dns_label(raw) => raw.to_string(),
            (Some(raw), _) => {
                return Err(invalid(
                    "MAIN_NODE",
                    raw,
                    "is not a node name (letters, digits and '-')",
                ));
            }
            (None, BackendKind::Sim) => "pve1".to_string(),
            (None, _) => return Err(required("MAIN_NODE")),
        };

        let mut nodes = self.nodes()?;
        if backend == BackendKind::Sim && nodes.is_empty() {
            // The simulated cluster's nodes, on addresses of the gateway's subnet.
            let [a, b, c, _] = gateway.octets();
            for (i, name) in ["pve1", "pve2", "pve3"].iter().enumerate() {
                nodes.insert(name.to_string(), Ipv4Addr::new(a, b, c, 11 + i as u8));
            }
        }
        // The API routes by node name: only `ssh root@<node>` needs addresses.
        if backend != BackendKind::Api && !nodes.contains_key(&main_node) {
            return Err(ConfigError::Missing {
                var: format!("NODE_{main_node}"),
                why: format!("the main node {main_node} needs an address"),
            });
        }

        let assign_storage = match (self.get("ASSIGN_STORAGE"), backend) {
            (Some(raw), _) if is_storage_id(raw) => raw.to_string(),
            (Some(raw), _) => {
                return Err(invalid(
                    "ASSIGN_STORAGE",
                    raw,
                    "is not a storage id (lower-case letters, digits, '-', '_', '.')",
                ));
            }
            (None, BackendKind::Sim) => "local-zfs".to_string(),
            (None, _) => return Err(required("ASSIGN_STORAGE")),
        };

        // docs/provisioning.md#vmid-allocation: clamp to 100..=254 and swap a
        // reversed range rather than refuse it.
        let (low, high) = (*VMID_ADDRESSES.start(), *VMID_ADDRESSES.end());
        let clamp = |n: u64| n.clamp(u64::from(low), u64::from(high)) as u8;
        let start = clamp(self.int_in("ASSIGN_IP_START", 0, u64::MAX)?.unwrap_or(100));
        let end = clamp(self.int_in("ASSIGN_IP_END", 0, u64::MAX)?.unwrap_or(254));
        let (assign_ip_start, assign_ip_end) = if start <= end {
            (start, end)
        } else {
            (end, start)
        };

        let id = |var: &'static str, default: u64| -> Result<u32, ConfigError> {
            let n = self.int_in(var, 100, 999_999_999)?.unwrap_or(default);
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        };
        let (first, last) = (id("TEMPLATE_ID_START", 9000)?, id("TEMPLATE_ID_END", 9099)?);
        let template_ids = first.min(last)..=first.max(last);
        // Installs take ids of the address pool: a template there would
        // collide with them.
        if u32::from(assign_ip_end) >= *template_ids.start()
            && *template_ids.end() >= u32::from(assign_ip_start)
        {
            let value = format!("{}-{}", template_ids.start(), template_ids.end());
            let expected = format!(
                "overlaps ASSIGN_IP_START-ASSIGN_IP_END ({assign_ip_start}-{assign_ip_end}), \
                 where installs take their ids"
            );
            return Err(invalid("TEMPLATE_ID_START", &value, expected));
        }

        let allow_ips = match self.get("ALLOW_IPS") {
            None => AllowList::everyone(),
            Some(raw) => AllowList::parse(raw).map_err(|entry| {
                invalid(
                    "ALLOW_IPS",
                    raw,
                    format!(
                        "is not a comma list of IP addresses or CIDR blocks ('{entry}' is neither)"
                    ),
                )
            })?,
        };

        let trusted_proxies = match self.get("TRUSTED_PROXIES") {
            None => Proxies::default(),
            Some(raw) => Proxies::parse(raw).map_err(|entry| {
                invalid(
                    "TRUSTED_PROXIES",
                    raw,
                    format!(
                        "is not a comma list of IP addresses or CIDR blocks ('{entry}' is neither)"
                    ),
                )
            })?,
        };

        let database_url = match self.get("DATABASE_URL") {
            None => None,
            Some(url) => Some(DatabaseUrl::parse(url).map_err(|why| ConfigError::Invalid {
                var: "DATABASE_URL".to_string(),
                value: mask_password(url),
                expected: why.to_string(),
            })?),
        };
        let tls = match (self.get("TLS_CERT_FILE"), self.get("TLS_KEY_FILE")) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: PathBuf::from(cert),
                key: PathBuf::from(key),
            }),
            (Some(cert), None) => {
                return Err(invalid(
                    "TLS_CERT_FILE",
                    cert,
                    "needs TLS_KEY_FILE as well: set both or neither",
                ));
            }
            (None, Some(key)) => {
                return Err(invalid(
                    "TLS_KEY_FILE",
                    key,
                    "needs TLS_CERT_FILE as well: set both or neither",
                ));
            }
        };

        let limits = Limits {
            max_cpu: self.u32_in("VM_MAX_CPU", 1, CPU_CEILING)?,
            max_ram_mb: self.u32_in("VM_MAX_RAM", MIN_RAM_MB as u32, u32::MAX)?,
            max_disk_gb: self.u32_in("VM_MAX_DISK", MIN_DISK_GB as u32, u32::MAX)?,
        };
        let vm_balloon_min_mb = self.u32_in("VM_BALLOON_MIN", 1, u32::MAX)?;
        // Below 0.1 no VM fits anywhere; above 10 the limit means nothing.
        let max_overcommit = self
            .parse_with("MAX_OVERCOMMIT", "is not a number from 0.1 to 10", |raw| {
                raw.parse::<f64>()
                    .ok()
                    .filter(|r| r.is_finite() && (0.1..=10.0).contains(r))
            })?
            .unwrap_or(1.0);
        let vm_root_password = self.get("VM_ROOT_PASSWORD").map(RootPassword::parse);
        let vm_ip_filter = self
            .parse_with(
                "VM_IP_FILTER",
                "is not one of: auto, on, off",
                IpFilterMode::parse,
            )?
            .unwrap_or_default();

        let reserved = match self.get("RESERVED") {
            None => BTreeMap::new(),
            Some(raw) => parse_reserved(raw).map_err(|why| invalid("RESERVED", raw, why))?,
        };

        let data_dir: PathBuf = self.get("DATA_DIR").unwrap_or("./data").into();
        // Images live with pvedeck's other data (a private directory), not
        // in a world-writable /tmp where anyone may plant a file of the
        // image's name.
        let image_cache_dir = match self.get("IMAGE_CACHE_DIR") {
            Some(dir) => dir.into(),
            None => data_dir.join("images"),
        };
        let ssh_key_dir = match (self.get("SSH_KEY_DIR"), backend) {
            (Some(dir), _) => dir.into(),
            (None, BackendKind::Sim) => data_dir.join("ssh"),
            (None, _) => match self.get("HOME") {
                Some(home) => PathBuf::from(home).join(".ssh"),
                None => {
                    return Err(ConfigError::Missing {
                        var: "SSH_KEY_DIR".to_string(),
                        why: "HOME is not set either, so there is no ~/.ssh".to_string(),
                    });
                }
            },
        };
        let admin_keys_file = self.get("ADMIN_PUBKEY_FILE").map(PathBuf::from);
        let init_scripts = match self.get("INIT_SCRIPTS") {
            None | Some("real") => ScriptSet::Real,
            Some("test") => ScriptSet::Harmless,
            Some(other) => return Err(invalid("INIT_SCRIPTS", other, "is not one of: real, test")),
        };
        let install_method = match self.get("INSTALL_METHOD") {
            None => pvedeck_domain::request::InstallMethod::Import,
            Some(word) => pvedeck_domain::request::InstallMethod::parse(word)
                .ok_or_else(|| invalid("INSTALL_METHOD", word, "is not one of: clone, import"))?,
        };
        let command_timeout = Duration::from_secs(
            self.int_in("COMMAND_TIMEOUT_SECS", 1, 86_400)?
                .unwrap_or(300),
        );
        let long_command_timeout = Duration::from_secs(
            self.int_in("LONG_COMMAND_TIMEOUT_SECS", 1, 86_400)?
                .unwrap_or(3600),
        );
        let image_base = self.image_bases()?;
        let pve_api = match backend {
            BackendKind::Api => Some(self.api_settings()?),
            _ => None,
        };
        let import_storage = match self.get("IMPORT_STORAGE") {
            Some(raw) if is_storage_id(raw) => raw.to_string(),
            Some(raw) => {
                return Err(invalid(
                    "IMPORT_STORAGE",
                    raw,
                    "is not a storage id (lower-case letters, digits, '-', '_', '.')",
                ));
            }
            None => "local".to_string(),
        };
        let image_fetch = match self.get("IMAGE_FETCH") {
            None | Some("download") => ImageFetch::Download,
            Some("upload") => ImageFetch::Upload,
            Some(raw) => {
                return Err(invalid(
                    "IMAGE_FETCH",
                    raw,
                    "is neither download nor upload",
                ));
            }
        };
        let snapshot_interval = Duration::from_millis(
            self.int_in("SNAPSHOT_INTERVAL_MS", 10, 3_600_000)?
                .unwrap_or(2000),
        );
        let snapshot_idle =
            Duration::from_secs(self.int_in("SNAPSHOT_IDLE_SECS", 1, 86_400)?.unwrap_or(60));

        let api_tokens = match self.get("API_TOKENS") {
            None => Vec::new(),
            Some(raw) => raw
                .split(',')
                .map(str::trim)
                .map(|t| {
                    if t.len() >= 16 && t.chars().all(|c| c.is_ascii_graphic()) {
                        Ok(Secret::new(t))
                    } else {
                        // The value is a secret: name the variable, not the tokens.
                        Err(invalid(
                            "API_TOKENS",
                            "<hidden>",
                            "must be a comma list of tokens of at least 16 printable characters",
                        ))
                    }
                })
                .collect::<Result<_, _>>()?,
        };

        let sites = self.sites()?;
        let replica_name = match self.get("REPLICA_NAME") {
            None => None,
            Some(name)
                if !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) =>
            {
                Some(name.to_string())
            }
            Some(name) => {
                return Err(invalid(
                    "REPLICA_NAME",
                    name,
                    "is not a name: letters, digits, '.', '_', '-', at most 64",
                ));
            }
        };
        let job_lease = Duration::from_secs(u64::from(
            self.u32_in("JOB_LEASE_SECS", 3, 600)?.unwrap_or(15),
        ));
        let consoles = ConsoleLimits {
            idle: Duration::from_secs(u64::from(
                self.u32_in("CONSOLE_IDLE_SECS", 10, 86_400)?.unwrap_or(900),
            )),
            max_open: self
                .int_in("CONSOLE_MAX", 1, 100_000)?
                .map_or(ConsoleLimits::DEFAULT_MAX_OPEN, |n| n as usize),
            bytes_per_sec: self
                .int_in("CONSOLE_BYTES_PER_SEC", 16_384, 1 << 30)?
                .unwrap_or(ConsoleLimits::DEFAULT_BYTES_PER_SEC),
        };
        let defaults = JobLimits::default();
        let job_limits = JobLimits {
            max_relayed: self
                .int_in("JOB_MAX_EVENTS", 10, 1_000_000)?
                .unwrap_or(defaults.max_relayed),
            keep_days: self
                .u32_in("JOBS_KEEP_DAYS", 1, 36_500)?
                .unwrap_or(defaults.keep_days),
            max_followers_per_job: self
                .int_in("MAX_FOLLOWERS_PER_JOB", 1, 1_000_000)?
                .map_or(defaults.max_followers_per_job, |n| n as usize),
            max_followers: self
                .int_in("MAX_FOLLOWERS", 1, 10_000_000)?
                .map_or(defaults.max_followers, |n| n as usize),
            max_followers_per_client: self
                .int_in("MAX_FOLLOWERS_PER_CLIENT", 1, 1_000_000)?
                .map_or(defaults.max_followers_per_client, |n| n as usize),
        };
        let image_max_bytes = self
            .int_in("IMAGE_MAX_BYTES", 1, u64::MAX)?
            .unwrap_or(16 << 30);
        let image_verify = self.image_verify()?;
        // 30 minutes: a 1 GiB image at under 1 MB/s. A mirror slower than
        // that is better replaced by IMAGE_BASE_<OS>.
        let image_download_timeout = Duration::from_secs(
            self.int_in("IMAGE_DOWNLOAD_TIMEOUT_SECS", 1, 604_800)?
                .unwrap_or(1800),
        );
        let max_pve_commands = self.int_in("MAX_PVE_COMMANDS", 1, 4096)?.unwrap_or(64) as usize;
        let session_ttl = Duration::from_secs(
            self.int_in("SESSION_TTL", 60, 31_536_000)?
                .unwrap_or(43_200),
        );
        let shutdown_grace =
            Duration::from_secs(self.int_in("SHUTDOWN_GRACE_SECS", 0, 86_400)?.unwrap_or(60));
        let (quota_default, quota_groups) = self.quotas()?;
        let audit_keep_days = self.u32_in("AUDIT_KEEP_DAYS", 1, 36_500)?.unwrap_or(365);
        let oidc = self.oidc()?;
        let manage = self
            .parse_with(
                "MANAGE",
                "is not one of: pvedeck, pvedeck+seed, all",
                Manage::parse,
            )?
            .unwrap_or_default();

        let sim_speed = self
            .parse_with("SIM_SPEED", "is not a positive number", |raw| {
                raw.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
            })?
            .unwrap_or(1.0);
        let sim_jitter = self.int_in("SIM_JITTER", 0, 50)?.unwrap_or(5) as f64 / 100.0;
        let sim_pvesh = Duration::from_millis(self.int_in("SIM_PVESH_MS", 0, 60_000)?.unwrap_or(0));
        let sim_size = match (
            self.u32_in("SIM_NODES", 1, 1000)?,
            self.u32_in("SIM_VMS", 0, 100_000)?,
        ) {
            (None, None) => None,
            (nodes, vms) => Some((nodes.unwrap_or(3), vms.unwrap_or(0))),
        };
        let sim_node_memory = self
            .parse_with(
                "SIM_NODE_MEMORY",
                "is not a comma list of GiB from 1 to 65536",
                |raw| {
                    raw.split(',')
                        .map(|g| {
                            g.trim()
                                .parse::<u64>()
                                .ok()
                                .filter(|g| (1..=65_536).contains(g))
                        })
                        .collect::<Option<Vec<u64>>>()
                },
            )?
            .unwrap_or_default();

        let ssh_port = self.port("SSH_PORT", false)?.unwrap_or(22);
        // The simulated guests boot SIM_SPEED times faster: so does the polling.
        let default_poll_ms = match backend {
            BackendKind::Sim => (5000.0 / sim_speed).max(1.0) as u64,
            BackendKind::Cli | BackendKind::Api => 5000,
        };
        let ssh_poll_interval = Duration::from_millis(
            self.int_in("SSH_POLL_INTERVAL_MS", 1, 3_600_000)?
                .unwrap_or(default_poll_ms),
        );
        let ssh_poll_attempts = self.u32_in("SSH_POLL_ATTEMPTS", 1, 100_000)?.unwrap_or(60);

        let site_root = self.get("LEPTOS_SITE_ROOT").unwrap_or("target/site").into();
        let log_filter = self.get("RUST_LOG").unwrap_or("info").to_string();

        Ok(Config {
            cluster: clusters::DEFAULT.to_string(),
            other_clusters: Vec::new(),
            port,
            bind,
            backend,
            gateway,
            main_node,
            nodes,
            assign_storage,
            assign_ip_start,
            assign_ip_end,
            template_ids,
            allow_ips,
            trusted_proxies,
            tls,
            database_url,
            replica_name,
            job_lease,
            consoles,
            limits,
            vm_balloon_min_mb,
            max_overcommit,
            vm_root_password,
            vm_ip_filter,
            reserved,
            data_dir,
            image_cache_dir,
            image_base,
            api_tokens,
            pve_api,
            import_storage,
            image_fetch,
            sites,
            session_ttl,
            quota_default,
            quota_groups,
            audit_keep_days,
            oidc,
            shutdown_grace,
            job_limits,
            image_max_bytes,
            image_verify,
            image_download_timeout,
            max_pve_commands,
            manage,
            ssh_port,
            ssh_poll_interval,
            ssh_poll_attempts,
            sim_speed,
            sim_jitter,
            sim_pvesh,
            sim_size,
            sim_node_memory,
            ssh_key_dir,
            admin_keys_file,
            init_scripts,
            install_method,
            snapshot_interval,
            snapshot_idle,
            command_timeout,
            long_command_timeout,
            site_root,
            log_filter,
        })
    }

    /// `NODE_<name>=<ip>`. Node.js owns `NODE_ENV`, `NODE_OPTIONS` and friends,
    /// which are upper-case; Proxmox node names are host names, which have
    /// lower-case letters, so a suffix without one is not ours.
    fn nodes(&self) -> Result<BTreeMap<String, Ipv4Addr>, ConfigError> {
        let mut nodes = BTreeMap::new();
        for (var, raw) in self.family("NODE_", "NODE_<name>") {
            let Some(name) = var.strip_prefix("NODE_") else {
                continue;
            };
            if !name.chars().any(|c| c.is_ascii_lowercase()) || raw.trim().is_empty() {
                continue;
            }
            if !is_dns_label(name) {
                return Err(invalid(var, raw, "is not for a valid node name"));
            }
            let ip = raw
                .trim()
                .parse()
                .map_err(|_| invalid(var, raw, "is not an IPv4 address"))?;
            nodes.insert(name.to_string(), ip);
        }
        Ok(nodes)
    }

    /// The `api` backend's settings. The token's value is never echoed in
    /// an error.
    fn api_settings(&self) -> Result<ApiSettings, ConfigError> {
        let missing = |var: &str, why: &str| ConfigError::Missing {
            var: var.to_string(),
            why: why.to_string(),
        };
        let raw = self.get("PVE_API_URL").ok_or_else(|| {
            missing(
                "PVE_API_URL",
                "required when PVE_BACKEND=api (https://<node>:8006)",
            )
        })?;
        let base = raw.trim_end_matches('/');
        if !base.starts_with("https://") || base.len() <= "https://".len() {
            return Err(invalid(
                "PVE_API_URL",
                raw,
                "is not an https:// address (https://<node>:8006)",
            ));
        }
        let url = if base.ends_with("/api2/json") {
            base.to_string()
        } else {
            format!("{base}/api2/json")
        };
        let token = self.get("PVE_API_TOKEN").ok_or_else(|| {
            missing(
                "PVE_API_TOKEN",
                "required when PVE_BACKEND=api (user@realm!tokenid=secret)",
            )
        })?;
        if !pve_api::token_shape(token) {
            return Err(ConfigError::Invalid {
                var: "PVE_API_TOKEN".to_string(),
                value: "(hidden)".to_string(),
                expected: "is not a token: user@realm!tokenid=secret".to_string(),
            });
        }
        let fingerprint = self.get("PVE_API_FINGERPRINT");
        let ca_file = self.get("PVE_API_CA_FILE");
        let insecure = self.get("PVE_API_INSECURE") == Some("1");
        let trust = match (fingerprint, ca_file, insecure) {
            (Some(raw), None, false) => Trust::Pinned(Fingerprint::parse(raw).ok_or_else(|| {
                invalid(
                    "PVE_API_FINGERPRINT",
                    raw,
                    "is not a SHA-256 fingerprint (32 hex pairs, AB:CD:…, as `pvenode cert info` shows)",
                )
            })?),
            (None, Some(path), false) => Trust::Ca(read_certificates(path).map_err(|why| {
                invalid("PVE_API_CA_FILE", path, why)
            })?),
            (None, None, true) => Trust::Insecure,
            (None, None, false) => {
                return Err(missing(
                    "PVE_API_FINGERPRINT",
                    "the API server's certificate must be trusted: set PVE_API_FINGERPRINT \
                     (the SHA-256 of pveproxy's certificate, `pvenode cert info`), or \
                     PVE_API_CA_FILE, or PVE_API_INSECURE=1",
                ));
            }
            _ => {
                return Err(ConfigError::Invalid {
                    var: "PVE_API_FINGERPRINT".to_string(),
                    value: "(with others)".to_string(),
                    expected: "goes alone: set one of PVE_API_FINGERPRINT, PVE_API_CA_FILE, \
                               PVE_API_INSECURE=1"
                        .to_string(),
                });
            }
        };
        Ok(ApiSettings {
            url,
            token: Secret::new(token),
            trust,
        })
    }

    /// `OIDC_*`: all of issuer and client id, or none of the settings.
    fn oidc(&self) -> Result<Option<oidc::OidcSettings>, ConfigError> {
        let issuer = self.get("OIDC_ISSUER");
        let client_id = self.get("OIDC_CLIENT_ID");
        let secret = self.get("OIDC_CLIENT_SECRET");
        let secret_file = self.get("OIDC_CLIENT_SECRET_FILE");
        let groups_claim = self.get("OIDC_GROUPS_CLAIM");
        let admin_groups = self.get("OIDC_ADMIN_GROUPS");
        let (issuer, client_id) = match (issuer, client_id) {
            (None, None) => {
                let stray = [
                    ("OIDC_CLIENT_SECRET", secret),
                    ("OIDC_CLIENT_SECRET_FILE", secret_file),
                    ("OIDC_GROUPS_CLAIM", groups_claim),
                    ("OIDC_ADMIN_GROUPS", admin_groups),
                ]
                .into_iter()
                .find(|(_, v)| v.is_some());
                return match stray {
                    None => Ok(None),
                    Some((var, _)) => Err(ConfigError::Missing {
                        var: "OIDC_ISSUER".to_string(),
                        why: format!("{var} is set, which is for OpenID Connect sign-in"),
                    }),
                };
            }
            (Some(issuer), Some(id)) => (issuer, id),
            (None, Some(_)) => {
                return Err(ConfigError::Missing {
                    var: "OIDC_ISSUER".to_string(),
                    why: "OIDC_CLIENT_ID is set".to_string(),
                });
            }
            (Some(_), None) => {
                return Err(ConfigError::Missing {
                    var: "OIDC_CLIENT_ID".to_string(),
                    why: "OIDC_ISSUER is set".to_string(),
                });
            }
        };
        let issuer = issuer.trim_end_matches('/');
        let url_ok = issuer
            .strip_prefix("https://")
            .or_else(|| issuer.strip_prefix("http://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        if !url_ok {
            return Err(invalid("OIDC_ISSUER", issuer, "is not an http(s) URL"));
        }
        let client_secret = match (secret, secret_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "OIDC_CLIENT_SECRET_FILE",
                    "<hidden>",
                    "goes alone: set OIDC_CLIENT_SECRET or OIDC_CLIENT_SECRET_FILE",
                ));
            }
            (Some(secret), None) => Some(Secret::new(secret)),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        "OIDC_CLIENT_SECRET_FILE",
                        path,
                        format!("cannot be read: {e}"),
                    )
                })?;
                let text = text.trim();
                if text.is_empty() {
                    return Err(invalid("OIDC_CLIENT_SECRET_FILE", path, "is empty"));
                }
                Some(Secret::new(text))
            }
            (None, None) => None,
        };
        let admin_groups = admin_groups
            .map(|raw| {
                raw.split([',', ' '])
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(oidc::OidcSettings {
            issuer: issuer.to_string(),
            client_id: client_id.to_string(),
            client_secret,
            groups_claim: groups_claim.unwrap_or("groups").to_string(),
            admin_groups,
        }))
    }

    /// `QUOTA_DEFAULT` over pvedeck's own, and each `QUOTA_GROUP_<name>`
    /// over that.
    fn quotas(
        &self,
    ) -> Result<
        (
            pvedeck_domain::account::Quota,
            BTreeMap<String, pvedeck_domain::account::Quota>,
        ),
        ConfigError,
    > {
        use pvedeck_domain::account::{BUILT_IN_QUOTA, Quota, is_user_name};
        let default = match self.get("QUOTA_DEFAULT") {
            None => BUILT_IN_QUOTA,
            Some(raw) => Quota::parse(raw)
                .map_err(|why| invalid("QUOTA_DEFAULT", raw, &why))?
                .over(BUILT_IN_QUOTA),
        };
        let mut groups = BTreeMap::new();
        for (var, raw) in self.family("QUOTA_GROUP_", "QUOTA_GROUP_<name>") {
            let group = &var["QUOTA_GROUP_".len()..];
            if !is_user_name(group) {
                return Err(invalid(var, raw, "names no group after QUOTA_GROUP_"));
            }
            let quota = Quota::parse(raw.trim()).map_err(|why| invalid(var, raw, &why))?;
            groups.insert(group.to_string(), quota.over(default));
        }
        Ok((default, groups))
    }

    /// `IMAGE_VERIFY_<OS>` (`checksum` or `none`) and `IMAGE_KEYRING_<OS>`
    /// (a file), named like `IMAGE_BASE_<OS>`.
    fn image_verify(&self) -> Result<BTreeMap<Os, ImageVerify>, ConfigError> {
        let os_of = |var: &str, prefix: &str, raw: &str| {
            let os = var.strip_prefix(prefix).unwrap_or_default();
            Os::parse(&os.to_ascii_lowercase()).ok_or_else(|| {
                invalid(
                    var,
                    raw,
                    format!("is for an OS pvedeck does not install ({})", Os::names()),
                )
            })
        };
        let mut verify = BTreeMap::new();
        for (var, raw) in self.family("IMAGE_VERIFY_", "IMAGE_VERIFY_<OS>") {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let os = os_of(var, "IMAGE_VERIFY_", raw)?;
            let mode = match raw {
                "checksum" => ImageVerify::Checksum,
                "none" => ImageVerify::Unchecked,
                _ => return Err(invalid(var, raw, "is neither checksum nor none")),
            };
            verify.insert(os, mode);
        }
        for (var, raw) in self.family("IMAGE_KEYRING_", "IMAGE_KEYRING_<OS>") {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let os = os_of(var, "IMAGE_KEYRING_", raw)?;
            if verify.get(&os) == Some(&ImageVerify::Unchecked) {
                return Err(invalid(
                    var,
                    raw,
                    format!(
                        "asks for signed checksums of {os} images, which IMAGE_VERIFY_{}=none \
                         does not want: unset one of them",
                        os.name().to_ascii_uppercase()
                    ),
                ));
            }
            verify.insert(os, ImageVerify::Signed(PathBuf::from(raw)));
        }
        Ok(verify)
    }

    fn image_bases(&self) -> Result<BTreeMap<Os, String>, ConfigError> {
        let mut bases = BTreeMap::new();
        for (var, raw) in self.family("IMAGE_BASE_", "IMAGE_BASE_<OS>") {
            let Some(os) = var.strip_prefix("IMAGE_BASE_") else {
                continue;
            };
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let Some(os) = Os::parse(&os.to_ascii_lowercase()) else {
                return Err(invalid(
                    var,
                    raw,
                    format!("is for an OS pvedeck does not install ({})", Os::names()),
                ));
            };
            let is_url = ["http://", "https://"].iter().any(|scheme| {
                raw.strip_prefix(scheme)
                    .is_some_and(|rest| !rest.is_empty())
            });
            if !is_url {
                return Err(invalid(var, raw, "is not an http:// or https:// URL"));
            }
            bases.insert(os, raw.trim_end_matches('/').to_string());
        }
        Ok(bases)
    }
}

/// Proxmox storage ids: `[a-z][a-z0-9\-_.]*[a-z0-9]`.
fn is_storage_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
        && id.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Proxmox's largest VMID.
const MAX_VMID: u32 = 999_999_999;

fn parse_reserved(raw: &str) -> Result<BTreeMap<u32, String>, String> {
    let mut reserved = BTreeMap::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, label) = entry.split_once(':').unwrap_or((entry, "reserved"));
        let id: u32 = id
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=MAX_VMID).contains(n))
            .ok_or_else(|| {
                format!(
                    "is not a list of id:label with ids from 1 to {MAX_VMID} ('{entry}' is not)"
                )
            })?;
        let label = match label.trim() {
            "" => "reserved",
            l => l,
        };
        if reserved.insert(id, label.to_string()).is_some() {
            return Err(format!("names id {id} twice"));
        }
    }
    Ok(reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable the parser looks up, over a start of each backend
    /// (what docs/configuration.md must describe).
    pub(crate) fn variables_read() -> std::collections::BTreeSet<&'static str> {
        let starts: [&[(&str, &str)]; 3] = [
            &[],
            &[
                ("PVE_BACKEND", "cli"),
                ("GATEWAY", "10.0.0.1"),
                ("MAIN_NODE", "pve1"),
                ("NODE_pve1", "10.0.0.11"),
                ("ASSIGN_STORAGE", "local-lvm"),
                ("HOME", "/root"),
            ],
            &[
                ("PVE_BACKEND", "api"),
                ("GATEWAY", "10.0.0.1"),
                ("MAIN_NODE", "pve1"),
                ("ASSIGN_STORAGE", "local-lvm"),
                ("PVE_API_URL", "https://pve1:8006"),
                ("PVE_API_TOKEN", "pvedeck@pve!deck=secret"),
                ("PVE_API_INSECURE", "1"),
                ("HOME", "/root"),
            ],
        ];
        let mut read = std::collections::BTreeSet::new();
        for start in starts {
            let all: BTreeMap<String, String> = start
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let vars = Vars::new(&all);
            clusters::parse(&all, &vars).expect("a valid start");
            read.extend(vars.read.into_inner());
        }
        read
    }

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(vars.iter().copied())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        match parse(vars) {
            Ok(_) => panic!("{vars:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    const CLI: [(&str, &str); 6] = [
        ("PVE_BACKEND", "cli"),
        ("HOME", "/root"),
        ("GATEWAY", "10.0.0.1"),
        ("MAIN_NODE", "pve1"),
        ("NODE_pve1", "10.0.0.11"),
        ("ASSIGN_STORAGE", "local-lvm"),
    ];

    #[test]
    fn no_variables_give_the_simulated_cluster() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.backend, BackendKind::Sim);
        assert_eq!(c.port, 8080);
        assert_eq!(c.gateway, Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(c.main_node, "pve1");
        assert_eq!(c.nodes.len(), 3);
        assert_eq!(c.node_ip("pve3"), Some(Ipv4Addr::new(192, 168, 0, 13)));
        assert_eq!(c.assign_storage, "local-zfs");
        assert_eq!((c.assign_ip_start, c.assign_ip_end), (100, 254));
        assert_eq!(c.template_ids, 9000..=9099);
        assert!(c.allow_ips.allows("203.0.113.9".parse().unwrap()));
        assert_eq!(c.ssh_poll_interval, Duration::from_millis(5000));
        assert_eq!(c.ssh_poll_attempts, 60);
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.image_cache_dir, PathBuf::from("./data/images"));
        assert_eq!(c.ssh_key_dir, PathBuf::from("./data/ssh"));
        assert_eq!(c.snapshot_interval, Duration::from_secs(2));
        assert_eq!(c.snapshot_idle, Duration::from_secs(60));
    }

    #[test]
    fn cli_keeps_go_pve_qemu_key_location_and_images_under_data_dir() {
        let c = parse(&CLI).unwrap();
        assert_eq!(c.image_cache_dir, PathBuf::from("./data/images"));
        assert_eq!(c.ssh_key_dir, PathBuf::from("/root/.ssh"));
        assert_eq!(c.ssh_poll_interval, Duration::from_millis(5000));
    }

    #[test]
    fn sim_speed_shortens_the_default_poll_interval() {
        let c = parse(&[("SIM_SPEED", "100")]).unwrap();
        assert_eq!(c.ssh_poll_interval, Duration::from_millis(50));
        let c = parse(&[("SIM_SPEED", "100"), ("SSH_POLL_INTERVAL_MS", "7")]).unwrap();
        assert_eq!(c.ssh_poll_interval, Duration::from_millis(7));
    }

    #[test]
    fn an_open_cli_server_is_warned_about_and_reserved_takes_any_vmid() {
        let open = parse(&CLI).unwrap();
        assert!(
            open.exposure()
                .is_some_and(|w| w.contains("ALLOW_IPS open to everyone and no API_TOKENS")),
            "{:?}",
            open.exposure()
        );
        let mut closed: Vec<_> = CLI.to_vec();
        closed.push(("ALLOW_IPS", "10.0.0.0/24"));
        assert_eq!(parse(&closed).unwrap().exposure(), None);
        let mut local: Vec<_> = CLI.to_vec();
        local.push(("BIND_ADDR", "127.0.0.1"));
        assert_eq!(parse(&local).unwrap().exposure(), None, "loopback only");
        assert_eq!(
            parse(&[]).unwrap().exposure(),
            None,
            "the simulator risks nothing"
        );
        let c = parse(&[("RESERVED", "9050:nas,100000:big")]).unwrap();
        assert_eq!(c.reserved.get(&100_000).map(String::as_str), Some("big"));
    }

    #[test]
    fn sites_are_read_and_checked() {
        let c = parse(&[
            ("PUBLIC_URL", "https://Deck.example.org/pvedeck"),
            ("ALLOWED_HOSTS", "deck.lan, Deck2.lan"),
            ("ALLOWED_ORIGINS", "https://portal.example.org"),
        ])
        .unwrap();
        assert_eq!(c.sites.public.as_deref(), Some("https://deck.example.org"));
        assert_eq!(c.sites.hosts, ["deck.lan", "deck2.lan"]);
        assert_eq!(c.sites.origins, ["https://portal.example.org"]);
        assert_eq!(
            err(&[("PUBLIC_URL", "deck.example.org")]),
            "PUBLIC_URL=deck.example.org is not an http:// or https:// URL"
        );
        assert_eq!(
            err(&[("ALLOWED_HOSTS", "deck_lan")]),
            "ALLOWED_HOSTS=deck_lan is not a host name (a comma list)"
        );
        assert!(err(&[("ALLOWED_ORIGINS", "https://x.org/path")]).starts_with("ALLOWED_ORIGINS="));
    }

    #[test]
    fn bad_ipv4_names_variable_value_and_expectation() {
        assert_eq!(
            err(&[("GATEWAY", "192.168.0")]),
            "GATEWAY=192.168.0 is not an IPv4 address"
        );
    }

    #[test]
    fn cli_backend_needs_gateway_main_node_and_storage() {
        for missing in ["GATEWAY", "MAIN_NODE", "ASSIGN_STORAGE"] {
            let vars: Vec<_> = CLI.iter().copied().filter(|(k, _)| *k != missing).collect();
            assert_eq!(
                err(&vars),
                format!("{missing} is not set: required when PVE_BACKEND=cli")
            );
        }
        assert!(parse(&CLI).is_ok());
    }

    #[test]
    fn unknown_backend_is_refused() {
        assert_eq!(
            err(&[("PVE_BACKEND", "pve")]),
            "PVE_BACKEND=pve is not one of: sim, cli, api"
        );
    }

    const PIN: &str = "10:94:FF:00:3A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:\
                       10:94:FF:00:3A:BC:DE:F0:12:34:56:78:9A:BC:DE:3A";

    fn api(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut vars = vec![
            ("PVE_BACKEND", "api"),
            ("HOME", "/var/lib/pvedeck"),
            ("GATEWAY", "10.0.0.1"),
            ("MAIN_NODE", "pve1"),
            ("ASSIGN_STORAGE", "local-lvm"),
            ("PVE_API_URL", "https://pve1.example.org:8006/"),
            ("PVE_API_TOKEN", "pvedeck@pve!deck=0f1e2d3c-secret"),
        ];
        vars.extend_from_slice(extra);
        vars
    }

    #[test]
    fn the_api_backend_needs_no_node_addresses_and_a_trusted_certificate() {
        let c = parse(&api(&[("PVE_API_FINGERPRINT", PIN)])).unwrap();
        assert_eq!(c.backend, BackendKind::Api);
        let settings = c.pve_api.unwrap();
        assert_eq!(settings.url, "https://pve1.example.org:8006/api2/json");
        assert!(matches!(settings.trust, Trust::Pinned(p) if p.to_string() == PIN));
        assert_eq!(c.import_storage, "local");
        assert_eq!(c.image_fetch, ImageFetch::Download);
        assert!(
            !format!("{settings:?}").contains("0f1e2d3c"),
            "token printed"
        );

        let refused = err(&api(&[]));
        assert!(
            refused.starts_with("PVE_API_FINGERPRINT is not set"),
            "{refused}"
        );
        assert!(refused.contains("PVE_API_INSECURE=1"), "{refused}");
        assert!(matches!(
            parse(&api(&[("PVE_API_INSECURE", "1")]))
                .unwrap()
                .pve_api
                .unwrap()
                .trust,
            Trust::Insecure
        ));
        let both = err(&api(&[
            ("PVE_API_FINGERPRINT", PIN),
            ("PVE_API_INSECURE", "1"),
        ]));
        assert!(both.contains("goes alone"), "{both}");
        let bad = err(&api(&[("PVE_API_FINGERPRINT", "10:94")]));
        assert!(bad.contains("is not a SHA-256 fingerprint"), "{bad}");
        let missing = err(&api(&[("PVE_API_CA_FILE", "/nonexistent/ca.pem")]));
        assert!(missing.contains("cannot be read"), "{missing}");
    }

    #[test]
    fn images_are_downloaded_by_the_node_unless_uploading_is_asked() {
        let pin = ("PVE_API_FINGERPRINT", PIN);
        let c = parse(&api(&[pin, ("IMAGE_FETCH", "upload")])).unwrap();
        assert_eq!(c.image_fetch, ImageFetch::Upload);
        let e = parse(&api(&[pin, ("IMAGE_FETCH", "scp")])).unwrap_err();
        assert!(e.to_string().contains("IMAGE_FETCH"), "{e}");
    }
    #[test]
    fn the_api_address_is_https_and_the_token_is_never_echoed() {
        let mut vars = api(&[("PVE_API_FINGERPRINT", PIN)]);
        vars[5] = ("PVE_API_URL", "http://pve1:8006");
        assert!(err(&vars).contains("is not an https:// address"));
        vars[5] = ("PVE_API_URL", "https://pve1:8006/api2/json");
        vars[6] = ("PVE_API_TOKEN", "hunter2-secret-without-id");
        let refused = err(&vars);
        assert!(refused.contains("user@realm!tokenid=secret"), "{refused}");
        assert!(!refused.contains("hunter2"), "{refused}");
        vars.remove(6);
        assert!(err(&vars).starts_with("PVE_API_TOKEN is not set"));
    }

    #[test]
    fn max_overcommit_is_a_ratio_within_reason() {
        assert_eq!(parse(&[]).unwrap().max_overcommit, 1.0);
        assert_eq!(
            parse(&[("MAX_OVERCOMMIT", "1.5")]).unwrap().max_overcommit,
            1.5
        );
        assert_eq!(
            parse(&[("MAX_OVERCOMMIT", "10")]).unwrap().max_overcommit,
            10.0
        );
        for bad in ["0", "-1", "0.05", "11", "NaN", "inf", "lots"] {
            assert_eq!(
                err(&[("MAX_OVERCOMMIT", bad)]),
                format!("MAX_OVERCOMMIT={bad} is not a number from 0.1 to 10")
            );
        }
        assert_eq!(
            parse(&[("SIM_NODE_MEMORY", "108, 68,48")])
                .unwrap()
                .sim_node_memory,
            vec![108, 68, 48]
        );
        assert_eq!(
            err(&[("SIM_NODE_MEMORY", "64,0")]),
            "SIM_NODE_MEMORY=64,0 is not a comma list of GiB from 1 to 65536"
        );
    }

    #[test]
    fn main_node_needs_an_address() {
        let vars: Vec<_> = CLI
            .iter()
            .copied()
            .filter(|(k, _)| *k != "NODE_pve1")
            .collect();
        assert_eq!(
            err(&vars),
            "NODE_pve1 is not set: the main node pve1 needs an address"
        );
        assert_eq!(
            err(&[("NODE_pve2", "10.0.0.300")]),
            "NODE_pve2=10.0.0.300 is not an IPv4 address"
        );
    }

    #[test]
    fn node_js_variables_are_not_nodes() {
        let c = parse(&[("NODE_ENV", "production"), ("NODE_OPTIONS", "--x")]).unwrap();
        assert_eq!(c.nodes.len(), 3);
    }

    #[test]
    fn integers_are_checked_against_their_range() {
        assert_eq!(
            err(&[("VM_MAX_CPU", "64")]),
            "VM_MAX_CPU=64 is not an integer from 1 to 32"
        );
        assert_eq!(
            err(&[("VM_MAX_RAM", "lots")]),
            "VM_MAX_RAM=lots is not an integer >= 512"
        );
        assert_eq!(
            err(&[("PORT", "70000")]),
            "PORT=70000 is not a port number (0-65535, 0 picks a free port)"
        );
        assert_eq!(
            err(&[("SSH_PORT", "0")]),
            "SSH_PORT=0 is not a port number (1-65535)"
        );
        assert_eq!(
            err(&[("SIM_SPEED", "0")]),
            "SIM_SPEED=0 is not a positive number"
        );
    }

    #[test]
    fn assign_range_is_clamped_and_swapped() {
        let c = parse(&[("ASSIGN_IP_START", "250"), ("ASSIGN_IP_END", "20")]).unwrap();
        assert_eq!((c.assign_ip_start, c.assign_ip_end), (100, 250));
        let c = parse(&[("ASSIGN_IP_END", "999")]).unwrap();
        assert_eq!(c.assign_ip_end, 254);
        assert_eq!(
            err(&[("ASSIGN_IP_START", "1x")]),
            "ASSIGN_IP_START=1x is not an integer >= 0"
        );
        assert_eq!(
            err(&[("TEMPLATE_ID_START", "200"), ("TEMPLATE_ID_END", "300")]),
            "TEMPLATE_ID_START=200-300 overlaps ASSIGN_IP_START-ASSIGN_IP_END (100-254), where \
             installs take their ids"
        );
        assert_eq!(
            parse(&[("TEMPLATE_ID_START", "255"), ("TEMPLATE_ID_END", "300")])
                .unwrap()
                .template_ids,
            255..=300
        );
    }

    #[test]
    fn allow_list_accepts_addresses_and_cidr() {
        let c = parse(&[("ALLOW_IPS", "10.0.0.0/8, 127.0.0.1")]).unwrap();
        assert!(c.allow_ips.allows("10.9.8.7".parse().unwrap()));
        assert!(!c.allow_ips.allows("192.168.1.1".parse().unwrap()));
        assert_eq!(
            err(&[("ALLOW_IPS", "10.0.0.0/33")]),
            "ALLOW_IPS=10.0.0.0/33 is not a comma list of IP addresses or CIDR blocks \
             ('10.0.0.0/33' is neither)"
        );
    }

    #[test]
    fn reserved_ids_parse_and_refuse_nonsense() {
        let c = parse(&[("RESERVED", "100:router, 250:nas,200")]).unwrap();
        assert_eq!(c.reserved.get(&100).map(String::as_str), Some("router"));
        assert_eq!(c.reserved.get(&200).map(String::as_str), Some("reserved"));
        assert_eq!(
            err(&[("RESERVED", "100:a,x:b")]),
            "RESERVED=100:a,x:b is not a list of id:label with ids from 1 to 999999999 ('x:b' is not)"
        );
        assert_eq!(
            err(&[("RESERVED", "100:a,100:b")]),
            "RESERVED=100:a,100:b names id 100 twice"
        );
    }

    #[test]
    fn tls_files_go_together_and_proxies_are_addresses() {
        assert_eq!(parse(&[]).unwrap().tls, None);
        let both = parse(&[("TLS_CERT_FILE", "/c.pem"), ("TLS_KEY_FILE", "/k.pem")]).unwrap();
        assert!(both.serves_https());
        assert_eq!(
            err(&[("TLS_CERT_FILE", "/c.pem")]),
            "TLS_CERT_FILE=/c.pem needs TLS_KEY_FILE as well: set both or neither"
        );
        assert_eq!(
            err(&[("TRUSTED_PROXIES", "10.0.0.1, proxy")]),
            "TRUSTED_PROXIES=10.0.0.1, proxy is not a comma list of IP addresses or CIDR \
             blocks ('proxy' is neither)"
        );
    }

    #[test]
    fn image_verification_is_per_os_and_checksums_are_the_default() {
        let c = parse(&[]).unwrap();
        assert!(c.image_verify.is_empty());
        assert_eq!(c.image_download_timeout, Duration::from_secs(1800));
        let c = parse(&[
            ("IMAGE_VERIFY_DEBIAN", "none"),
            ("IMAGE_VERIFY_ROCKYLINUX", "checksum"),
            ("IMAGE_KEYRING_UBUNTU", "/etc/pvedeck/ubuntu-cloudimage.gpg"),
            ("IMAGE_DOWNLOAD_TIMEOUT_SECS", "60"),
        ])
        .unwrap();
        assert_eq!(c.image_verify[&Os::Debian], ImageVerify::Unchecked);
        assert_eq!(c.image_verify[&Os::Rockylinux], ImageVerify::Checksum);
        assert_eq!(
            c.image_verify[&Os::Ubuntu],
            ImageVerify::Signed(PathBuf::from("/etc/pvedeck/ubuntu-cloudimage.gpg"))
        );
        assert_eq!(c.image_download_timeout, Duration::from_secs(60));
        assert_eq!(
            err(&[("IMAGE_VERIFY_DEBIAN", "sha1")]),
            "IMAGE_VERIFY_DEBIAN=sha1 is neither checksum nor none"
        );
        assert!(
            err(&[("IMAGE_VERIFY_ARCH", "none")])
                .starts_with("IMAGE_VERIFY_ARCH=none is for an OS pvedeck does not install")
        );
        assert_eq!(
            err(&[
                ("IMAGE_VERIFY_UBUNTU", "none"),
                ("IMAGE_KEYRING_UBUNTU", "/k.gpg")
            ]),
            "IMAGE_KEYRING_UBUNTU=/k.gpg asks for signed checksums of ubuntu images, which \
             IMAGE_VERIFY_UBUNTU=none does not want: unset one of them"
        );
        assert_eq!(
            err(&[("IMAGE_DOWNLOAD_TIMEOUT_SECS", "0")]),
            "IMAGE_DOWNLOAD_TIMEOUT_SECS=0 is not an integer from 1 to 604800"
        );
    }

    #[test]
    fn image_base_must_be_a_url_for_a_known_os() {
        let c = parse(&[("IMAGE_BASE_DEBIAN", "http://127.0.0.1:9/img/")]).unwrap();
        assert_eq!(
            c.image_base.get(&Os::Debian).map(String::as_str),
            Some("http://127.0.0.1:9/img")
        );
        assert_eq!(
            err(&[("IMAGE_BASE_UBUNTU", "ftp://x")]),
            "IMAGE_BASE_UBUNTU=ftp://x is not an http:// or https:// URL"
        );
        assert_eq!(
            err(&[("IMAGE_BASE_ARCH", "http://x")]),
            "IMAGE_BASE_ARCH=http://x is for an OS pvedeck does not install \
             (debian, ubuntu, rockylinux)"
        );
    }

    #[test]
    fn bad_tokens_are_reported_without_showing_them() {
        let e = err(&[("API_TOKENS", "short")]);
        assert!(!e.contains("short"), "{e}");
        assert!(e.starts_with("API_TOKENS=<hidden>"), "{e}");
    }

    #[test]
    fn names_of_nodes_and_storages_are_checked() {
        assert_eq!(
            err(&[("MAIN_NODE", "pve 1")]),
            "MAIN_NODE=pve 1 is not a node name (letters, digits and '-')"
        );
        assert_eq!(
            err(&[("ASSIGN_STORAGE", "Local")]),
            "ASSIGN_STORAGE=Local is not a storage id (lower-case letters, digits, '-', '_', '.')"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let c = parse(&[("VM_ROOT_PASSWORD", "hunter2")]).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn the_ip_filter_is_auto_unless_told_on_or_off() {
        assert_eq!(parse(&[]).unwrap().vm_ip_filter, IpFilterMode::Auto);
        let c = parse(&[("VM_IP_FILTER", "off")]).unwrap();
        assert_eq!(c.vm_ip_filter, IpFilterMode::Off);
        assert_eq!(
            parse(&[("VM_IP_FILTER", "yes")]).unwrap_err().to_string(),
            "VM_IP_FILTER=yes is not one of: auto, on, off"
        );
    }

    #[test]
    fn the_root_password_is_shared_random_or_none() {
        let c = parse(&[("VM_ROOT_PASSWORD", "random")]).unwrap();
        assert!(matches!(c.vm_root_password, Some(RootPassword::Random)));
        let c = parse(&[("VM_ROOT_PASSWORD", "Random!1")]).unwrap();
        assert!(
            matches!(&c.vm_root_password, Some(RootPassword::Shared(p)) if p.expose() == "Random!1")
        );
        assert!(parse(&[]).unwrap().vm_root_password.is_none());
    }
}
