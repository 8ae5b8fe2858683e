//! Which names and origins are this server's (`PUBLIC_URL`, `ALLOWED_HOSTS`,
//! `ALLOWED_ORIGINS`), read and normalised as browsers send them. What a
//! state-changing request must then come from is the server's rule (its
//! `api::cross_site`).

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

/// `host[:port]` split; `[v6]:port` too. The host in lower case.
pub fn split_authority(authority: &str) -> (String, Option<&str>) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
