//! Who uses pvedeck: people and their roles, what each may hold (quotas),
//! their API tokens, and the audit log's entries. The rules that use these
//! live in the server's engine; here are the words and their formats.

use serde::{Deserialize, Serialize};

/// What a person may do: an `admin` everything (as every caller could
/// before there were users), a `user` only with their own VMs and jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    pub fn parse(word: &str) -> Option<Role> {
        match word {
            "admin" => Some(Role::Admin),
            "user" => Some(Role::User),
            _ => None,
        }
    }
}

/// Someone signed in: by a session, a personal token, or one of
/// `API_TOKENS` (an administrator without a user record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Principal {
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// Whether `name` may name a user: what OpenID providers send as a
/// preferred user name, and what a shell and a URL take without quoting.
pub fn is_user_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
        && !name.starts_with(['-', '.'])
}

/// What a user may hold at once. A measure is `None` where this quota
/// does not set it (a more general one decides), [`UNLIMITED`] where it
/// sets no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Quota {
    pub vms: Option<u32>,
    pub cores: Option<u32>,
    /// GiB.
    pub memory: Option<u32>,
    /// GiB.
    pub disk: Option<u32>,
}

/// A measure without a limit.
pub const UNLIMITED: u32 = u32::MAX;

/// What pvedeck allows a user without `QUOTA_DEFAULT`.
pub const BUILT_IN_QUOTA: Quota = Quota {
    vms: Some(5),
    cores: Some(16),
    memory: Some(32),
    disk: Some(500),
};

impl Quota {
    /// `vms=5,cores=16,memory=32,disk=500`: any of the four, each once,
    /// a whole number or `unlimited`. A measure left out is not set here
    /// (a more general quota decides it).
    pub fn parse(text: &str) -> Result<Quota, String> {
        let mut quota = Quota::default();
        let mut seen = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!(
                    "'{part}' is not measure=value (measures: vms, cores, memory, disk)"
                ));
            };
            let key = key.trim();
            let value = value.trim();
            if seen.contains(&key) {
                return Err(format!("'{key}' is given twice"));
            }
            let slot = match key {
                "vms" => &mut quota.vms,
                "cores" => &mut quota.cores,
                "memory" => &mut quota.memory,
                "disk" => &mut quota.disk,
                other => {
                    return Err(format!(
                        "'{other}' is not a measure (vms, cores, memory in GiB, disk in GiB)"
                    ));
                }
            };
            *slot = match value {
                "unlimited" => Some(UNLIMITED),
                n => Some(
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| *n < UNLIMITED)
                        .ok_or_else(|| {
                            format!("{key}={n}: not a whole number from 0 (or 'unlimited')")
                        })?,
                ),
            };
            seen.push(key);
        }
        if seen.is_empty() {
            return Err(
                "an empty quota: give vms=N,cores=N,memory=GIB,disk=GIB (any of them)".to_string(),
            );
        }
        Ok(quota)
    }

    /// This quota's measures where it sets them, `base`'s elsewhere.
    pub fn over(self, base: Quota) -> Quota {
        Quota {
            vms: self.vms.or(base.vms),
            cores: self.cores.or(base.cores),
            memory: self.memory.or(base.memory),
            disk: self.disk.or(base.disk),
        }
    }

    /// The more generous of two, measure by measure (a user in two groups
    /// has the larger of their quotas).
    pub fn wider(self, other: Quota) -> Quota {
        fn max(a: Option<u32>, b: Option<u32>) -> Option<u32> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        }
        Quota {
            vms: max(self.vms, other.vms),
            cores: max(self.cores, other.cores),
            memory: max(self.memory, other.memory),
            disk: max(self.disk, other.disk),
        }
    }

    /// The text [`Quota::parse`] reads: the measures this quota sets.
    pub fn text(self) -> String {
        [
            ("vms", self.vms),
            ("cores", self.cores),
            ("memory", self.memory),
            ("disk", self.disk),
        ]
        .into_iter()
        .filter_map(|(name, value)| {
            value.map(|n| match n {
                UNLIMITED => format!("{name}=unlimited"),
                n => format!("{name}={n}"),
            })
        })
        .collect::<Vec<_>>()
        .join(",")
    }
}

