//! What the tests of several crates share: the property tests' (`mod fuzz`
//! beside each parser) configuration and the inputs they feed the parsers —
//! arbitrary text, and real Proxmox output
//! (docs/backends.md#proxmox-facts) with random edits, which gets past the
//! first check of a parser to the code behind it — and the check of a
//! document generated from the code ([`generated_file`]).

pub mod postgres;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// Fails when `file` (a document made from the code: docs/configuration.md,
/// docs/openapi.json) does not hold `want`; with `UPDATE_DOCS` set, writes
/// it instead. `cargo xtask docs` runs these tests that way.
pub fn generated_file(file: &std::path::Path, want: &str) {
    let shown = file.display();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        if let Err(e) = std::fs::write(file, want) {
            panic!("cannot write {shown}: {e}");
        }
        return;
    }
    let have = std::fs::read_to_string(file).unwrap_or_default();
    assert!(have == want, "{shown} is stale: run `cargo xtask docs`");
}

/// `cases` cases from a fixed seed: `cargo test` answers the same on every
/// run and machine, and a failure replays as it is. `PROPTEST_RNG_SEED` (and
/// `PROPTEST_CASES`) explore further; no regression file is written into the
/// source tree, since the seed alone replays a failure.
pub fn config(cases: u32) -> Config {
    let base = Config::default();
    let set = |name: &str| std::env::var_os(name).is_some();
    Config {
        cases: if set("PROPTEST_CASES") {
            base.cases
        } else {
            cases
        },
        rng_seed: if set("PROPTEST_RNG_SEED") {
            base.rng_seed
        } else {
            RngSeed::Fixed(0x11_f022)
        },
        failure_persistence: None,
        ..base
    }
}

/// Pieces that break parsers: separators of the formats, quotes, control
/// characters, multi-byte characters, numbers out of every range.
const NOISE: &[&str] = &[
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\0",
    "\x1b[31m",
    ":",
    ": ",
    ",",
    ";",
    "=",
    "'",
    "\"",
    "\\",
    "{",
    "}",
    "[",
    "]",
    "%",
    "-",
    "+",
    ".",
    "/",
    "é",
    "€",
    "💥",
    "\u{202e}",
    "\u{feff}",
    "-1",
    "0",
    "-0",
    "1.5",
    "1e400",
    "NaN",
    "inf",
    "4294967296",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999",
    "size=",
    "status: ",
    "unused0: ",
    "successfully imported disk '",
    "Successfully imported disk as '",
    "Name",
    "null",
    "true",
];

/// Any text: every character (control ones, newlines, any plane), or only
/// the characters the formats are made of, or lossy bytes.
pub fn text() -> impl Strategy<Value = String> {
    let format_chars: Vec<char> = "{}[]\":,0123456789abcdefgnpqrstuvz -.=;'%\n\r\tGKMT/"
        .chars()
        .collect();
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..200).prop_map(String::from_iter),
        prop::collection::vec(prop::sample::select(format_chars), 0..300)
            .prop_map(String::from_iter),
        prop::collection::vec(prop::sample::select(NOISE), 0..40).prop_map(|p| p.concat()),
        prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// A short piece of noise: one of [`NOISE`] or a few arbitrary characters.
fn noise() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(NOISE).prop_map(str::to_string),
        prop::collection::vec(any::<char>(), 0..6).prop_map(String::from_iter),
    ]
}

/// A place in a text, as a fraction of its length (`u32::MAX` is the end).
type Place = u32;

