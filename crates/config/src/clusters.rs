//! Several Proxmox clusters from one pvedeck (docs/operations.md#several-clusters):
//! `CLUSTERS=a,b` names them, the first is the default one (`/api/vm/:id/*`),
//! and `CLUSTER_<name>_<VAR>` sets a cluster's own value of one of the
//! [`PER_CLUSTER`] variables over the shared one. Without `CLUSTERS` there
//! is one cluster, `default`, configured exactly as before.

use std::collections::BTreeMap;

use super::{Config, ConfigError, Vars, invalid};

/// The name of the one cluster of a configuration without `CLUSTERS`.
pub const DEFAULT: &str = "default";

/// What each cluster may set for itself; everything else (the port, the
/// database, sign-in…) is the server's, one value for all clusters.
pub const PER_CLUSTER: &[&str] = &[
    "PVE_BACKEND",
    "PVE_API_URL",
    "PVE_API_TOKEN",
    "PVE_API_FINGERPRINT",
    "PVE_API_INSECURE",
    "PVE_API_CA_FILE",
    "GATEWAY",
    "MAIN_NODE",
    "ASSIGN_STORAGE",
    "ASSIGN_IP_START",
    "ASSIGN_IP_END",
    "TEMPLATE_ID_START",
    "TEMPLATE_ID_END",
    "RESERVED",
    "IMPORT_STORAGE",
    "IMAGE_FETCH",
    "MANAGE",
    "MAX_OVERCOMMIT",
    "MAX_PVE_COMMANDS",
    "VM_IP_FILTER",
    "SSH_PORT",
    "SSH_KEY_DIR",
    "SIM_NODES",
    "SIM_VMS",
    "SIM_NODE_MEMORY",
];

/// A family a cluster may set member by member (`CLUSTER_b_NODE_pve1`).
const PER_CLUSTER_FAMILIES: &[&str] = &["NODE_"];

/// The most clusters one pvedeck serves.
const MAX_CLUSTERS: usize = 32;

pub use pvedeck_domain::rules::is_cluster_name;

/// The default cluster's name as the admin commands see it, from
/// `CLUSTERS` alone (they read no other setting): its first name, or
/// `default`.
pub fn default_of(clusters: Option<&str>) -> String {
    clusters
        .and_then(|names| names.split(',').map(str::trim).find(|n| !n.is_empty()))
        .map_or_else(|| DEFAULT.to_string(), str::to_string)
}

/// The clusters' names, first the default one.
fn names(vars: &Vars<'_>) -> Result<Vec<String>, ConfigError> {
    let sim = vars.u32_in("SIM_CLUSTERS", 1, MAX_CLUSTERS as u32)?;
    let Some(raw) = vars.get("CLUSTERS") else {
        // The simulator's several clusters, for trying this out and for the
        // benchmarks: `default`, `sim2`, `sim3`…
        let count = sim.unwrap_or(1);
        return Ok((1..=count)
            .map(|n| match n {
                1 => DEFAULT.to_string(),
                n => format!("sim{n}"),
            })
            .collect());
    };
    let mut names: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim) {
        if !is_cluster_name(name) {
            return Err(invalid(
                "CLUSTERS",
                raw,
                format!("names '{name}', not a cluster name (letters and digits, from a letter)"),
            ));
        }
        if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(invalid("CLUSTERS", raw, format!("names '{name}' twice")));
        }
        names.push(name.to_string());
    }
    if names.len() > MAX_CLUSTERS {
        return Err(invalid(
            "CLUSTERS",
            raw,
            format!("names more than {MAX_CLUSTERS} clusters"),
        ));
    }
    if let Some(count) = sim
        && count as usize != names.len()
    {
        return Err(invalid(
            "SIM_CLUSTERS",
            &count.to_string(),
            format!("does not match CLUSTERS, which names {}", names.len()),
        ));
    }
    Ok(names)
}

/// `CLUSTER_<name>_` in either spelling a shell user would write.
fn prefixes(name: &str) -> [String; 2] {
    [
        format!("CLUSTER_{name}_"),
        format!("CLUSTER_{}_", name.to_ascii_uppercase()),
    ]
}

