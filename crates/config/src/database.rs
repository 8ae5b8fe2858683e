//! `DATABASE_URL`: where a shared PostgreSQL store is. The URL carries a
//! password, so it is never shown whole: not in an error, not in the log,
//! not in `Debug`.

use std::fmt;

/// A `postgres://` or `postgresql://` URL, checked for its form; whether
/// the server answers is the store's to find out at start-up.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, &'static str> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or("is not a postgres:// URL")?;
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if host.is_empty() && !rest.contains("host=") {
            return Err("names no host (postgres://user:password@host:port/database)");
        }
        if url.chars().any(char::is_whitespace) {
            return Err("has a space in it");
        }
        Ok(DatabaseUrl(url.to_string()))
    }

    /// The whole URL, password included: for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password masked, to show.
    pub fn masked(&self) -> String {
        mask_password(&self.0)
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.masked())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

/// `url` with the password of its user part and of a `password=` query
/// parameter replaced by `***`.
pub fn mask_password(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_in_the_user_part_and_the_query() {
        assert_eq!(
            mask_password("postgres://pvedeck:s3cr:et@db.example:5432/pvedeck"),
            "postgres://pvedeck:***@db.example:5432/pvedeck"
        );
        assert_eq!(
            mask_password("postgresql://db/pvedeck?user=a&password=hunter2&sslmode=disable"),
            "postgresql://db/pvedeck?user=a&password=***&sslmode=disable"
        );
        assert_eq!(
            mask_password("postgres://pvedeck@127.0.0.1/x"),
            "postgres://pvedeck@127.0.0.1/x"
        );
        let url = DatabaseUrl::parse("postgres://u:pw@h/d").unwrap();
        assert!(!format!("{url:?} {url}").contains("pw"));
        assert_eq!(url.expose(), "postgres://u:pw@h/d");
    }

    #[test]
    fn only_postgres_urls_with_a_host_are_taken() {
        assert!(DatabaseUrl::parse("mysql://u:p@h/d").is_err());
        assert!(DatabaseUrl::parse("postgres:///d").is_err());
        assert!(DatabaseUrl::parse("postgres://u:p@/d").is_err());
        assert!(DatabaseUrl::parse("postgres:///d?host=/run/postgresql").is_ok());
        assert!(DatabaseUrl::parse("postgresql://h:5433/d").is_ok());
    }
}
