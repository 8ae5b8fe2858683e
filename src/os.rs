//! The operating systems pvedeck installs (SPEC §3.2): versions, cloud image
//! locations, default users.

/// One installable release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub os: &'static str,
    pub version: &'static str,
    /// Debian's codename (part of the image path); the version elsewhere.
    pub codename: &'static str,
    /// The cloud image's default user.
    pub default_user: &'static str,
    /// Roughly the image's virtual disk size, for the simulated cluster.
    pub virtual_gib: u64,
}

pub const RELEASES: [Release; 9] = [
    deb("11", "bullseye"),
    deb("12", "bookworm"),
    deb("13", "trixie"),
    ubu("20.04"),
    ubu("22.04"),
    ubu("24.04"),
    rocky("8"),
    rocky("9"),
    rocky("10"),
];

const fn deb(version: &'static str, codename: &'static str) -> Release {
    Release {
        os: "debian",
        version,
        codename,
        default_user: "debian",
        virtual_gib: 2,
    }
}

const fn ubu(version: &'static str) -> Release {
    Release {
        os: "ubuntu",
        version,
        codename: version,
        default_user: "ubuntu",
        virtual_gib: 3,
    }
}

const fn rocky(version: &'static str) -> Release {
    Release {
        os: "rockylinux",
        version,
        codename: version,
        default_user: "rocky",
        virtual_gib: 10,
    }
}

pub fn find(os: &str, version: &str) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.os == os && r.version == version)
}

pub fn versions(os: &str) -> Vec<&'static str> {
    RELEASES
        .iter()
        .filter(|r| r.os == os)
        .map(|r| r.version)
        .collect()
}

/// The user pvedeck logs in as on a VM tagged with this OS.
pub fn default_user(os: &str) -> Option<&'static str> {
    RELEASES.iter().find(|r| r.os == os).map(|r| r.default_user)
}

impl Release {
    /// The image's file name, also its name in the cache.
    pub fn file_name(&self) -> String {
        let v = self.version;
        match self.os {
            "debian" => format!("debian-{v}-generic-amd64.qcow2"),
            "ubuntu" => format!("ubuntu-{v}-server-cloudimg-amd64.img"),
            _ => format!("Rocky-{v}-GenericCloud-Base.latest.x86_64.qcow2"),
        }
    }

    /// The official directory the image lives in.
    fn official_base(&self) -> String {
        match self.os {
            "debian" => format!(
                "https://cloud.debian.org/images/cloud/{}/latest",
                self.codename
            ),
            "ubuntu" => format!(
                "https://cloud-images.ubuntu.com/releases/{}/release",
                self.version
            ),
            _ => format!(
                "https://dl.rockylinux.org/pub/rocky/{}/images/x86_64",
                self.version
            ),
        }
    }

    /// The image URL; `base` (`IMAGE_BASE_<OS>`) replaces the directory.
    pub fn image_url(&self, base: Option<&str>) -> String {
        let dir = base.map_or_else(|| self.official_base(), str::to_string);
        format!("{dir}/{}", self.file_name())
    }

    /// `debian_12.sh`: the init script's name under `/sh/`.
    pub fn script_name(&self) -> String {
        format!("{}_{}.sh", self.os, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_spec_3_2() {
        let d = find("debian", "12").unwrap();
        assert_eq!(
            d.image_url(None),
            "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-generic-amd64.qcow2"
        );
        assert_eq!(
            find("ubuntu", "24.04").unwrap().image_url(None),
            "https://cloud-images.ubuntu.com/releases/24.04/release/ubuntu-24.04-server-cloudimg-amd64.img"
        );
        assert_eq!(
            find("rockylinux", "9").unwrap().image_url(None),
            "https://dl.rockylinux.org/pub/rocky/9/images/x86_64/Rocky-9-GenericCloud-Base.latest.x86_64.qcow2"
        );
        assert_eq!(
            d.image_url(Some("http://127.0.0.1:9000/mirror")),
            "http://127.0.0.1:9000/mirror/debian-12-generic-amd64.qcow2"
        );
    }

    #[test]
    fn nine_releases_and_their_users() {
        assert_eq!(versions("debian"), ["11", "12", "13"]);
        assert_eq!(versions("ubuntu"), ["20.04", "22.04", "24.04"]);
        assert_eq!(versions("rockylinux"), ["8", "9", "10"]);
        assert_eq!(default_user("rockylinux"), Some("rocky"));
        assert!(find("debian", "10").is_none());
    }
}
