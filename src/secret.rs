//! Passwords leave pvedeck hashed: `qm set --cipassword` gets a SHA-512 crypt
//! hash (`$6$…`), which Proxmox stores as is, so the clear text never shows
//! in an argument list.

use sha_crypt::{PasswordHasher, ShaCrypt};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HashError(String);

pub fn hash_password(password: &str) -> Result<String, HashError> {
    ShaCrypt::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.as_str().to_string())
        .map_err(|e| HashError(format!("cannot hash the password: {e}")))
}

/// Characters of a generated password: letters and digits without the ones
/// read alike (0/O, 1/l/I), so it can be typed from a screen.
const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// 20 of 57 characters: 116 bits, beyond any guessing over SSH.
const GENERATED_LEN: usize = 20;

/// A fresh password from the operating system's randomness
/// (`VM_ROOT_PASSWORD=random`).
pub fn random_password() -> Result<String, HashError> {
    // Bytes past the last whole multiple of the alphabet's size are drawn
    // again: every character equally likely.
    let fair = 256 - 256 % ALPHABET.len();
    let mut out = String::with_capacity(GENERATED_LEN);
    let mut bytes = [0u8; 32];
    while out.len() < GENERATED_LEN {
        getrandom::fill(&mut bytes)
            .map_err(|e| HashError(format!("no randomness for a password: {e}")))?;
        for &b in bytes.iter().filter(|&&b| usize::from(b) < fair) {
            if out.len() < GENERATED_LEN {
                out.push(char::from(ALPHABET[usize::from(b) % ALPHABET.len()]));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha_crypt::PasswordVerifier;

    #[test]
    fn sha512_crypt_with_a_fresh_salt() {
        let a = hash_password("s3cr3t").unwrap();
        let b = hash_password("s3cr3t").unwrap();
        assert!(a.starts_with("$6$"), "{a}");
        assert_ne!(a, b, "salted");
        assert!(!a.contains("s3cr3t"));
        let parsed = sha_crypt::PasswordHash::new(&a).unwrap();
        assert!(
            ShaCrypt::default()
                .verify_password(b"s3cr3t", &parsed)
                .is_ok()
        );
    }

    #[test]
    fn generated_passwords_are_long_typeable_and_fresh() {
        let a = random_password().unwrap();
        let b = random_password().unwrap();
        assert_eq!(a.len(), GENERATED_LEN);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert_ne!(a, b);
    }
}
