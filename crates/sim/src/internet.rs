//! The simulated cluster's internet: the official image mirrors answer from
//! here, at about 25 MB/s of simulated time, with a file that has a real
//! qcow2 header (so the simulated `qm importdisk` reads its virtual size).
//! Each mirror publishes its checksum list of those files, in its own format.
//! A mirror of `IMAGE_BASE_<OS>` is a real one: those URLs go to the web.
//!
//! `pvedeck-sim mirror` signs its lists with [`mirror_key`], made from a
//! fixed seed: a test configures its public half ([`mirror_keyring`]) as
//! `IMAGE_KEYRING_<OS>`, and [`intruder_key`] makes the wrong signature.

use std::path::Path;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use pvedeck_domain::os::{Os, RELEASES, Release};
use pvedeck_mirror::checksums::published;
use pvedeck_mirror::{Http, ImageError, Mirror, Progress};
use pvedeck_support::clock::Clock;

/// Why the simulated mirror's key or a signature could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the simulated mirror's signing key: {0}")]
pub struct SigningError(String);

/// A key made from `seed`, the same in every process: fixed creation time,
/// seeded generator (the fingerprint depends on nothing else).
fn seeded_key(seed: u64, user: &str) -> Result<pgp::composed::SignedSecretKey, SigningError> {
    use pgp::composed::{EncryptionCaps, KeyType, SecretKeyParamsBuilder};
    use rand_chacha::rand_core::SeedableRng;
    let mut params = SecretKeyParamsBuilder::default();
    params
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .can_encrypt(EncryptionCaps::None)
        // 2026-01-01: any fixed time.
        .created_at(pgp::types::Timestamp::from_secs(1_767_225_600))
        .primary_user_id(user.to_string());
    let params = params.build().map_err(|e| SigningError(e.to_string()))?;
    params
        .generate(rand_chacha::ChaCha8Rng::seed_from_u64(seed))
        .map_err(|e| SigningError(e.to_string()))
}

fn cached(
    cell: &'static std::sync::OnceLock<Result<pgp::composed::SignedSecretKey, SigningError>>,
    seed: u64,
    user: &str,
) -> Result<&'static pgp::composed::SignedSecretKey, SigningError> {
    cell.get_or_init(|| seeded_key(seed, user))
        .as_ref()
        .map_err(Clone::clone)
}

/// The key `pvedeck-sim mirror` signs its checksum lists with.
pub fn mirror_key() -> Result<&'static pgp::composed::SignedSecretKey, SigningError> {
    static KEY: std::sync::OnceLock<Result<pgp::composed::SignedSecretKey, SigningError>> =
        std::sync::OnceLock::new();
    cached(&KEY, 0x5eed, "pvedeck-sim mirror <mirror@pvedeck.invalid>")
}

/// Another key: what a mirror that forges its lists signs with.
pub fn intruder_key() -> Result<&'static pgp::composed::SignedSecretKey, SigningError> {
    static KEY: std::sync::OnceLock<Result<pgp::composed::SignedSecretKey, SigningError>> =
        std::sync::OnceLock::new();
    cached(&KEY, 0xbad, "intruder <intruder@pvedeck.invalid>")
}

/// The mirror key's public half, ASCII-armored: the file a test gives as
/// `IMAGE_KEYRING_<OS>`.
pub fn mirror_public_key() -> Result<Vec<u8>, SigningError> {
    mirror_key()?
        .to_public_key()
        .to_armored_bytes(pgp::composed::ArmorOptions::default())
        .map_err(|e| SigningError(e.to_string()))
}

/// A detached binary signature of `data` by `key`, as Ubuntu's
/// `SHA256SUMS.gpg` is.
pub fn sign(key: &pgp::composed::SignedSecretKey, data: &[u8]) -> Result<Vec<u8>, SigningError> {
    use pgp::ser::Serialize;
    use rand_chacha::rand_core::SeedableRng;
    pgp::composed::DetachedSignature::sign_binary_data(
        rand_chacha::ChaCha8Rng::seed_from_u64(1),
        &key.primary_key,
        &pgp::types::Password::empty(),
        pgp::crypto::hash::HashAlgorithm::Sha256,
        data,
    )
    .and_then(|signature| signature.to_bytes())
    .map_err(|e| SigningError(e.to_string()))
}

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
    pvedeck_mirror::qcow2::header(virtual_gib(url) << 30, false, false)
}

