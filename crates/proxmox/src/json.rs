//! Serde helpers for `pvesh --output-format json`, which prints booleans as
//! the numbers 0 and 1.

use serde::{Deserialize, Deserializer, Serializer};

pub mod int_bool {
    use super::*;

    pub fn serialize<S: Serializer>(value: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(u8::from(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Flag {
            Int(i64),
            Bool(bool),
        }
        Ok(match Flag::deserialize(d)? {
            Flag::Int(n) => n != 0,
            Flag::Bool(b) => b,
        })
    }
}
