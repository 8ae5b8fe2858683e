//! The body of `POST …/upload` as pveproxy reads it (pve-http-server
//! `file_upload_multipart`): `multipart/form-data` with plain fields
//! first, then one file part named `filename`, then the closing delimiter.
//! The file's bytes are handed on as they arrive instead of being
//! gathered (an image can be hundreds of megabytes); a delimiter that
//! straddles two chunks is still found, because the last bytes that could
//! begin one are held back until the next chunk shows what they are.

use bytes::{Bytes, BytesMut};

/// A part's headers beyond this are refused (pveproxy allows about 2 KiB).
const MAX_HEAD: usize = 8 * 1024;
/// A plain field beyond this is refused: the fields are short words and
/// checksums, so more is a client gone wrong, not data to keep.
const MAX_FIELD: usize = 64 * 1024;
/// Spaces a sender may put after a delimiter (RFC 2046 transport padding).
const MAX_PADDING: usize = 1024;

/// What the body has told so far, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A plain field, its value untrimmed.
    Field { name: String, value: String },
    /// The file part begins; `filename` is its `filename="…"` as sent.
    FileStart { filename: String },
    /// The next bytes of the file.
    FileData(Bytes),
    /// The closing delimiter: the file is whole.
    End,
}

/// Why a body is not an upload pveproxy would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartError(pub String);

