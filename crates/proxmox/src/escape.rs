//! Percent-encoding as Proxmox VE writes and reads it, one copy for the
//! api adapter and the simulator, on the `percent-encoding` crate. Both
//! escape `sshkeys` as Perl's `uri_escape` does — the adapter for the API,
//! the simulator as `qm set --sshkeys <file>` stores the file (qemu-server's
//! `PVE/CLI/qm.pm`, `param_mapping`) — and read it back as `Qemu.pm`'s
//! `uri_unescape` does.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Perl's `URI::Escape::uri_escape`: everything but RFC 3986's unreserved
/// `A-Za-z0-9-._~`.
const URI_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `raw` as Perl's `uri_escape` encodes it: what Proxmox expects inside
/// the `sshkeys` value, before the form encoding encodes it again.
pub fn uri_escape(raw: &str) -> String {
    utf8_percent_encode(raw, URI_ESCAPE).to_string()
}

/// pve-common's `encode_text` (`PVE/ParseUtils.pm`): control and 8-bit
/// bytes, `%` and `:` escaped, everything else kept (so a space stays).
const TEXT_ESCAPE: &AsciiSet = &percent_encoding::CONTROLS.add(b'%').add(b':');

/// `raw` as `qm config` prints the notes (`description`): one line, `%0A`
/// for each newline, `%3A` for each colon (qemu-server `PVE/CLI/qm.pm`,
/// the `config` printer calls `encode_text`).
pub fn encode_text(raw: &str) -> String {
    utf8_percent_encode(raw, TEXT_ESCAPE).to_string()
}

/// Whether `text` has only the characters of Proxmox's `urlencoded`
/// format (`^[-%a-zA-Z0-9_.!~*'()]*$`).
pub fn is_urlencoded(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-%_.!~*'()".contains(&b))
}

/// `%XX` decoded (Perl's `uri_unescape`); a `%` not followed by two hex
/// digits stays as it is, bytes that are no UTF-8 become U+FFFD.
pub fn uri_unescape(text: &str) -> Cow<'_, str> {
    percent_decode_str(text).decode_utf8_lossy()
}

/// A form's key or value decoded: `+` is a space, then `%XX` as
/// [`uri_unescape`] (so `%2B` stays a `+`).
pub fn form_unescape(text: &str) -> String {
    uri_unescape(&text.replace('+', " ")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_escape_keeps_only_the_unreserved_characters() {
        assert_eq!(
            uri_escape("ssh-ed25519 AAAA+b/c= me@host\n"),
            "ssh-ed25519%20AAAA%2Bb%2Fc%3D%20me%40host%0A"
        );
        assert_eq!(uri_escape("a-b_c.d~"), "a-b_c.d~");
        assert_eq!(uri_escape("!*'()"), "%21%2A%27%28%29");
        assert_eq!(uri_escape("é"), "%C3%A9");
    }

    #[test]
    fn decoding_undoes_both_and_keeps_bad_escapes() {
        let key = "ssh-ed25519 AAAA+b/c= me@host\n";
        assert_eq!(uri_unescape(&uri_escape(key)), key);
        assert_eq!(uri_unescape("100%"), "100%");
        assert_eq!(uri_unescape("%zz%4"), "%zz%4");
        assert_eq!(uri_unescape("%ff"), "\u{FFFD}");
        assert_eq!(form_unescape("a+b%2Bc%20d"), "a b+c d");
        assert_eq!(
            encode_text("made by pvedeck\npvedeck-owner: alice 100%"),
            "made by pvedeck%0Apvedeck-owner%3A alice 100%25"
        );
        assert_eq!(
            uri_unescape("made by pvedeck%0Apvedeck-owner%3A alice"),
            "made by pvedeck\npvedeck-owner: alice"
        );
        assert!(is_urlencoded("ssh-ed25519%20AAAA"));
        assert!(!is_urlencoded("ssh-ed25519 AAAA"));
    }
}
