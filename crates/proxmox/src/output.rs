//! A command's output, read in bounded pieces whatever it prints: a guest
//! that writes a gigabyte without a newline costs pvedeck one line's worth
//! of memory. Lines are cut at a fixed length, at most a fixed number of
//! bytes is kept and relayed per command, and the rest is counted and
//! summarised in one closing line. Control characters (but tab) are
//! stripped from what is kept and relayed.

use pvedeck_domain::text;

use crate::LineSink;

/// How much of one command's output pvedeck holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest line held, in bytes; the rest of a longer line is
    /// counted, not held.
    pub line: usize,
    /// The bytes of output kept (and relayed) per stream; past it lines are
    /// counted, not kept.
    pub kept: usize,
}

impl Limits {
    /// What a guest prints (the readiness probe, the init script): a
    /// person reads it, and the guest may be hostile. A line's 4,000 bytes
    /// and the note of its cut fit the 4 KiB a job event keeps.
    pub const GUEST: Limits = Limits {
        line: 4000,
        kept: 256 * 1024,
    };
    /// The guest agent's answer (`qm guest exec`, a JSON line holding what
    /// the command printed): pvedeck's own agent commands print a line or
    /// two, so a megabyte is a guest flooding.
    pub const AGENT: Limits = Limits {
        line: 1024 * 1024,
        kept: 1024 * 1024,
    };
    /// Proxmox's own answers: `pvesh get /cluster/resources` of a large
    /// cluster is megabytes on one JSON line, and must arrive whole.
    pub const PROXMOX: Limits = Limits {
        line: 64 * 1024 * 1024,
        kept: 64 * 1024 * 1024,
    };
}

/// One stream of a command's output, fed as it arrives.
pub struct Collector<'a> {
    limits: Limits,
    sink: Option<LineSink<'a>>,
    /// The current line's first `limits.line` bytes.
    line: Vec<u8>,
    /// Bytes of the current line past `limits.line`.
    line_cut: u64,
    kept: String,
    /// Lines (and their bytes) past `limits.kept`: counted only.
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl<'a> Collector<'a> {
    pub fn new(limits: Limits, sink: Option<LineSink<'a>>) -> Collector<'a> {
        Collector {
            limits,
            sink,
            line: Vec::new(),
            line_cut: 0,
            kept: String::new(),
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// The next bytes of output, wherever they split lines or characters.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, rest, ended) = match chunk.iter().position(|b| *b == b'\n') {
                Some(at) => (&chunk[..at], &chunk[at + 1..], true),
                None => (chunk, &[][..], false),
            };
            let room = self.limits.line.saturating_sub(self.line.len());
            let held = part.len().min(room);
            self.line.extend_from_slice(&part[..held]);
            self.line_cut += (part.len() - held) as u64;
            if ended {
                self.end_line();
            }
            chunk = rest;
        }
    }

    fn end_line(&mut self) {
        let raw = std::mem::take(&mut self.line);
        let cut = std::mem::take(&mut self.line_cut);
        let whole = raw.len() as u64 + cut + 1;
        if self.kept.len() >= self.limits.kept {
            self.dropped_lines += 1;
            self.dropped_bytes += whole;
            return;
        }
        // A line cut in the middle of a character ends in a replacement
        // character: honest about the cut, and still text.
        let decoded = String::from_utf8_lossy(&raw);
        let mut line = text::strip_controls(&decoded).into_owned();
        if cut > 0 {
            line.push_str(&format!("… ({cut} bytes cut)"));
        }
        if let Some(sink) = self.sink {
            sink(&line);
        }
        self.kept.push_str(&line);
        self.kept.push('\n');
    }

    /// The output as kept: each line cleaned and bounded, and a closing
    /// line saying how much more there was.
    pub fn finish(mut self) -> String {
        if !self.line.is_empty() || self.line_cut > 0 {
            self.end_line();
        }
        if self.dropped_lines > 0 {
            let summary = format!(
                "… {} more bytes in {} lines not kept",
                self.dropped_bytes, self.dropped_lines
            );
            if let Some(sink) = self.sink {
                sink(&summary);
            }
            self.kept.push_str(&summary);
            self.kept.push('\n');
        }
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn collect(limits: Limits, chunks: &[&[u8]]) -> (String, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let sink = |l: &str| seen.lock().unwrap().push(l.to_string());
        let mut c = Collector::new(limits, Some(&sink));
        for chunk in chunks {
            c.feed(chunk);
        }
        let kept = c.finish();
        (kept, seen.into_inner().unwrap())
    }

    #[test]
    fn lines_split_across_chunks_come_out_whole() {
        let (kept, seen) = collect(Limits::GUEST, &[b"on", b"e\ntw", b"o\n", b"three"]);
        assert_eq!(kept, "one\ntwo\nthree\n");
        assert_eq!(seen, ["one", "two", "three"]);
    }

    #[test]
    fn a_long_line_is_held_to_its_bound_and_the_rest_counted() {
        let limits = Limits { line: 8, kept: 64 };
        let (kept, seen) = collect(limits, &[b"0123456789", b"abcdef", b"\nok\n"]);
        assert_eq!(seen, ["01234567… (8 bytes cut)", "ok"]);
        assert_eq!(kept, "01234567… (8 bytes cut)\nok\n");
    }

    #[test]
    fn past_the_kept_bytes_lines_are_counted_and_summarised() {
        let limits = Limits { line: 16, kept: 10 };
        let (kept, seen) = collect(limits, &[b"aaaaaa\nbbbbbb\ncc\ndd\n"]);
        assert_eq!(kept, "aaaaaa\nbbbbbb\n… 6 more bytes in 2 lines not kept\n");
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn controls_are_stripped_and_bad_utf8_replaced() {
        let (kept, _) = collect(Limits::GUEST, &[b"\x1b]0;title\x07x\r\xff\ty\n"]);
        assert_eq!(kept, "]0;titlex\u{fffd}\ty\n");
    }

    #[test]
    fn a_gigabyte_without_a_newline_holds_one_line() {
        let chunk = vec![b'x'; 1 << 16];
        let mut c = Collector::new(Limits::GUEST, None);
        for _ in 0..(1 << 14) {
            c.feed(&chunk);
            assert!(c.line.len() <= Limits::GUEST.line);
        }
        let kept = c.finish();
        assert!(kept.ends_with(&format!("… ({} bytes cut)\n", (1u64 << 30) - 4000)));
        assert!(kept.len() < 4200);
    }
}