/// One random edit of a text.
#[derive(Debug, Clone)]
enum Edit {
    Insert(Place, String),
    Delete(Place, Place),
    Replace(Place, Place, String),
    Truncate(Place),
    DuplicateLine(Place),
    DropLine(Place),
    SwapLines(Place, Place),
    /// The run of digits at a place becomes another number (or none).
    Number(Place, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = any::<Place>;
    prop_oneof![
        (i(), noise()).prop_map(|(a, s)| Edit::Insert(a, s)),
        (i(), i()).prop_map(|(a, b)| Edit::Delete(a, b)),
        (i(), i(), noise()).prop_map(|(a, b, s)| Edit::Replace(a, b, s)),
        i().prop_map(Edit::Truncate),
        i().prop_map(Edit::DuplicateLine),
        i().prop_map(Edit::DropLine),
        (i(), i()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (i(), noise()).prop_map(|(a, s)| Edit::Number(a, s)),
    ]
}

/// A place in `0..=len`.
fn at(place: &Place, len: usize) -> usize {
    ((u64::from(*place) * (len as u64 + 1)) >> 32) as usize
}

/// One of `len` (more than zero) lines.
fn line(place: &Place, len: usize) -> usize {
    ((u64::from(*place) * len as u64) >> 32) as usize
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let span = |a: &Place, b: &Place, len: usize| {
        let (a, b) = (at(a, len), at(b, len));
        (a.min(b), a.max(b))
    };
    match edit {
        Edit::Insert(a, s) => {
            let a = at(a, chars.len());
            chars.splice(a..a, s.chars());
        }
        Edit::Delete(a, b) => {
            let (a, b) = span(a, b, chars.len());
            chars.drain(a..b);
        }
        Edit::Replace(a, b, s) => {
            let (a, b) = span(a, b, chars.len());
            chars.splice(a..b, s.chars());
        }
        Edit::Truncate(a) => chars.truncate(at(a, chars.len())),
        Edit::Number(a, s) => {
            let a = at(a, chars.len());
            let digit = |i: &usize| chars.get(*i).is_some_and(char::is_ascii_digit);
            let start = (0..a).rev().take_while(|i| digit(i)).last().unwrap_or(a);
            let end = (a..chars.len()).find(|i| !digit(i)).unwrap_or(chars.len());
            chars.splice(start..end, s.chars());
        }
        Edit::DuplicateLine(a) if !lines.is_empty() => {
            let a = line(a, lines.len());
            let line = lines[a].clone();
            lines.insert(a, line);
            return lines.concat();
        }
        Edit::DropLine(a) if !lines.is_empty() => {
            lines.remove(line(a, lines.len()));
            return lines.concat();
        }
        Edit::SwapLines(a, b) if !lines.is_empty() => {
            let (a, b) = (line(a, lines.len()), line(b, lines.len()));
            lines.swap(a, b);
            return lines.concat();
        }
        Edit::DuplicateLine(_) | Edit::DropLine(_) | Edit::SwapLines(..) => {}
    }
    chars.into_iter().collect()
}

/// One of `seeds` (real output) after one to four random edits.
pub fn mutated(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 1..=4),
    )
        .prop_map(|(seed, edits)| edits.iter().fold(seed.to_string(), |t, e| apply(&t, e)))
}

/// Arbitrary text, or real output edited: what every parser must survive.
pub fn output(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![text(), mutated(seeds)]
}

/// Any JSON value, nested a few levels: numbers of every kind (beyond
/// `i64` and `u64`, fractions), any strings, arrays and objects.
pub fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::collection::vec(any::<char>(), 0..20).prop_map(|c| Value::from(String::from_iter(c))),
        prop::sample::select(NOISE).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_stay_on_character_boundaries_and_lines() {
        let max = Place::MAX;
        let zero = 0;
        assert_eq!(apply("é1", &Edit::Truncate(max)), "é1");
        assert_eq!(apply("é1", &Edit::Truncate(zero)), "");
        assert_eq!(apply("a\nb\n", &Edit::DropLine(zero)), "b\n");
        assert_eq!(
            apply("size=32G", &Edit::Number(max, "-1".into())),
            "size=32G-1"
        );
        let middle = Place::MAX / 3 * 2;
        assert_eq!(
            apply("size=32G", &Edit::Number(middle, "x".into())),
            "size=xG"
        );
        assert_eq!(apply("", &Edit::SwapLines(zero, max)), "");
    }
}