/// The checksum list at `url`, in the format of the mirror that publishes
/// it there (lines for every release the directory holds), or `None`.
fn list(url: &str) -> Option<String> {
    let (dir, name) = url.rsplit_once('/')?;
    checksums(
        name,
        |release| release.image_url(None) == format!("{dir}/{}", release.file_name()),
        |release| image(&release.image_url(None)),
    )
}

/// The checksum list called `name` of the releases `holds` accepts, in the
/// format of the mirror that publishes a list by that name, or `None`.
fn checksums(
    name: &str,
    holds: impl Fn(&Release) -> bool,
    image_of: impl Fn(&Release) -> Vec<u8>,
) -> Option<String> {
    let mut text = String::new();
    for release in RELEASES.iter().filter(|r| holds(r)) {
        let published = published(release.os);
        if published.list != name {
            continue;
        }
        let file = release.file_name();
        let bytes = image_of(release);
        let hex = published.algo.hex(&bytes);
        text.push_str(&match release.os {
            Os::Debian => format!("{hex}  {file}\n"),
            Os::Ubuntu => format!("{hex} *{file}\n"),
            Os::Rockylinux => format!("# {file}: {} bytes\nSHA256 ({file}) = {hex}\n", bytes.len()),
        });
    }
    (!text.is_empty()).then_some(text)
}

/// What `pvedeck-sim mirror` stages, one directory each beside `/img/`
/// (docs/security.md#images): the attacks images must withstand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorFault {
    /// `/img/`: images, checksum lists and their signatures, all good.
    None,
    /// `/no-list/`: no checksum list (404).
    NoList,
    /// `/no-signature/`: lists without a signature beside them.
    NoSignature,
    /// `/bad-signature/`: lists signed by another key ([`intruder_key`]).
    BadSignature,
    /// `/backing-file/`: images naming a backing file, listed and signed.
    BackingFile,
    /// `/data-file/`: images naming an external data file, listed and signed.
    DataFile,
    /// `/trickle/`: images whose body comes a few bytes at a time, never
    /// stalling long enough for a stall timeout.
    Trickle,
}

impl MirrorFault {
    pub const ALL: [MirrorFault; 7] = [
        MirrorFault::None,
        MirrorFault::NoList,
        MirrorFault::NoSignature,
        MirrorFault::BadSignature,
        MirrorFault::BackingFile,
        MirrorFault::DataFile,
        MirrorFault::Trickle,
    ];

    /// The directory that stages it.
    pub fn dir(self) -> &'static str {
        match self {
            MirrorFault::None => "img",
            MirrorFault::NoList => "no-list",
            MirrorFault::NoSignature => "no-signature",
            MirrorFault::BadSignature => "bad-signature",
            MirrorFault::BackingFile => "backing-file",
            MirrorFault::DataFile => "data-file",
            MirrorFault::Trickle => "trickle",
        }
    }

    pub fn parse(dir: &str) -> Option<MirrorFault> {
        MirrorFault::ALL.into_iter().find(|f| f.dir() == dir)
    }

    /// The bytes of `release`'s image under this fault.
    fn image(self, release: &Release) -> Vec<u8> {
        let size = virtual_gib(&release.image_url(None)) << 30;
        let header = |backing, data| pvedeck_mirror::qcow2::header(size, backing, data);
        match self {
            MirrorFault::BackingFile => header(true, false),
            MirrorFault::DataFile => header(false, true),
            // Long enough that trickling it takes minutes.
            MirrorFault::Trickle => {
                let mut body = header(false, false);
                body.resize(64 << 10, 0);
                body
            }
            _ => image(&release.image_url(None)),
        }
    }
}

/// What a local mirror of every release in one directory (`pvedeck sim
/// mirror`, for `IMAGE_BASE_<OS>`) serves as `name`: a release's image,
/// the same bytes the simulated official mirror serves, or the checksum list
/// of the mirror that publishes one by that name (`SHA512SUMS`,
/// `SHA256SUMS`, `CHECKSUM`), giving its OS's images.
pub fn local_mirror_file(name: &str) -> Option<Vec<u8>> {
    local_mirror_served(MirrorFault::None, name)
}

