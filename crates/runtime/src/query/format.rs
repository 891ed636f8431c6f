//! How a store's keys and values read as text and JSON: the query server's side of the serdes
//! (Kafka's wire formats). A key arrives as text in the key serde's text form; a value leaves
//! as the value serde's JSON form.

use serde_json::Value;

/// A serde's wire format, as far as queries need to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Format {
    /// UTF-8 text (`StringSerde`).
    String,
    /// 8 bytes big-endian (`LongSerde`).
    Long,
    /// 4 bytes big-endian (`IntegerSerde`).
    Integer,
    /// IEEE 754 bits, 8 bytes big-endian (`DoubleSerde`).
    Double,
    /// A JSON document in UTF-8.
    Json,
    /// Anything else: bytes, shown as hex.
    #[default]
    Bytes,
}

impl Format {
    /// The format of a serde by its Kafka name (`Serde::name`); unknown names are bytes.
    pub fn of_serde(name: &str) -> Format {
        match name {
            "String" => Format::String,
            "Long" => Format::Long,
            "Integer" => Format::Integer,
            "Double" => Format::Double,
            "Json" => Format::Json,
            _ => Format::Bytes,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::String => "String",
            Format::Long => "Long",
            Format::Integer => "Integer",
            Format::Double => "Double",
            Format::Json => "Json",
            Format::Bytes => "ByteArray",
        }
    }

    /// The bytes of a key given in this format's text form: the string itself, a decimal
    /// number, or a JSON document. Bytes keys have no text form (`key_hex` gives them).
    pub fn parse_key(self, text: &str) -> Result<Vec<u8>, BadKey> {
        let number = |what: &'static str| BadKey::NotA(text.to_owned(), what);
        Ok(match self {
            Format::String => text.as_bytes().to_vec(),
            Format::Long => text
                .parse::<i64>()
                .map_err(|_| number("a 64-bit integer"))?
                .to_be_bytes()
                .to_vec(),
            Format::Integer => text
                .parse::<i32>()
                .map_err(|_| number("a 32-bit integer"))?
                .to_be_bytes()
                .to_vec(),
            Format::Double => text
                .parse::<f64>()
                .map_err(|_| number("a number"))?
                .to_be_bytes()
                .to_vec(),
            Format::Json => {
                serde_json::from_str::<Value>(text).map_err(|e| BadKey::NotJson(e.to_string()))?;
                text.as_bytes().to_vec()
            }
            Format::Bytes => return Err(BadKey::BytesNeedHex),
        })
    }

    /// The JSON form of a value in this format; bytes that do not read as it come out as
    /// `{"hex": ...}` rather than failing the query.
    pub fn to_json(self, bytes: &[u8]) -> Value {
        let read = match self {
            Format::String => std::str::from_utf8(bytes).ok().map(Value::from),
            Format::Long => <[u8; 8]>::try_from(bytes)
                .ok()
                .map(|b| Value::from(i64::from_be_bytes(b))),
            Format::Integer => <[u8; 4]>::try_from(bytes)
                .ok()
                .map(|b| Value::from(i32::from_be_bytes(b))),
            Format::Double => <[u8; 8]>::try_from(bytes)
                .ok()
                .map(|b| Value::from(f64::from_be_bytes(b))),
            Format::Json => serde_json::from_slice(bytes).ok(),
            Format::Bytes => None,
        };
        read.unwrap_or_else(|| serde_json::json!({ "hex": hex(bytes) }))
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a key's text form does not read in the store's key format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    #[error("{0:?} is not {1}")]
    NotA(String, &'static str),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("the store's keys are bytes: give the key as key_hex=")]
    BytesNeedHex,
    #[error("{0:?} at {1} is not a hex digit")]
    NotHexDigit(char, usize),
    #[error("{0} hex digits: an even number is needed")]
    OddHexDigits(usize),
}

/// The bytes of a hex string (either case), or what is wrong with it.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, BadKey> {
    if let Some((at, c)) = text.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(BadKey::NotHexDigit(c, at));
    }
    if !text.len().is_multiple_of(2) {
        return Err(BadKey::OddHexDigits(text.len()));
    }
    // Every character is an ASCII hex digit: each pair is one byte.
    let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
    Ok(text
        .as_bytes()
        .chunks(2)
        .map(|pair| digit(pair[0]) << 4 | digit(pair[1]))
        .collect())
}

/// What a store holds and how its bytes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreFormat {
    pub key: Format,
    pub value: Format,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_in_their_text_form() {
        assert_eq!(Format::String.parse_key("k1").unwrap(), b"k1");
        assert_eq!(Format::Long.parse_key("-2").unwrap(), (-2i64).to_be_bytes());
        assert_eq!(Format::Integer.parse_key("7").unwrap(), 7i32.to_be_bytes());
        assert!(Format::Long
            .parse_key("x")
            .unwrap_err()
            .to_string()
            .contains("not a 64-bit integer"));
        assert!(Format::Integer.parse_key("99999999999").is_err());
        assert!(Format::Json.parse_key("{").is_err());
        assert!(Format::Bytes
            .parse_key("ab")
            .unwrap_err()
            .to_string()
            .contains("key_hex"));
    }

    #[test]
    fn values_read_as_json_or_hex() {
        assert_eq!(Format::Long.to_json(&5i64.to_be_bytes()), Value::from(5));
        assert_eq!(Format::String.to_json(b"a"), Value::from("a"));
        assert_eq!(
            Format::Json.to_json(br#"{"n":1}"#),
            serde_json::json!({"n": 1})
        );
        // Bytes that do not read as the format still answer.
        assert_eq!(
            Format::Long.to_json(b"abc"),
            serde_json::json!({"hex": "616263"})
        );
    }

    #[test]
    fn hex_round_trips_and_names_bad_input() {
        assert_eq!(parse_hex("00fF10").unwrap(), vec![0, 255, 16]);
        assert!(parse_hex("abc").unwrap_err().to_string().contains("even"));
        assert!(parse_hex("zz").unwrap_err().to_string().contains("at 0"));
        assert!(parse_hex("aé").unwrap_err().to_string().contains("at 1"));
        assert_eq!(hex(&[0, 255]), "00ff");
    }
}