/// What a user holds, or asks for: VMs, vCPUs, memory in MiB, disk in GiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub vms: u64,
    pub cores: u64,
    pub memory_mib: u64,
    pub disk_gib: u64,
}

impl Usage {
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            vms: self.vms + other.vms,
            cores: self.cores + other.cores,
            memory_mib: self.memory_mib + other.memory_mib,
            disk_gib: self.disk_gib + other.disk_gib,
        }
    }

    /// The first measure `ask` would take past `quota`, as the refusal
    /// says it: `quota: vms 5 of 5 used`.
    pub fn exceeds(self, ask: Usage, quota: Quota) -> Option<String> {
        let checks = [
            ("vms", self.vms, ask.vms, quota.vms.map(u64::from), ""),
            (
                "cores",
                self.cores,
                ask.cores,
                quota.cores.map(u64::from),
                "",
            ),
            (
                "memory",
                self.memory_mib.div_ceil(1024),
                ask.memory_mib.div_ceil(1024),
                quota.memory.map(u64::from),
                " GiB",
            ),
            (
                "disk",
                self.disk_gib,
                ask.disk_gib,
                quota.disk.map(u64::from),
                " GiB",
            ),
        ];
        checks
            .into_iter()
            .find_map(|(name, used, asked, limit, unit)| {
                let limit = limit.filter(|l| *l != u64::from(UNLIMITED))?;
                (asked > 0 && used + asked > limit).then(|| {
                    format!("quota: {name} {used} of {limit}{unit} used, {asked}{unit} more asked")
                })
            })
    }
}

/// A user's quota and what they hold (the create form, the account page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Allowance {
    pub quota: Quota,
    pub used: Usage,
}

/// A user as admins see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserInfo {
    pub name: String,
    pub role: Role,
    pub groups: Vec<String>,
    /// The user's own quota, where one is set (`pvedeck user quota`).
    pub quota: Option<Quota>,
    /// `local` (made by an admin) or `oidc` (made at first sign-in).
    pub source: String,
    /// Unix time, milliseconds.
    pub created: i64,
}

/// A personal API token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenInfo {
    /// Public: what `pvedeck token revoke` takes.
    pub id: String,
    pub user: String,
    pub name: String,
    /// Unix time, milliseconds.
    pub created: i64,
    pub expires: Option<i64>,
    pub last_used: Option<i64>,
}

/// One change, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: u64,
    /// Unix time, milliseconds.
    pub at: i64,
    /// Who: a user's name, `api-token-N` for the N-th of `API_TOKENS`,
    /// `anonymous` on a server without sign-in, `pvedeck` for its own
    /// admin commands.
    pub user: String,
    /// The client's address, when it came over the network.
    pub client: Option<String>,
    /// `install`, `stop`, `destroy`, `sign-in`, `user add`, …
    pub action: String,
    /// `vm 101`, `job 7`, `user alice`, `token 3f2a…`.
    pub target: Option<String>,
    /// What was asked, never a secret.
    pub summary: String,
    /// `ok`, `job 12`, or why it was refused or failed.
    pub outcome: String,
}

/// Who the browser is signed in as, and how one signs in here (the
/// header, the sign-in page, the create form).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Me {
    /// `None`: not signed in, or a server without sign-in.
    pub principal: Option<Principal>,
    /// Whether this server needs signing in at all.
    pub sign_in: bool,
    /// Whether an OpenID Connect provider is configured.
    pub oidc: bool,
    /// A user's quota and holdings (`None` for admins).
    pub allowance: Option<Allowance>,
}

impl Me {
    /// Whether the admin pages are for this browser: an admin, or anyone
    /// on a server without sign-in.
    pub fn is_admin(&self) -> bool {
        match &self.principal {
            Some(p) => p.is_admin(),
            None => !self.sign_in,
        }
    }
}

/// A user with what they may hold and hold (the users page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRow {
    pub user: UserInfo,
    /// Admins have no quota.
    pub allowance: Option<Allowance>,
    pub tokens: usize,
}

/// A change to a user (the users page): role, groups, own quota text
/// (empty: none of their own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserChange {
    pub name: String,
    pub role: Role,
    pub groups: Vec<String>,
    pub quota: String,
}