/// What the local mirror serves as `name` under `fault`: an image, a
/// checksum list, or a list's detached signature (`SHA256SUMS.gpg` and
/// the other names of `published`), signed with [`mirror_key`].
pub fn local_mirror_served(fault: MirrorFault, name: &str) -> Option<Vec<u8>> {
    if let Some(release) = RELEASES.iter().find(|r| r.file_name() == name) {
        return Some(fault.image(release));
    }
    let list = |name: &str| checksums(name, |_| true, |r| fault.image(r));
    if let Some(text) = list(name) {
        return (fault != MirrorFault::NoList).then(|| text.into_bytes());
    }
    let of = Os::ALL
        .into_iter()
        .map(published)
        .find(|p| p.signatures.contains(&name))?;
    let key = match fault {
        MirrorFault::NoList | MirrorFault::NoSignature => return None,
        MirrorFault::BadSignature => intruder_key(),
        _ => mirror_key(),
    };
    let text = list(of.list)?;
    match key.and_then(|key| sign(key, text.as_bytes())) {
        Ok(signature) => Some(signature),
        Err(e) => {
            tracing::warn!("{e}");
            None
        }
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

    /// The simulated official mirrors sign nothing: a keyring set for the
    /// demo finds no signature, as for Debian's cloud images.
    async fn signature(&self, url: &str) -> Result<Option<Vec<u8>>, ImageError> {
        if self.is_real(url) {
            return self.web.signature(url).await;
        }
        self.clock.sleep(300).await;
        Ok(None)
    }

    async fn header(&self, url: &str) -> Result<Vec<u8>, ImageError> {
        if self.is_real(url) {
            return self.web.header(url).await;
        }
        self.clock.sleep(300).await;
        Ok(image(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_signs_with_the_key_tests_configure() {
        use pvedeck_mirror::signature::Keyring;
        let ring = Keyring::from_bytes(Path::new("sim"), &mirror_public_key().unwrap()).unwrap();
        let list = b"abc  x.qcow2\n";
        let good = sign(mirror_key().unwrap(), list).unwrap();
        assert!(ring.verify_detached(list, &good).is_ok());
        let forged = sign(intruder_key().unwrap(), list).unwrap();
        assert!(ring.verify_detached(list, &forged).is_err());
    }

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

    #[test]
    fn each_fault_stages_its_attack() {
        use pvedeck_mirror::checksums::{Algo, find};
        use pvedeck_mirror::qcow2::{Refusal, check};
        use pvedeck_mirror::signature::Keyring;
        let ring = Keyring::from_bytes(Path::new("sim"), &mirror_public_key().unwrap()).unwrap();
        let file = "debian-12-generic-amd64.qcow2";
        let served = |fault, name| local_mirror_served(fault, name);
        let signed = |fault| {
            let list = served(fault, "SHA512SUMS").unwrap();
            let sig = served(fault, "SHA512SUMS.sign").unwrap();
            ring.verify_detached(&list, &sig)
        };
        assert!(signed(MirrorFault::None).is_ok());
        assert!(signed(MirrorFault::BackingFile).is_ok());
        assert!(signed(MirrorFault::BadSignature).is_err());
        assert_eq!(served(MirrorFault::NoList, "SHA512SUMS"), None);
        assert_eq!(served(MirrorFault::NoSignature, "SHA512SUMS.sign"), None);
        assert!(served(MirrorFault::NoSignature, "SHA512SUMS").is_some());
        for (fault, refusal) in [
            (MirrorFault::BackingFile, Refusal::BackingFile),
            (MirrorFault::DataFile, Refusal::DataFile),
        ] {
            let image = served(fault, file).unwrap();
            assert_eq!(check(&image), Err(refusal));
            // The list vouches for it: only the header check stops it.
            let list = String::from_utf8(served(fault, "SHA512SUMS").unwrap()).unwrap();
            let sum = find(&list, Algo::Sha512, file).unwrap();
            assert_eq!(sum, Some(Algo::Sha512.hex(&image)));
        }
        assert_eq!(
            served(MirrorFault::Trickle, file).map(|b| b.len()),
            Some(64 << 10)
        );
        for fault in MirrorFault::ALL {
            assert_eq!(MirrorFault::parse(fault.dir()), Some(fault));
        }
    }
}