/// The configuration: the default cluster's, with the others in
/// [`Config::other_clusters`].
pub(super) fn parse(
    all: &BTreeMap<String, String>,
    vars: &Vars<'_>,
) -> Result<Config, ConfigError> {
    let names = names(vars)?;
    vars.note("CLUSTER_<name>_<VAR>");
    // A `CLUSTER_…` variable for no cluster listed is a mistake to say,
    // not to ignore: its cluster would run on the shared values.
    for key in all.keys().filter(|k| k.starts_with("CLUSTER_")) {
        let owner = names
            .iter()
            .find(|name| prefixes(name).iter().any(|p| key.starts_with(p.as_str())));
        let Some(name) = owner else {
            return Err(ConfigError::Invalid {
                var: key.clone(),
                value: all.get(key).cloned().unwrap_or_default(),
                expected: format!("names no cluster of CLUSTERS ({})", names.join(", ")),
            });
        };
        let var = prefixes(name)
            .iter()
            .find_map(|p| key.strip_prefix(p.as_str()))
            .unwrap_or_default()
            .to_string();
        let allowed = PER_CLUSTER.contains(&var.as_str())
            || PER_CLUSTER_FAMILIES.iter().any(|f| var.starts_with(f));
        if !allowed {
            return Err(ConfigError::Invalid {
                var: key.clone(),
                value: all.get(key).cloned().unwrap_or_default(),
                expected: format!(
                    "is not a per-cluster setting ({var} is one for the whole server; a cluster \
                     may set {})",
                    PER_CLUSTER.join(", ")
                ),
            });
        }
    }
    let data_dir = vars.get("DATA_DIR").unwrap_or("./data").to_string();
    let mut configs = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let mut own: BTreeMap<String, String> = all.clone();
        for prefix in prefixes(name) {
            for (key, value) in all {
                if let Some(var) = key.strip_prefix(prefix.as_str()) {
                    own.insert(var.to_string(), value.clone());
                }
            }
        }
        // Each other cluster keeps what is its own (the simulated
        // cluster, the VMs' host keys, its image cache) beside the shared
        // data; the database stays the default cluster's `DATA_DIR`'s.
        if i > 0 {
            let own_dir = std::path::Path::new(&data_dir).join("clusters").join(name);
            own.insert(
                "DATA_DIR".to_string(),
                own_dir.to_string_lossy().into_owned(),
            );
        }
        let own_vars = Vars::new(&own);
        let several = names.len() > 1 || vars.get("CLUSTERS").is_some();
        let parsed = own_vars.parse();
        vars.read.borrow_mut().extend(own_vars.read.take());
        let mut config = parsed.map_err(|e| match several {
            true => for_cluster(e, name),
            false => e,
        })?;
        config.cluster = name.clone();
        configs.push(config);
    }
    let mut configs = configs.into_iter();
    let mut first = configs.next().ok_or_else(|| ConfigError::Missing {
        var: "CLUSTERS".to_string(),
        why: "it names no cluster".to_string(),
    })?;
    first.other_clusters = configs.collect();
    Ok(first)
}

/// An error of one cluster's settings, naming the variable that cluster
/// would set (`CLUSTER_b_PVE_API_URL`) where it may set one.
fn for_cluster(error: ConfigError, name: &str) -> ConfigError {
    let own = |var: &str| {
        let per_cluster =
            PER_CLUSTER.contains(&var) || PER_CLUSTER_FAMILIES.iter().any(|f| var.starts_with(f));
        if per_cluster {
            format!("CLUSTER_{name}_{var}")
        } else {
            var.to_string()
        }
    };
    match error {
        ConfigError::Invalid {
            var,
            value,
            expected,
        } => ConfigError::Invalid {
            var: own(&var),
            value,
            expected,
        },
        ConfigError::Missing { var, why } => ConfigError::Missing {
            var: own(&var),
            why: format!("{why} (cluster {name})"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(vars.iter().copied())
    }

    #[test]
    fn without_clusters_there_is_one_named_default() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.cluster, "default");
        assert!(config.other_clusters.is_empty());
    }

    #[test]
    fn each_cluster_takes_its_own_values_over_the_shared_ones() {
        let config = parse(&[
            ("CLUSTERS", "east,west"),
            ("GATEWAY", "10.1.0.1"),
            ("CLUSTER_west_GATEWAY", "10.2.0.1"),
            ("CLUSTER_WEST_MAIN_NODE", "pve7"),
            ("CLUSTER_west_NODE_pve7", "10.2.0.17"),
            ("DATA_DIR", "/var/lib/pvedeck"),
        ])
        .unwrap();
        assert_eq!(config.cluster, "east");
        assert_eq!(config.gateway.to_string(), "10.1.0.1");
        let west = &config.other_clusters[0];
        assert_eq!(west.cluster, "west");
        assert_eq!(west.gateway.to_string(), "10.2.0.1");
        assert_eq!(west.main_node, "pve7");
        assert_eq!(
            config.data_dir,
            std::path::PathBuf::from("/var/lib/pvedeck")
        );
        assert_eq!(
            west.data_dir,
            std::path::PathBuf::from("/var/lib/pvedeck/clusters/west")
        );
    }

    #[test]
    fn an_incomplete_cluster_is_named_by_its_own_variable() {
        let e = parse(&[
            ("CLUSTERS", "a,b"),
            ("CLUSTER_b_PVE_BACKEND", "api"),
            ("CLUSTER_b_GATEWAY", "10.0.0.1"),
            ("CLUSTER_b_MAIN_NODE", "pve1"),
            ("CLUSTER_b_ASSIGN_STORAGE", "local-lvm"),
            ("HOME", "/root"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("CLUSTER_b_PVE_API_URL is not set"), "{e}");
    }

    #[test]
    fn server_wide_settings_and_unknown_clusters_are_refused() {
        let e = parse(&[("CLUSTERS", "a,b"), ("CLUSTER_b_PORT", "81")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CLUSTER_b_PORT=81 is not a per-cluster setting"),
            "{e}"
        );
        let e = parse(&[("CLUSTERS", "a,b"), ("CLUSTER_c_GATEWAY", "10.0.0.1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no cluster"), "{e}");
        for bad in ["a,a", "a,b-c", "1a", "a,,b"] {
            let e = parse(&[("CLUSTERS", bad)]).unwrap_err().to_string();
            assert!(e.starts_with("CLUSTERS="), "{bad}: {e}");
        }
        let e = parse(&[("CLUSTERS", "a,b"), ("SIM_CLUSTERS", "3")])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("SIM_CLUSTERS=3"), "{e}");
    }

    #[test]
    fn sim_clusters_names_the_simulated_ones() {
        let config = parse(&[("SIM_CLUSTERS", "3")]).unwrap();
        let names: Vec<&str> = std::iter::once(config.cluster.as_str())
            .chain(config.other_clusters.iter().map(|c| c.cluster.as_str()))
            .collect();
        assert_eq!(names, ["default", "sim2", "sim3"]);
    }
}