/// The audit page's question.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditFilter {
    pub user: Option<String>,
    pub vmid: Option<u32>,
    /// Older than this entry (the next page).
    pub before: Option<u64>,
}

impl Usage {
    /// `3 of 5 VMs, 12 of 16 cores, 24 of 32 GiB memory, 96 of 500 GiB disk`.
    pub fn against(self, quota: Quota) -> String {
        let of = |used: u64, limit: Option<u32>, what: &str| match limit {
            Some(UNLIMITED) | None => format!("{used} {what}"),
            Some(limit) => format!("{used} of {limit} {what}"),
        };
        [
            of(self.vms, quota.vms, "VMs"),
            of(self.cores, quota.cores, "cores"),
            of(self.memory_mib.div_ceil(1024), quota.memory, "GiB memory"),
            of(self.disk_gib, quota.disk, "GiB disk"),
        ]
        .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_parse_in_part_and_overlay() {
        let full = Quota::parse("vms=5,cores=16,memory=32,disk=500").unwrap();
        assert_eq!(full.text(), "vms=5,cores=16,memory=32,disk=500");
        let part = Quota::parse(" cores = 4 , disk=unlimited").unwrap();
        assert_eq!(part.vms, None);
        assert_eq!(part.text(), "cores=4,disk=unlimited");
        assert_eq!(
            part.over(full).text(),
            "vms=5,cores=4,memory=32,disk=unlimited"
        );
        assert!(Quota::parse("vms=5,vms=6").unwrap_err().contains("twice"));
        assert!(
            Quota::parse("gpus=1")
                .unwrap_err()
                .contains("not a measure")
        );
        assert!(Quota::parse("vms=-1").is_err());
        assert!(Quota::parse("").is_err());
        let wide = Quota::parse("vms=2,cores=32,memory=8,disk=unlimited").unwrap();
        assert_eq!(BUILT_IN_QUOTA, full);
        assert_eq!(
            full.wider(wide).text(),
            "vms=5,cores=32,memory=32,disk=unlimited"
        );
    }

    #[test]
    fn a_refusal_names_the_first_measure_past_its_limit() {
        let quota = Quota::parse("vms=5,cores=16,memory=32,disk=500").unwrap();
        let used = Usage {
            vms: 5,
            cores: 10,
            memory_mib: 8192,
            disk_gib: 100,
        };
        let one = Usage {
            vms: 1,
            cores: 2,
            memory_mib: 2048,
            disk_gib: 20,
        };
        assert_eq!(
            used.exceeds(one, quota).as_deref(),
            Some("quota: vms 5 of 5 used, 1 more asked")
        );
        let resize = Usage {
            cores: 7,
            ..Usage::default()
        };
        assert_eq!(
            used.exceeds(resize, quota).as_deref(),
            Some("quota: cores 10 of 16 used, 7 more asked")
        );
        assert_eq!(Usage { vms: 4, ..used }.exceeds(one, quota), None);
        // Giving back is never refused, even past a lowered quota.
        assert_eq!(
            Usage { vms: 9, ..used }.exceeds(Usage::default(), quota),
            None
        );
        let unlimited = Quota::parse("vms=unlimited").unwrap().over(quota);
        assert_eq!(Usage { vms: 900, ..used }.exceeds(one, unlimited), None);
    }

    #[test]
    fn usage_reads_against_its_quota() {
        let used = Usage {
            vms: 3,
            cores: 12,
            memory_mib: 3000,
            disk_gib: 96,
        };
        let quota = Quota::parse("vms=5,cores=16,memory=32,disk=unlimited").unwrap();
        assert_eq!(
            used.against(quota),
            "3 of 5 VMs, 12 of 16 cores, 3 of 32 GiB memory, 96 GiB disk"
        );
    }

    #[test]
    fn user_names_are_plain() {
        assert!(is_user_name("alice"));
        assert!(is_user_name("a.b-c_d@example.org"));
        assert!(!is_user_name(""));
        assert!(!is_user_name("-rf"));
        assert!(!is_user_name("a b"));
        assert!(!is_user_name("a/b"));
        assert!(!is_user_name(&"x".repeat(65)));
    }
}
