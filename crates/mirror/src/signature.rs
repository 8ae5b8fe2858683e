//! OpenPGP signatures of the checksum lists (docs/security.md#images). A list
//! comes from the same host as the image, so on its own it only tells a
//! corrupt download from a good one; its signature, checked against keys
//! the admin put on the pvedeck host (`IMAGE_KEYRING_<OS>`), is what tells
//! the distribution's image from one a mirror or a man in the middle made.
//!
//! Two forms are read: a detached signature beside the list (Ubuntu's
//! `SHA256SUMS.gpg`, binary or ASCII-armored), and a list that is itself a
//! cleartext-signed message (`-----BEGIN PGP SIGNED MESSAGE-----`). A
//! signature is good when one of its signature packets verifies with a key
//! (or subkey) of the keyring; several packets are usual (Ubuntu signs with
//! an old and a new key at once).

use std::path::{Path, PathBuf};

use pgp::composed::{CleartextSignedMessage, Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::Signature;
use pgp::types::KeyDetails;

/// The keys an admin trusts for one OS's checksum lists.
#[derive(Debug, Clone)]
pub struct Keyring {
    path: PathBuf,
    keys: Vec<SignedPublicKey>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("cannot read the keyring {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the keyring {} holds no OpenPGP public key: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
}

/// Why a checksum list's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("it is no OpenPGP signature ({0})")]
    Unreadable(String),
    #[error("it was made by {issuer}, which is not in the keyring {keyring}")]
    UnknownKey { issuer: String, keyring: String },
    #[error("BAD signature: it was made by {key} over another text")]
    Bad { key: String },
}

/// A key's name in messages: its fingerprint in upper-case hex, as `gpg`
/// shows it.
fn fingerprint(key: &impl KeyDetails) -> String {
    format!("{:X}", key.fingerprint())
}

impl Keyring {
    /// Reads ASCII-armored or binary public keys (one or several, as
    /// `gpg --export` and the distributions' keyring packages write them).
    pub fn load(path: &Path) -> Result<Keyring, KeyringError> {
        let bytes = std::fs::read(path).map_err(|source| KeyringError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Keyring::from_bytes(path, &bytes)
    }

    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Keyring, KeyringError> {
        let parse = |detail: String| KeyringError::Parse {
            path: path.to_path_buf(),
            detail,
        };
        let keys: Vec<SignedPublicKey> = match SignedPublicKey::from_reader_many(bytes) {
            Ok((keys, _)) => keys
                .collect::<Result<_, _>>()
                .map_err(|e| parse(e.to_string()))?,
            Err(e) => return Err(parse(e.to_string())),
        };
        if keys.is_empty() {
            return Err(parse("the file is empty".to_string()));
        }
        Ok(Keyring {
            path: path.to_path_buf(),
            keys,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The primary keys' fingerprints, for the log at start.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| fingerprint(&k.primary_key))
            .collect()
    }

    /// Checks `signatures` over `data`: the fingerprint of the key that
    /// made a good one, or why none is.
    fn check(&self, signatures: &[Signature], data: &[u8]) -> Result<String, SignatureError> {
        let mut bad = None;
        for signature in signatures {
            for key in &self.keys {
                let primary = std::iter::once((fingerprint(&key.primary_key), {
                    signature.verify(&key.primary_key, data)
                }));
                // A primary key is trusted because the admin put it in the
                // file; a subkey only when the primary key's binding says
                // it is its own (else anyone could append one to the
                // file's copy). An old self-signature rPGP no longer
                // accepts (SHA-1) costs that subkey, not the keyring.
                let subkeys = key
                    .public_subkeys
                    .iter()
                    .filter(|sub| sub.verify_bindings(&key.primary_key).is_ok())
                    .map(|sub| (fingerprint(&sub.key), signature.verify(&sub.key, data)));
                for (name, verified) in primary.chain(subkeys) {
                    match verified {
                        Ok(()) => return Ok(name),
                        // The key is the issuer and the hash does not match:
                        // the text is not what the key signed.
                        Err(_) if issued_by(signature, &name) => bad = Some(name),
                        Err(_) => {}
                    }
                }
            }
        }
        if let Some(key) = bad {
            return Err(SignatureError::Bad { key });
        }
        let issuer = signatures
            .iter()
            .flat_map(issuers)
            .collect::<Vec<_>>()
            .join(", ");
        Err(SignatureError::UnknownKey {
            issuer: if issuer.is_empty() {
                "an unnamed key".to_string()
            } else {
                issuer
            },
            keyring: self.path.display().to_string(),
        })
    }

    /// Checks a detached signature (`SHA256SUMS.gpg`) over `list`.
    pub fn verify_detached(&self, list: &[u8], signature: &[u8]) -> Result<String, SignatureError> {
        let parsed: Vec<Signature> = DetachedSignature::from_reader_many(signature)
            .map_err(|e| SignatureError::Unreadable(e.to_string()))?
            .0
            .filter_map(Result::ok)
            .map(|d| d.signature)
            .collect();
        if parsed.is_empty() {
            return Err(SignatureError::Unreadable(
                "no signature packet in it".to_string(),
            ));
        }
        self.check(&parsed, list)
    }

    /// Checks a cleartext-signed list: the signed text (the list to read)
    /// and the key that signed it.
    pub fn verify_cleartext(&self, message: &str) -> Result<(String, String), SignatureError> {
        let (message, _) = CleartextSignedMessage::from_string(message)
            .map_err(|e| SignatureError::Unreadable(e.to_string()))?;
        let text = message.signed_text();
        let key = self.check(message.signatures(), text.as_bytes())?;
        Ok((text, key))
    }
}

/// Whether a list is a cleartext-signed message rather than a plain list.
pub fn is_cleartext_signed(list: &str) -> bool {
    list.trim_start()
        .starts_with("-----BEGIN PGP SIGNED MESSAGE-----")
}

/// Whether `signature` names the key of `fingerprint` as its issuer (by
/// fingerprint, or by the key id: its last 16 hex digits).
fn issued_by(signature: &Signature, fingerprint: &str) -> bool {
    issuers(signature).iter().any(|issuer| {
        fingerprint.eq_ignore_ascii_case(issuer) || fingerprint.ends_with(issuer.as_str())
    })
}

/// The issuers a signature names, in upper-case hex.
fn issuers(signature: &Signature) -> Vec<String> {
    let by_fingerprint = signature
        .issuer_fingerprint()
        .into_iter()
        .map(|f| format!("{f:X}"));
    let by_id = signature
        .issuer_key_id()
        .into_iter()
        .map(|id| id.to_string().to_ascii_uppercase());
    by_fingerprint.chain(by_id).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use pgp::composed::{
        ArmorOptions, EncryptionCaps, KeyType, SecretKeyParamsBuilder, SignedSecretKey,
    };
    use pgp::crypto::hash::HashAlgorithm;
    use pgp::ser::Serialize;
    use pgp::types::Password;
    use rand_chacha::rand_core::SeedableRng;

    fn key(seed: u64) -> SignedSecretKey {
        let mut params = SecretKeyParamsBuilder::default();
        params
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .can_encrypt(EncryptionCaps::None)
            .primary_user_id("Test Mirror <mirror@example.invalid>".into());
        let rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        params.build().unwrap().generate(rng).unwrap()
    }

    fn public(key: &SignedSecretKey, armored: bool) -> Vec<u8> {
        let public = key.to_public_key();
        if armored {
            public.to_armored_bytes(ArmorOptions::default()).unwrap()
        } else {
            public.to_bytes().unwrap()
        }
    }

    fn sign(key: &SignedSecretKey, data: &[u8]) -> DetachedSignature {
        let rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        DetachedSignature::sign_binary_data(
            rng,
            &key.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha256,
            data,
        )
        .unwrap()
    }

    const LIST: &[u8] = b"abc  debian-12-generic-amd64.qcow2\n";

    #[test]
    fn a_detached_signature_verifies_with_the_keyring_in_either_form() {
        let signer = key(1);
        for armored in [true, false] {
            let ring = Keyring::from_bytes(Path::new("ring"), &public(&signer, armored)).unwrap();
            let sig = sign(&signer, LIST);
            let binary = sig.to_bytes().unwrap();
            let armor = sig.to_armored_bytes(ArmorOptions::default()).unwrap();
            let good = fingerprint(&signer.primary_key);
            assert_eq!(ring.verify_detached(LIST, &binary), Ok(good.clone()));
            assert_eq!(ring.verify_detached(LIST, &armor), Ok(good));
        }
    }

    #[test]
    fn a_changed_list_or_another_key_is_refused() {
        let (signer, other) = (key(1), key(2));
        let ring = Keyring::from_bytes(Path::new("ring"), &public(&signer, true)).unwrap();
        let sig = sign(&signer, LIST).to_bytes().unwrap();
        let changed = b"def  debian-12-generic-amd64.qcow2\n";
        assert!(matches!(
            ring.verify_detached(changed, &sig),
            Err(SignatureError::Bad { .. })
        ));
        let forged = sign(&other, LIST).to_bytes().unwrap();
        let e = ring.verify_detached(LIST, &forged).unwrap_err();
        assert!(matches!(e, SignatureError::UnknownKey { .. }), "{e}");
        assert!(
            e.to_string().contains("which is not in the keyring ring"),
            "{e}"
        );
        assert!(matches!(
            ring.verify_detached(LIST, b"<html>not found</html>"),
            Err(SignatureError::Unreadable(_))
        ));
    }

    #[test]
    fn a_cleartext_signed_list_gives_its_text() {
        let signer = key(3);
        let ring = Keyring::from_bytes(Path::new("ring"), &public(&signer, false)).unwrap();
        let rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let text = "abc  a.qcow2\n-- dashed line\n";
        let message =
            CleartextSignedMessage::sign(rng, text, &signer.primary_key, &Password::empty())
                .unwrap()
                .to_armored_string(ArmorOptions::default())
                .unwrap();
        assert!(is_cleartext_signed(&message));
        let (signed, by) = ring.verify_cleartext(&message).unwrap();
        assert_eq!(signed.replace("\r\n", "\n").trim_end(), text.trim_end());
        assert_eq!(by, fingerprint(&signer.primary_key));
        let tampered = message.replace("abc  a.qcow2", "abd  a.qcow2");
        assert!(ring.verify_cleartext(&tampered).is_err());
    }

    #[test]
    fn a_keyring_that_holds_no_key_is_refused() {
        let e = Keyring::from_bytes(Path::new("/etc/k.gpg"), b"hello").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the keyring /etc/k.gpg holds no OpenPGP public key"),
            "{e}"
        );
        let e = Keyring::load(Path::new("/nonexistent/k.gpg")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read the keyring /nonexistent/k.gpg")
        );
    }
}
