//! Text that came from somewhere pvedeck does not control — a guest's
//! output, a Proxmox task log, a mirror's error page — made safe to keep,
//! relay and print: no control characters (a terminal would act on ANSI or
//! OSC sequences, a log reader on a carriage return), and no line longer
//! than a bound. The server cleans before it stores or relays; the
//! command-line client cleans again before it prints, so an older or
//! hostile server cannot reach a terminal either.

use std::borrow::Cow;

/// The longest relayed or stored line, in bytes: a command printing
/// megabytes on one line fills neither the database nor the followers.
pub const MAX_LINE: usize = 4096;

/// `text` without control characters (C0, DEL, C1), tab kept: what is left
/// prints as itself.
pub fn strip_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_stripped) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(|c| !is_stripped(*c)).collect())
}

fn is_stripped(c: char) -> bool {
    c.is_control() && c != '\t'
}

/// `line` cut at `max` bytes on a character boundary, saying how much went.
pub fn clip(line: &str, max: usize) -> Cow<'_, str> {
    if line.len() <= max {
        return Cow::Borrowed(line);
    }
    let end = floor_char_boundary(line, max);
    Cow::Owned(format!(
        "{}… ({} bytes cut)",
        &line[..end],
        line.len() - end
    ))
}

/// One line as pvedeck keeps it: controls stripped, cut at [`MAX_LINE`].
pub fn clean_line(line: &str) -> Cow<'_, str> {
    match strip_controls(line) {
        Cow::Borrowed(kept) => clip(kept, MAX_LINE),
        Cow::Owned(stripped) => Cow::Owned(clip(&stripped, MAX_LINE).into_owned()),
    }
}

/// The largest index ≤ `at` that starts a character of `text`.
pub fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    let mut end = at;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_go_tabs_and_text_stay() {
        assert_eq!(strip_controls("plain\ttext é"), "plain\ttext é");
        assert!(matches!(strip_controls("plain"), Cow::Borrowed(_)));
        // A colour, a window title (OSC), a carriage return, a bell, C1 CSI.
        assert_eq!(
            strip_controls("\u{1b}[31mred\u{1b}[0m \u{1b}]0;owned\u{7}x\rback\u{9b}2J"),
            "[31mred[0m ]0;ownedxback2J"
        );
        assert_eq!(strip_controls("nul\0del\u{7f}"), "nuldel");
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        assert_eq!(clip("short", 10), "short");
        let accents = "é".repeat(10);
        assert_eq!(clip(&accents, 5), "éé… (16 bytes cut)");
        let long = "x".repeat(MAX_LINE * 3);
        let cleaned = clean_line(&long);
        assert!(cleaned.starts_with(&"x".repeat(MAX_LINE)));
        assert!(cleaned.ends_with(&format!("… ({} bytes cut)", MAX_LINE * 2)));
        assert_eq!(clean_line("\u{1b}[1mbold"), "[1mbold");
    }
}

/// Property tests: whatever a guest prints, what is kept has no control
/// character but tab and is never longer than the bound plus its note.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn cleaned_lines_are_printable_and_bounded(line in any::<String>(), max in 1usize..64) {
            let stripped = strip_controls(&line);
            prop_assert!(!stripped.chars().any(|c| c.is_control() && c != '\t'));
            let cut = clip(&stripped, max);
            if stripped.len() <= max {
                prop_assert_eq!(&*cut, &*stripped);
            } else {
                prop_assert!(cut.len() <= max + " (… bytes cut)".len() + 24);
                prop_assert!(stripped.starts_with(cut.split('…').next().unwrap_or_default()));
            }
        }
    }
}
