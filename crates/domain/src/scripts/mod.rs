//! The OS init scripts served at `/sh/<os>_<version>.sh` and run inside each
//! new VM during SSH initialization. One template per OS family, rendered for
//! the version asked for: a fix reaches every version at once.

use crate::os::{Os, Release};

/// Debian and Ubuntu (apt).
const APT: &str = include_str!("apt.sh");
/// Rocky Linux (dnf).
const DNF: &str = include_str!("rockylinux.sh");
/// Does nothing to the machine; prints like the real ones. Selected with
/// `INIT_SCRIPTS=test` for tests that run it over real SSH.
const HARMLESS: &str = include_str!("harmless.sh");

/// Which set of scripts `/sh/` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptSet {
    Real,
    Harmless,
}

fn render(template: &str, release: &Release) -> String {
    template
        .replace("@OS@", release.os.name())
        .replace("@VERSION@", release.version)
        .replace("@CODENAME@", release.codename)
}

/// The script for `debian_12.sh` and friends; `None` for any other name.
pub fn script(name: &str, set: ScriptSet) -> Option<String> {
    let release = Release::from_script_name(name)?;
    let template = match (set, release.os) {
        (ScriptSet::Harmless, _) => HARMLESS,
        (_, Os::Rockylinux) => DNF,
        (_, Os::Debian | Os::Ubuntu) => APT,
    };
    Some(render(template, &release))
}

/// The copy of a script pvedeck sends over the SSH session: the root
/// password's hash (`$6$…`, which needs no quoting inside single quotes)
/// set right after the shebang.
pub fn with_root_hash(body: &str, hash: Option<&str>) -> String {
    let Some(hash) = hash.filter(|h| !h.contains('\'')) else {
        return body.to_string();
    };
    match body.split_once('\n') {
        Some((shebang, rest)) => format!("{shebang}\nPVEDECK_ROOT_HASH='{hash}'\n{rest}"),
        None => format!("PVEDECK_ROOT_HASH='{hash}'\n{body}"),
    }
}

/// The root password hash a script copy carries (what [`with_root_hash`]
/// set), as the guest's shell would read it.
pub fn root_hash(script: &str) -> Option<String> {
    script
        .lines()
        .find_map(|l| l.strip_prefix("PVEDECK_ROOT_HASH='"))
        .and_then(|l| l.strip_suffix('\''))
        .map(str::to_string)
}

/// The progress lines a script prints: its `echo "…"` lines, in order, as
/// bash prints them (`\"` and `\\` unescaped).
pub fn echo_lines(script: &str) -> Vec<String> {
    script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("echo \""))
        .filter_map(|l| l.rsplit_once('"').map(|(text, _)| text))
        .map(|text| text.replace("\\\"", "\"").replace("\\\\", "\\"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::RELEASES;

    #[test]
    fn every_release_has_a_script_naming_its_version() {
        for release in RELEASES {
            let name = release.script_name();
            let body = script(&name, ScriptSet::Real).unwrap();
            assert!(body.starts_with("#!/usr/bin/env bash"), "{name}");
            assert!(body.contains("set -euo pipefail"), "{name}");
            assert!(body.contains(release.version), "{name}");
            assert!(!body.contains('@'), "{name}: unrendered placeholder");
            assert!(body.contains("qemu-guest-agent"), "{name}");
        }
        assert!(script("debian_10.sh", ScriptSet::Real).is_none());
        assert!(script("../etc/passwd", ScriptSet::Real).is_none());
    }

    #[test]
    fn only_a_hash_of_the_password_reaches_the_script() {
        for release in RELEASES {
            let body = script(&release.script_name(), ScriptSet::Real).unwrap();
            assert!(!body.contains("$1"), "{}", release.script_name());
            assert!(body.contains("chpasswd -e"), "{}", release.script_name());
            let sent = with_root_hash(&body, Some("$6$salt$hash"));
            let lines: Vec<&str> = sent.lines().take(2).collect();
            assert_eq!(
                lines,
                ["#!/usr/bin/env bash", "PVEDECK_ROOT_HASH='$6$salt$hash'"]
            );
        }
        assert_eq!(with_root_hash("#!x\ny", Some("a'b")), "#!x\ny");
        assert_eq!(
            root_hash(&with_root_hash("#!x\ny", Some("$6$s$h"))).as_deref(),
            Some("$6$s$h")
        );
        assert_eq!(root_hash("#!x\ny"), None);
    }

    #[test]
    fn echo_lines_unescape_like_bash() {
        let lines = echo_lines(&script("debian_12.sh", ScriptSet::Harmless).unwrap());
        assert!(
            lines.contains(
                &r#"[pvedeck] quoting survives: "double" 'single' back\slash and ünïcödé"#
                    .to_string()
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn echo_lines_are_the_progress() {
        let lines = echo_lines(&script("ubuntu_24.04.sh", ScriptSet::Real).unwrap());
        assert!(lines.len() >= 6, "{lines:?}");
        assert!(lines.iter().all(|l| l.starts_with("[pvedeck]")));
        assert_eq!(
            lines.last().map(String::as_str),
            Some("[pvedeck] initialization complete")
        );
    }
}
