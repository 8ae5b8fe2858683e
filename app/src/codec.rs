//! The server functions' JSON encoding, read with `serde_json::from_str`.
//! Island props are read with `from_str` too (by Leptos); server_fn's own
//! `JsonEncoding` reads with `from_slice`, and every type both arrive as
//! would be compiled twice into the browser bundle, once per reader.

use leptos::server_fn::codec::Post;
use leptos::server_fn::{Bytes, ContentType, Decodes, Encodes, Format, FormatType};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub struct JsonText;

impl ContentType for JsonText {
    const CONTENT_TYPE: &'static str = "application/json";
}

impl FormatType for JsonText {
    const FORMAT_TYPE: Format = Format::Text;
}

impl<T: Serialize> Encodes<T> for JsonText {
    type Error = serde_json::Error;

    fn encode(output: &T) -> Result<Bytes, Self::Error> {
        serde_json::to_vec(output).map(Bytes::from)
    }
}

impl<T: DeserializeOwned> Decodes<T> for JsonText {
    type Error = serde_json::Error;

    fn decode(bytes: Bytes) -> Result<T, Self::Error> {
        match std::str::from_utf8(&bytes) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => Err(serde::de::Error::custom("the answer is not UTF-8")),
        }
    }
}

/// A `POST` with a JSON body, answered with JSON.
pub type Json = Post<JsonText>;
