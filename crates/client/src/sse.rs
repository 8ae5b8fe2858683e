//! Server-sent events as the server writes them (`id:`, `event:`, `data:`
//! lines, a blank line after each event), read from a byte stream that may
//! cut anywhere.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    pub id: Option<u64>,
    /// `close` for the last one; `None` for a step event.
    pub event: Option<String>,
    pub data: String,
}

/// Collects chunks; hands out whole events.
#[derive(Default)]
pub struct Reader {
    /// Bytes, not text: a chunk may end inside a character.
    pending: Vec<u8>,
}

impl Reader {
    /// The events completed by `chunk`. Bytes that are not UTF-8 are
    /// replaced: the server only writes JSON.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Frame> {
        self.pending.extend_from_slice(chunk);
        let mut frames = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            if let Some(frame) = parse(&String::from_utf8_lossy(&block)) {
                frames.push(frame);
            }
        }
        frames
    }
}

/// One block; `None` for a keep-alive comment.
fn parse(block: &str) -> Option<Frame> {
    let mut frame = Frame::default();
    let mut any = false;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => frame.id = value.parse().ok(),
            "event" => frame.event = Some(value.to_string()),
            "data" => {
                if !frame.data.is_empty() {
                    frame.data.push('\n');
                }
                frame.data.push_str(value);
            }
            _ => continue,
        }
        any = true;
    }
    any.then_some(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_cut_anywhere_come_out_whole() {
        let text = ": keep-alive\n\ndata: {\"step\":\"é\"}\nid: 1\n\nevent: close\ndata: {}\n\n";
        for cut in 0..text.len() {
            let mut reader = Reader::default();
            let mut frames = reader.push(&text.as_bytes()[..cut]);
            frames.extend(reader.push(&text.as_bytes()[cut..]));
            assert_eq!(
                frames,
                vec![
                    Frame {
                        id: Some(1),
                        event: None,
                        data: "{\"step\":\"é\"}".into()
                    },
                    Frame {
                        id: None,
                        event: Some("close".into()),
                        data: "{}".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }
}
