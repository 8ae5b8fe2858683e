//! Cross-site requests and DNS rebinding: what a state-changing request
//! must come from, judged on its `Host`, `Origin` and `Sec-Fetch-Site`
//! against this server's names and origins (`pvedeck_config::sites`), so
//! that a page on another site cannot make the browser of someone allowed
//! by `ALLOW_IPS` change the cluster, nor rename itself into this server
//! (docs/security.md#cross-site-requests).

use std::net::IpAddr;

use pvedeck_config::sites::{Sites, origin, split_authority};

/// Why a request was refused (403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrossSite {
    #[error(
        "Host '{0}' is not a name of this server: set PUBLIC_URL or ALLOWED_HOSTS to answer to it"
    )]
    Host(String),
    #[error(
        "cross-site request refused: Origin {0} is not this server's (set ALLOWED_ORIGINS to allow it)"
    )]
    Origin(String),
    #[error("cross-site request refused: Sec-Fetch-Site is {0}")]
    FetchSite(String),
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

/// Whether `Host` names this server. An IP address cannot be rebound, so
/// any passes, as do loopback names, the machine's own name and the
/// configured ones.
fn host_allowed(sites: &Sites, host: &str) -> bool {
    let (name, _) = split_authority(host);
    name.parse::<IpAddr>().is_ok()
        || is_loopback_name(&name)
        || sites.own_name.as_deref() == Some(name.as_str())
        || sites.hosts.contains(&name)
        || sites
            .public
            .as_deref()
            .and_then(|p| p.split_once("://"))
            .is_some_and(|(_, authority)| split_authority(authority).0 == name)
}

/// The checks of a state-changing request: `Host` names this server;
/// `Origin`, when sent, is this server's own (the origin of the page that
/// sent it is the one it was sent to), `PUBLIC_URL`'s or listed; without
/// `Origin`, `Sec-Fetch-Site` (when sent) says the same. Requests with
/// neither header (curl, scripts) are no browser's and pass.
pub fn check(
    sites: &Sites,
    host: Option<&str>,
    origin_header: Option<&str>,
    fetch_site: Option<&str>,
) -> Result<(), CrossSite> {
    if let Some(host) = host
        && !host_allowed(sites, host)
    {
        return Err(CrossSite::Host(host.to_string()));
    }
    if let Some(raw) = origin_header {
        let Some(sent) = origin(raw, false) else {
            return Err(CrossSite::Origin(raw.to_string()));
        };
        let same = host.is_some_and(|h| {
            let (scheme, _) = sent.split_once("://").unwrap_or_default();
            origin(&format!("{scheme}://{h}"), false).as_deref() == Some(sent.as_str())
        });
        if same || sites.public.as_deref() == Some(sent.as_str()) || sites.origins.contains(&sent) {
            return Ok(());
        }
        return Err(CrossSite::Origin(raw.to_string()));
    }
    match fetch_site {
        None | Some("same-origin") | Some("none") => Ok(()),
        Some(other) => Err(CrossSite::FetchSite(other.to_string())),
    }
}

/// Whether a `Content-Type` is JSON (`application/json`, any parameters).
pub fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites() -> Sites {
        Sites {
            public: origin("https://deck.example.org/pvedeck/", true),
            hosts: vec!["deck.lan".to_string()],
            origins: vec!["https://portal.example.org".to_string()],
            own_name: Some("pve1".to_string()),
        }
    }

    #[test]
    fn a_page_of_this_server_passes_and_one_of_another_site_does_not() {
        let s = sites();
        let host = Some("10.0.0.5:8080");
        assert_eq!(check(&s, host, Some("http://10.0.0.5:8080"), None), Ok(()));
        assert_eq!(
            check(&s, host, Some("https://evil.example"), Some("cross-site")),
            Err(CrossSite::Origin("https://evil.example".to_string()))
        );
        assert!(check(&s, host, Some("null"), None).is_err());
        // Another port is another origin.
        assert!(check(&s, host, Some("http://10.0.0.5:9090"), None).is_err());
        assert_eq!(
            check(&s, host, Some("https://portal.example.org"), None),
            Ok(())
        );
        assert_eq!(
            check(
                &s,
                Some("deck.example.org"),
                Some("https://deck.example.org"),
                None
            ),
            Ok(())
        );
        // No Origin: the fetch metadata decides; neither: not a browser.
        assert_eq!(check(&s, host, None, Some("same-origin")), Ok(()));
        assert_eq!(
            check(&s, host, None, Some("same-site")),
            Err(CrossSite::FetchSite("same-site".to_string()))
        );
        assert_eq!(check(&s, host, None, None), Ok(()));
    }

    #[test]
    fn a_rebound_name_is_refused_and_addresses_and_known_names_pass() {
        let s = sites();
        let rebound = check(
            &s,
            Some("attacker.example:8080"),
            Some("http://attacker.example:8080"),
            None,
        );
        assert_eq!(
            rebound,
            Err(CrossSite::Host("attacker.example:8080".to_string()))
        );
        for host in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "192.168.0.10",
            "localhost:8080",
            "PVE1:8080",
            "deck.lan",
            "deck.example.org",
        ] {
            assert_eq!(check(&s, Some(host), None, None), Ok(()), "{host}");
        }
        // A name that only starts like the machine's is not it.
        assert!(check(&s, Some("pve1.attacker.example"), None, None).is_err());
        assert!(check(&Sites::default(), Some("pve1"), None, None).is_err());
    }

    #[test]
    fn json_is_json_with_or_without_parameters() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
    }
}