impl std::fmt::Display for MultipartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn failed(detail: &str) -> MultipartError {
    MultipartError(format!("upload failed - {detail}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Before the first delimiter (a preamble is skipped).
    Preamble,
    /// Just after a delimiter: `--` closes, a line break opens a part.
    Delimited,
    Head,
    Field(String),
    File,
    Done,
}

/// A push parser: [`Upload::push`] chunks as they come, take events with
/// [`Upload::next`] until it answers `None`, and say [`Upload::close`]
/// when the body has ended.
pub struct Upload {
    buf: BytesMut,
    /// `\r\n--<boundary>`: what ends a part.
    delimiter: Vec<u8>,
    state: State,
    file_seen: bool,
    closed: bool,
    /// How far `buf` is known not to hold what the state waits for, so a
    /// slow trickle of small chunks is not searched again from the start.
    scanned: usize,
}

impl Upload {
    pub fn new(boundary: &str) -> Upload {
        Upload {
            buf: BytesMut::new(),
            delimiter: format!("\r\n--{boundary}").into_bytes(),
            state: State::Preamble,
            file_seen: false,
            closed: false,
            scanned: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if self.state != State::Done {
            self.buf.extend_from_slice(chunk);
        }
    }

    /// The body has ended: what is still missing becomes an error.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// The next event, `Ok(None)` when more input is needed.
    pub fn next(&mut self) -> Result<Option<Event>, MultipartError> {
        loop {
            let step = match self.state.clone() {
                State::Preamble => self.preamble(),
                State::Delimited => self.delimited()?,
                State::Head => self.head()?,
                State::Field(name) => self.field(&name)?,
                State::File => self.file(),
                State::Done => return Ok(None),
            };
            match step {
                Step::Event(event) => return Ok(Some(event)),
                Step::Again => {}
                Step::Wait if self.closed => return Err(self.truncated()),
                Step::Wait => return Ok(None),
            }
        }
    }

    fn truncated(&self) -> MultipartError {
        match self.state {
            State::Preamble => failed("no multipart delimiter"),
            _ => failed("the body ends before the closing delimiter"),
        }
    }

    fn enter(&mut self, state: State) {
        self.state = state;
        self.scanned = 0;
    }

    /// Looks for `needle` where it was not looked for yet.
    fn find(&mut self, needle: &[u8]) -> Option<usize> {
        let start = self.scanned;
        let found = find(&self.buf, needle, start);
        if found.is_none() {
            // The tail could be the start of `needle`: search it again.
            self.scanned = self.buf.len().saturating_sub(needle.len() - 1);
        }
        found
    }

    fn preamble(&mut self) -> Step {
        // The first delimiter has no line break before it.
        let dash = self.delimiter[2..].to_vec();
        match self.find(&dash) {
            Some(at) => {
                let _ = self.buf.split_to(at + dash.len());
                self.enter(State::Delimited);
                Step::Again
            }
            None => {
                // A preamble is of no use: keep only what may begin `dash`.
                let _ = self.buf.split_to(self.scanned);
                self.scanned = 0;
                Step::Wait
            }
        }
    }

    fn delimited(&mut self) -> Result<Step, MultipartError> {
        if self.buf.len() < 2 {
            return Ok(Step::Wait);
        }
        if self.buf.starts_with(b"--") {
            return self.closing();
        }
        let Some(at) = self.find(b"\r\n") else {
            if self.buf.len() > MAX_PADDING {
                return Err(failed("malformed multipart delimiter"));
            }
            return Ok(Step::Wait);
        };
        if !self.buf[..at].iter().all(|b| *b == b' ' || *b == b'\t') {
            return Err(failed("malformed multipart delimiter"));
        }
        if self.file_seen {
            return Err(failed("a part after the file part"));
        }
        let _ = self.buf.split_to(at + 2);
        self.enter(State::Head);
        Ok(Step::Again)
    }

    fn closing(&mut self) -> Result<Step, MultipartError> {
        if !self.file_seen {
            return Err(failed("no file part"));
        }
        // The epilogue, if any, is ignored as pveproxy does.
        self.buf.clear();
        self.enter(State::Done);
        Ok(Step::Event(Event::End))
    }

    fn head(&mut self) -> Result<Step, MultipartError> {
        if self.buf.starts_with(b"\r\n") {
            return Err(failed("a multipart part without headers"));
        }
        let Some(at) = self.find(b"\r\n\r\n") else {
            if self.buf.len() > MAX_HEAD {
                return Err(failed("multipart headers too large"));
            }
            return Ok(Step::Wait);
        };
        let head = self.buf.split_to(at + 4);
        let disposition = Disposition::parse(&String::from_utf8_lossy(&head))?;
        match disposition.filename {
            None => {
                self.enter(State::Field(disposition.name));
                Ok(Step::Again)
            }
            Some(_) if disposition.name != "filename" => Err(MultipartError(format!(
                "wrong field name '{}' for file upload, expected 'filename'",
                disposition.name
            ))),
            Some(filename) => {
                self.file_seen = true;
                self.enter(State::File);
                Ok(Step::Event(Event::FileStart { filename }))
            }
        }
    }

    fn field(&mut self, name: &str) -> Result<Step, MultipartError> {
        let delimiter = self.delimiter.clone();
        let Some(at) = self.find(&delimiter) else {
            if self.buf.len() > MAX_FIELD + delimiter.len() {
                return Err(failed(&format!("field '{name}' too large")));
            }
            return Ok(Step::Wait);
        };
        let value = self.buf.split_to(at);
        let _ = self.buf.split_to(delimiter.len());
        self.enter(State::Delimited);
        Ok(Step::Event(Event::Field {
            name: name.to_string(),
            value: String::from_utf8_lossy(&value).into_owned(),
        }))
    }

    fn file(&mut self) -> Step {
        let delimiter = self.delimiter.clone();
        let ready = match self.find(&delimiter) {
            Some(0) => {
                let _ = self.buf.split_to(delimiter.len());
                self.enter(State::Delimited);
                return Step::Again;
            }
            Some(at) => at,
            // Everything but what could begin the delimiter.
            None => self.scanned,
        };
        if ready == 0 {
            return Step::Wait;
        }
        let data = self.buf.split_to(ready).freeze();
        self.scanned = 0;
        Step::Event(Event::FileData(data))
    }
}

enum Step {
    Event(Event),
    /// The state changed: look again.
    Again,
    /// More input is needed.
    Wait,
}

/// The first `needle` in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let mut at = from;
    while at <= last_start {
        // Jump to the next candidate: the first byte is rare in image data.
        at += hay[at..=last_start].iter().position(|b| *b == first)?;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// A part's `Content-Disposition: form-data; name="…"[; filename="…"]`.
#[derive(Debug, PartialEq, Eq)]
struct Disposition {
    name: String,
    filename: Option<String>,
}

impl Disposition {
    fn parse(head: &str) -> Result<Disposition, MultipartError> {
        let value = head
            .split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case("content-disposition"))
            .map(|(_, value)| value.trim())
            .ok_or_else(|| failed("a multipart part without Content-Disposition"))?;
        let (kind, mut rest) = value.split_once(';').unwrap_or((value, ""));
        if kind.trim() != "form-data" {
            return Err(MultipartError(format!(
                "wrong Content-Disposition '{}' in multipart, expected 'form-data'",
                kind.trim()
            )));
        }
        let (mut name, mut filename) = (None, None);
        while let Some((key, value, after)) = parameter(rest) {
            match key.to_ascii_lowercase().as_str() {
                "name" => name = Some(value),
                "filename" => filename = Some(value),
                _ => {}
            }
            rest = after;
        }
        let name = name.ok_or_else(|| failed("a multipart part without a name"))?;
        Ok(Disposition { name, filename })
    }
}

/// The first `key=value` of `text` (`; ` separated, the value a token or
/// a quoted string with `\` escapes) and what follows it.
fn parameter(text: &str) -> Option<(String, String, &str)> {
    let text = text.trim_start_matches([';', ' ', '\t']);
    let (key, rest) = text.split_once('=')?;
    let rest = rest.trim_start();
    let Some(quoted) = rest.strip_prefix('"') else {
        let end = rest.find(';').unwrap_or(rest.len());
        return Some((
            key.trim().to_string(),
            rest[..end].trim().to_string(),
            &rest[end..],
        ));
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((key.trim().to_string(), value, &quoted[i + 1..])),
            '\\' => value.extend(chars.next().map(|(_, c)| c)),
            c => value.push(c),
        }
    }
    // An unterminated quote: the rest is the value.
    Some((key.trim().to_string(), value, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDARY: &str = "pvedeck-00c0ffee12345678";

    /// A body as pvedeck's client sends it: the fields, then the file.
    fn body(fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in fields {
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        if let Some((name, data)) = file {
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{name}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            out.extend_from_slice(data);
        }
        out.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
        out
    }

    #[derive(Debug, Default, PartialEq, Eq)]
    struct Parsed {
        fields: Vec<(String, String)>,
        filename: Option<String>,
        data: Vec<u8>,
        ended: bool,
    }

    fn drain(parser: &mut Upload, parsed: &mut Parsed) -> Result<(), MultipartError> {
        while let Some(event) = parser.next()? {
            match event {
                Event::Field { name, value } => parsed.fields.push((name, value)),
                Event::FileStart { filename } => parsed.filename = Some(filename),
                Event::FileData(bytes) => parsed.data.extend_from_slice(&bytes),
                Event::End => parsed.ended = true,
            }
        }
        Ok(())
    }

    /// `body` fed in the pieces `cuts` makes of it, then closed.
    fn parse(body: &[u8], cuts: &[usize]) -> Result<Parsed, MultipartError> {
        let mut parser = Upload::new(BOUNDARY);
        let mut parsed = Parsed::default();
        let mut from = 0;
        for &cut in cuts.iter().chain([&body.len()]) {
            parser.push(&body[from..cut]);
            drain(&mut parser, &mut parsed)?;
            from = cut;
        }
        parser.close();
        drain(&mut parser, &mut parsed)?;
        Ok(parsed)
    }

    /// Image bytes that look like beginnings of the delimiter.
    fn tricky_data() -> Vec<u8> {
        let mut data = b"QFI\xfb\r\n--pvedeck-00c0ffee1234567\r\n\r\n-".to_vec();
        data.extend_from_slice(b"\r\n-pvedeck\r\r\n--pvedeck-00c0ffee123456 \r\n--");
        data.extend((0..=255u8).cycle().take(600));
        data.extend_from_slice(b"\r\n--");
        data
    }

    #[test]
    fn a_delimiter_split_at_any_chunk_position_is_found() {
        let data = tricky_data();
        let fields = [("content", "import"), ("checksum-algorithm", "sha256")];
        let body = body(&fields, Some(("debian 12.qcow2", &data)));
        let expected = Parsed {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            filename: Some("debian 12.qcow2".to_string()),
            data: data.clone(),
            ended: true,
        };
        for cut in 0..=body.len() {
            assert_eq!(parse(&body, &[cut]).unwrap(), expected, "cut at {cut}");
        }
        let every_byte: Vec<usize> = (1..body.len()).collect();
        assert_eq!(parse(&body, &every_byte).unwrap(), expected);
        for size in [2, 3, 7, 29, 64] {
            let cuts: Vec<usize> = (size..body.len()).step_by(size).collect();
            assert_eq!(parse(&body, &cuts).unwrap(), expected, "chunks of {size}");
        }
    }

    #[test]
    fn a_body_without_its_file_part_is_refused() {
        let body = body(&[("content", "import")], None);
        for cut in [0, 10, body.len()] {
            assert_eq!(
                parse(&body, &[cut]),
                Err(MultipartError("upload failed - no file part".into()))
            );
        }
        let wrong = String::from_utf8(self::body(&[], Some(("a.qcow2", b"x"))))
            .unwrap()
            .replace("name=\"filename\"", "name=\"file\"");
        assert_eq!(
            parse(wrong.as_bytes(), &[]).unwrap_err().0,
            "wrong field name 'file' for file upload, expected 'filename'"
        );
    }

    #[test]
    fn a_body_without_its_closing_delimiter_is_refused() {
        let full = body(&[("content", "import")], Some(("a.qcow2", &tricky_data())));
        let closing = format!("\r\n--{BOUNDARY}--\r\n").len();
        for cut in [full.len() - closing, full.len() - 3, 40, 0] {
            let err = parse(&full[..cut], &[]).unwrap_err();
            assert!(err.0.starts_with("upload failed - "), "cut {cut}: {err}");
        }
        // A further part after the file is not taken either.
        let mut extra = full[..full.len() - closing].to_vec();
        extra.extend_from_slice(b"\r\n");
        extra.extend_from_slice(&body(&[("checksum", "ab")], None));
        assert_eq!(
            parse(&extra, &[]).unwrap_err().0,
            "upload failed - a part after the file part"
        );
    }

    #[test]
    fn dispositions_parse_quoted_names() {
        let d = Disposition::parse(
            "Content-Disposition: form-data; name=\"filename\"; filename=\"a \\\"b\\\";c.qcow2\"\r\n\r\n",
        )
        .unwrap();
        assert_eq!(d.name, "filename");
        assert_eq!(d.filename.as_deref(), Some("a \"b\";c.qcow2"));
        let plain = Disposition::parse("content-disposition: form-data; name=content\r\n").unwrap();
        assert_eq!((plain.name.as_str(), plain.filename), ("content", None));
        assert!(Disposition::parse("Content-Disposition: attachment; name=\"x\"").is_err());
        assert!(Disposition::parse("Content-Type: text/plain").is_err());
        assert_eq!(find(b"abcabd", b"abd", 0), Some(3));
        assert_eq!(find(b"ab", b"abd", 0), None);
    }
}
