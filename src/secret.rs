//! Passwords leave pvedeck hashed: `qm set --cipassword` gets a SHA-512 crypt
//! hash (`$6$…`), which Proxmox stores as is, so the clear text never shows
//! in an argument list.

use sha_crypt::{PasswordHasher, ShaCrypt};

#[derive(Debug, thiserror::Error)]
#[error("cannot hash the password: {0}")]
pub struct HashError(String);

pub fn hash_password(password: &str) -> Result<String, HashError> {
    ShaCrypt::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.as_str().to_string())
        .map_err(|e| HashError(e.to_string()))
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
}
