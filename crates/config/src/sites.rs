//! Which names and origins are this server's (`PUBLIC_URL`, `ALLOWED_HOSTS`,
//! `ALLOWED_ORIGINS`): what a state-changing request must come from, so
//! that a page on another site cannot make the browser of someone allowed
//! by `ALLOW_IPS` change the cluster (cross-site requests), nor rename
//! itself into this server (DNS rebinding).

use std::net::IpAddr;

/// The names and origins a state-changing request may carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sites {
    /// `PUBLIC_URL`'s origin (`https://deck.example.org`).
    pub public: Option<String>,
    /// `ALLOWED_HOSTS`: more names this server answers to.
    pub hosts: Vec<String>,
    /// `ALLOWED_ORIGINS`: other sites whose pages may call `/api`.
    pub origins: Vec<String>,
    /// The machine's own host name (`pve1`): its admins reach it by that
    /// name without configuring anything.
    pub own_name: Option<String>,
}

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

/// `host[:port]` split; `[v6]:port` too. The host in lower case.
fn split_authority(authority: &str) -> (String, Option<&str>) {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host.to_ascii_lowercase(), after.strip_prefix(':'));
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has colons of its own.
        Some((host, port)) if !host.contains(':') => (host.to_ascii_lowercase(), Some(port)),
        _ => (authority.to_ascii_lowercase(), None),
    }
}

/// `scheme://host[:port]`, in lower case, the scheme's default port left out
/// as browsers leave it out of `Origin`; `None` for what is not an http(s)
/// URL. `path_ok`: whether a path may follow (`PUBLIC_URL` may have one).
pub fn origin(raw: &str, path_ok: bool) -> Option<String> {
    let (scheme, rest) = raw.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || (!path_ok && path.len() > 1) {
        return None;
    }
    let (host, port) = split_authority(authority);
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c))
    {
        return None;
    }
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    match port {
        None => Some(format!("{scheme}://{host}")),
        Some(p) if p == default => Some(format!("{scheme}://{host}")),
        Some(p) if p.parse::<u16>().is_ok_and(|n| n > 0) => Some(format!("{scheme}://{host}:{p}")),
        Some(_) => None,
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

impl Sites {
    /// Whether `Host` names this server. An IP address cannot be rebound,
    /// so any passes, as do loopback names, the machine's own name and the
    /// configured ones.
    fn host_allowed(&self, host: &str) -> bool {
        let (name, _) = split_authority(host);
        name.parse::<IpAddr>().is_ok()
            || is_loopback_name(&name)
            || self.own_name.as_deref() == Some(name.as_str())
            || self.hosts.contains(&name)
            || self
                .public
                .as_deref()
                .and_then(|p| p.split_once("://"))
                .is_some_and(|(_, authority)| split_authority(authority).0 == name)
    }

    /// The checks of a state-changing request: `Host` names this server;
    /// `Origin`, when sent, is this server's own (the origin of the page
    /// that sent it is the one it was sent to), `PUBLIC_URL`'s or listed;
    /// without `Origin`, `Sec-Fetch-Site` (when sent) says the same.
    /// Requests with neither header (curl, scripts) are no browser's and pass.
    pub fn check(
        &self,
        host: Option<&str>,
        origin_header: Option<&str>,
        fetch_site: Option<&str>,
    ) -> Result<(), CrossSite> {
        if let Some(host) = host
            && !self.host_allowed(host)
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
            if same || self.public.as_deref() == Some(sent.as_str()) || self.origins.contains(&sent)
            {
                return Ok(());
            }
            return Err(CrossSite::Origin(raw.to_string()));
        }
        match fetch_site {
            None | Some("same-origin") | Some("none") => Ok(()),
            Some(other) => Err(CrossSite::FetchSite(other.to_string())),
        }
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
    fn origins_are_normalised_as_browsers_send_them() {
        assert_eq!(
            origin("HTTPS://Deck.Example.org:443/x", true).as_deref(),
            Some("https://deck.example.org")
        );
        assert_eq!(
            origin("http://10.0.0.5:8080", false).as_deref(),
            Some("http://10.0.0.5:8080")
        );
        assert_eq!(
            origin("http://[::1]:8080", false).as_deref(),
            Some("http://[::1]:8080")
        );
        for bad in [
            "null",
            "ftp://x",
            "http://",
            "http://a@b",
            "http://x:0",
            "http://x/path",
        ] {
            assert_eq!(origin(bad, false), None, "{bad}");
        }
    }

    #[test]
    fn a_page_of_this_server_passes_and_one_of_another_site_does_not() {
        let s = sites();
        let host = Some("10.0.0.5:8080");
        assert_eq!(s.check(host, Some("http://10.0.0.5:8080"), None), Ok(()));
        assert_eq!(
            s.check(host, Some("https://evil.example"), Some("cross-site")),
            Err(CrossSite::Origin("https://evil.example".to_string()))
        );
        assert!(s.check(host, Some("null"), None).is_err());
        // Another port is another origin.
        assert!(s.check(host, Some("http://10.0.0.5:9090"), None).is_err());
        assert_eq!(
            s.check(host, Some("https://portal.example.org"), None),
            Ok(())
        );
        assert_eq!(
            s.check(
                Some("deck.example.org"),
                Some("https://deck.example.org"),
                None
            ),
            Ok(())
        );
        // No Origin: the fetch metadata decides; neither: not a browser.
        assert_eq!(s.check(host, None, Some("same-origin")), Ok(()));
        assert_eq!(
            s.check(host, None, Some("same-site")),
            Err(CrossSite::FetchSite("same-site".to_string()))
        );
        assert_eq!(s.check(host, None, None), Ok(()));
    }

    #[test]
    fn a_rebound_name_is_refused_and_addresses_and_known_names_pass() {
        let s = sites();
        let rebound = s.check(
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
            assert_eq!(s.check(Some(host), None, None), Ok(()), "{host}");
        }
        // A name that only starts like the machine's is not it.
        assert!(s.check(Some("pve1.attacker.example"), None, None).is_err());
        assert!(Sites::default().check(Some("pve1"), None, None).is_err());
    }

    #[test]
    fn json_is_json_with_or_without_parameters() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
    }
}
