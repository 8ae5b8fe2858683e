//! The simulated cluster's internet: the official image mirrors answer from
//! here, at about 25 MB/s of simulated time, with a file that has a real
//! qcow2 header (so the simulated `qm importdisk` reads its virtual size).
//! Each mirror publishes its checksum list of those files, in its own format.
//! A mirror of `IMAGE_BASE_<OS>` is a real one: those URLs go to the web.

use std::path::Path;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use pvedeck_domain::os::{Os, RELEASES, Release};
use pvedeck_mirror::checksums::published;
use pvedeck_mirror::{Http, ImageError, Mirror, Progress};
use pvedeck_support::clock::Clock;

pub struct SimInternet {
    clock: Clock,
    web: Http,
    /// `IMAGE_BASE_<OS>` directories: real mirrors.
    real: Vec<String>,
}

/// Roughly each image's virtual disk size, GiB.
fn virtual_gib(url: &str) -> u64 {
    let os = RELEASES
        .iter()
        .find(|r| url.ends_with(&r.file_name()))
        .map(|r| r.os);
    match os {
        Some(Os::Ubuntu) => 3,
        Some(Os::Rockylinux) => 10,
        Some(Os::Debian) | None => 2,
    }
}

/// The file served for an image: a qcow2 header of its virtual size.
fn image(url: &str) -> Vec<u8> {
    let gib = virtual_gib(url);
    let mut header = vec![0u8; 512];
    header[..4].copy_from_slice(b"QFI\xfb");
    header[4..8].copy_from_slice(&3u32.to_be_bytes());
    header[24..32].copy_from_slice(&(gib << 30).to_be_bytes());
    header
}

/// The checksum list at `url`, in the format of the mirror that publishes
/// it there (lines for every release the directory holds), or `None`.
fn list(url: &str) -> Option<String> {
    let (dir, name) = url.rsplit_once('/')?;
    checksums(name, |release| {
        release.image_url(None) == format!("{dir}/{}", release.file_name())
    })
}

/// The checksum list called `name` of the releases `holds` accepts, in the
/// format of the mirror that publishes a list by that name, or `None`.
fn checksums(name: &str, holds: impl Fn(&Release) -> bool) -> Option<String> {
    let mut text = String::new();
    for release in RELEASES.iter().filter(|r| holds(r)) {
        let published = published(release.os);
        if published.list != name {
            continue;
        }
        let file = release.file_name();
        let bytes = image(&release.image_url(None));
        let hex = published.algo.hex(&bytes);
        text.push_str(&match release.os {
            Os::Debian => format!("{hex}  {file}\n"),
            Os::Ubuntu => format!("{hex} *{file}\n"),
            Os::Rockylinux => format!("# {file}: {} bytes\nSHA256 ({file}) = {hex}\n", bytes.len()),
        });
    }
    (!text.is_empty()).then_some(text)
}

/// What a local mirror of every release in one directory (`pvedeck sim
/// mirror`, for `IMAGE_BASE_<OS>`) serves as `name`: a release's image,
/// the same bytes the simulated official mirror serves, or the checksum list
/// of the mirror that publishes one by that name (`SHA512SUMS`,
/// `SHA256SUMS`, `CHECKSUM`), giving its OS's images.
pub fn local_mirror_file(name: &str) -> Option<Vec<u8>> {
    match RELEASES.iter().find(|r| r.file_name() == name) {
        Some(release) => Some(image(&release.image_url(None))),
        None => checksums(name, |_| true).map(String::into_bytes),
    }
}

impl SimInternet {
    pub fn new(clock: Clock, web: Http, real: impl IntoIterator<Item = String>) -> SimInternet {
        SimInternet {
            clock,
            web,
            real: real.into_iter().collect(),
        }
    }

    fn is_real(&self, url: &str) -> bool {
        self.real.iter().any(|base| url.starts_with(base.as_str()))
    }
}

#[async_trait]
impl Mirror for SimInternet {
    async fn check(&self, url: &str) -> Result<(), ImageError> {
        if self.is_real(url) {
            return self.web.check(url).await;
        }
        self.clock.sleep(300).await;
        Ok(())
    }

    async fn fetch(
        &self,
        url: &str,
        file: &mut tokio::fs::File,
        path: &Path,
        progress: Progress<'_>,
    ) -> Result<(), ImageError> {
        if self.is_real(url) {
            return self.web.fetch(url, file, path, progress).await;
        }
        let total = virtual_gib(url) * (200 << 20);
        let chunks = 50u64;
        for i in 1..=chunks {
            self.clock.sleep(total / (25 << 20) * 1000 / chunks).await;
            progress(total * i / chunks, Some(total));
        }
        let write_error = |source| ImageError::Write {
            path: path.to_path_buf(),
            source,
        };
        file.write_all(&image(url)).await.map_err(write_error)?;
        file.flush().await.map_err(write_error)
    }

    async fn list(&self, url: &str) -> Result<Option<String>, ImageError> {
        if self.is_real(url) {
            return self.web.list(url).await;
        }
        self.clock.sleep(300).await;
        Ok(list(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_have_their_os_s_size_and_overrides_are_real() {
        let release = pvedeck_domain::os::find(Os::Rockylinux, "9").unwrap();
        assert_eq!(virtual_gib(&release.image_url(None)), 10);
        let web = Http::new().unwrap();
        let net = SimInternet::new(Clock::new(1000.0), web, ["http://127.0.0.1:9/img".into()]);
        assert!(net.is_real("http://127.0.0.1:9/img/debian-12-generic-amd64.qcow2"));
        assert!(!net.is_real(&release.image_url(None)));
    }

    #[test]
    fn each_mirror_publishes_the_checksums_of_what_it_serves() {
        use pvedeck_mirror::checksums::find;
        for release in RELEASES {
            let url = release.image_url(None);
            let published = published(release.os);
            let (dir, _) = url.rsplit_once('/').unwrap();
            let text = list(&format!("{dir}/{}", published.list)).unwrap();
            let sum = find(&text, published.algo, &release.file_name()).unwrap();
            assert_eq!(sum, Some(published.algo.hex(&image(&url))), "{url}");
        }
        let debian = pvedeck_domain::os::find(Os::Debian, "12")
            .unwrap()
            .image_url(None);
        let (dir, _) = debian.rsplit_once('/').unwrap();
        assert_eq!(list(&format!("{dir}/SHA256SUMS")), None);
        assert_eq!(list(&format!("{dir}/nothing")), None);
    }

    #[test]
    fn a_local_mirror_serves_every_image_and_the_lists_that_give_them() {
        use pvedeck_mirror::checksums::find;
        for release in RELEASES {
            let file = release.file_name();
            let bytes = local_mirror_file(&file).unwrap();
            assert_eq!(bytes, image(&release.image_url(None)), "{file}");
            let published = published(release.os);
            let list = String::from_utf8(local_mirror_file(published.list).unwrap()).unwrap();
            let sum = find(&list, published.algo, &file).unwrap();
            assert_eq!(sum, Some(published.algo.hex(&bytes)), "{file}");
        }
        assert_eq!(local_mirror_file("nothing"), None);
    }
}
