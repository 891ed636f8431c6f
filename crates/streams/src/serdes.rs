//! Serdes: how keys and values become bytes on topics and in stores. The built-in ones write
//! what Kafka's own serializers write, so Java clients read the topics: `String` as UTF-8,
//! `i64`/`i32` big-endian (`LongSerde`/`IntegerSerde`), `f64` as its IEEE 754 bits big-endian
//! (`DoubleSerde`), bytes as they are, and any `serde` type as JSON.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use baton_runtime::topology::windowed_key;

/// Why bytes could not be read as a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{serde}: {why}")]
pub struct SerdeError {
    /// The serde that failed, e.g. `Long`.
    pub serde: &'static str,
    pub why: String,
}

/// Turns values of type `Self::Value` into bytes and back. Implement it for a format of your
/// own; a serde is shared by every task, so it must be `Send + Sync`.
///
/// ```
/// use baton_streams::serdes::{Long, Serde};
/// let bytes = Long.serialize(&42);
/// assert_eq!(bytes, 42i64.to_be_bytes());
/// assert_eq!(Long.deserialize(&bytes), Ok(42));
/// ```
pub trait Serde: Send + Sync + 'static {
    type Value: Send + Sync + 'static;
    /// A short name for messages and `describe`.
    fn name(&self) -> &'static str;
    fn serialize(&self, value: &Self::Value) -> Vec<u8>;
    fn deserialize(&self, bytes: &[u8]) -> Result<Self::Value, SerdeError>;
}

/// UTF-8 text, as Kafka's `StringSerializer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Str;

impl Serde for Str {
    type Value = String;
    fn name(&self) -> &'static str {
        "String"
    }
    fn serialize(&self, value: &String) -> Vec<u8> {
        value.as_bytes().to_vec()
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<String, SerdeError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| SerdeError {
            serde: "String",
            why: format!("not UTF-8: {e}"),
        })
    }
}

macro_rules! fixed {
    ($name:ident, $t:ty, $kafka:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;

        impl Serde for $name {
            type Value = $t;
            fn name(&self) -> &'static str {
                $kafka
            }
            fn serialize(&self, value: &$t) -> Vec<u8> {
                value.to_be_bytes().to_vec()
            }
            fn deserialize(&self, bytes: &[u8]) -> Result<$t, SerdeError> {
                let array = bytes.try_into().map_err(|_| SerdeError {
                    serde: $kafka,
                    why: format!(
                        "{} bytes where {} were expected",
                        bytes.len(),
                        std::mem::size_of::<$t>()
                    ),
                })?;
                Ok(<$t>::from_be_bytes(array))
            }
        }
    };
}

fixed!(
    Long,
    i64,
    "Long",
    "A 64-bit integer, 8 bytes big-endian, as Kafka's `LongSerializer`."
);
fixed!(
    Integer,
    i32,
    "Integer",
    "A 32-bit integer, 4 bytes big-endian, as Kafka's `IntegerSerializer`."
);
fixed!(
    Double,
    f64,
    "Double",
    "A 64-bit float, its IEEE 754 bits big-endian, as Kafka's `DoubleSerializer`."
);

/// Bytes as they are, as Kafka's `ByteArraySerializer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Serde for Raw {
    type Value = Vec<u8>;
    fn name(&self) -> &'static str {
        "ByteArray"
    }
    fn serialize(&self, value: &Vec<u8>) -> Vec<u8> {
        value.clone()
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<Vec<u8>, SerdeError> {
        Ok(bytes.to_vec())
    }
}

/// Any `serde` type as a JSON document (UTF-8).
///
/// ```
/// use baton_streams::serdes::{Json, Serde};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Order { id: String, customer: u64 }
/// let json = Json::<Order>::new();
/// let bytes = json.serialize(&Order { id: "o1".into(), customer: 7 });
/// assert_eq!(bytes, br#"{"id":"o1","customer":7}"#);
/// assert!(json.deserialize(b"{").is_err());
/// ```
pub struct Json<T>(PhantomData<fn() -> T>);

impl<T> Json<T> {
    pub fn new() -> Self {
        Json(PhantomData)
    }
}

impl<T> Default for Json<T> {
    fn default() -> Self {
        Json::new()
    }
}

impl<T> Clone for Json<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Json<T> {}

impl<T> Serde for Json<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    type Value = T;
    fn name(&self) -> &'static str {
        "Json"
    }
    fn serialize(&self, value: &T) -> Vec<u8> {
        serde_json::to_vec(value).unwrap_or_else(|e| {
            // A map with non-string keys, say: the application's own type cannot be written.
            panic!("serializing a value as JSON: {e}")
        })
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<T, SerdeError> {
        serde_json::from_slice(bytes).map_err(|e| SerdeError {
            serde: "Json",
            why: e.to_string(),
        })
    }
}

/// A time window: `[start_ms, end_ms)`, milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
}

/// A key of a windowed table: the record key and its window (Kafka Streams' `Windowed<K>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Windowed<K> {
    pub key: K,
    pub window: Window,
}

/// A windowed key as Kafka's `TimeWindowedSerializer` writes it: the key in its serde, then
/// the window start (8 bytes, big-endian). The end is not written; reading takes it from the
/// window size, as `WindowedSerdes.timeWindowedSerdeFrom(type, size)` does.
///
/// ```
/// use std::time::Duration;
/// use baton_streams::serdes::{Serde, Str, TimeWindowed};
/// use baton_streams::{Window, Windowed};
///
/// let serde = TimeWindowed::new(Str, Duration::from_secs(60));
/// let key = Windowed { key: "alice".to_string(), window: Window { start_ms: 60_000, end_ms: 120_000 } };
/// let bytes = serde.serialize(&key);
/// assert_eq!(&bytes[..5], b"alice");
/// assert_eq!(bytes[5..], 60_000i64.to_be_bytes());
/// assert_eq!(serde.deserialize(&bytes), Ok(key));
/// ```
pub struct TimeWindowed<K> {
    inner: Arc<dyn Serde<Value = K>>,
    size_ms: i64,
}

impl<K: Send + Sync + 'static> TimeWindowed<K> {
    /// Windowed keys of `inner`'s type, in windows of `size`.
    pub fn new<S: Serde<Value = K>>(inner: S, size: Duration) -> TimeWindowed<K> {
        TimeWindowed::shared(Arc::new(inner), size)
    }

    pub(crate) fn shared(inner: Arc<dyn Serde<Value = K>>, size: Duration) -> TimeWindowed<K> {
        TimeWindowed {
            inner,
            size_ms: crate::windows::millis(size),
        }
    }
}

impl<K: Send + Sync + 'static> Serde for TimeWindowed<K> {
    type Value = Windowed<K>;
    fn name(&self) -> &'static str {
        "TimeWindowed"
    }
    fn serialize(&self, value: &Windowed<K>) -> Vec<u8> {
        windowed_key(&self.inner.serialize(&value.key), value.window.start_ms)
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<Windowed<K>, SerdeError> {
        let Some(cut) = bytes.len().checked_sub(8) else {
            return Err(SerdeError {
                serde: "TimeWindowed",
                why: format!("{} bytes, shorter than a window start", bytes.len()),
            });
        };
        let (key, start) = bytes.split_at(cut);
        let start_ms = i64::from_be_bytes(start.try_into().expect("8 bytes"));
        Ok(Windowed {
            key: self.inner.deserialize(key)?,
            window: Window {
                start_ms,
                end_ms: start_ms.saturating_add(self.size_ms),
            },
        })
    }
}

/// `bytes` read with `serde`; bytes it cannot read fail the record as undecodable
/// (`--on-deserialization-error`), naming `what`.
pub(crate) fn read_or_fail<S: Serde + ?Sized>(serde: &S, bytes: &[u8], what: &str) -> S::Value {
    serde
        .deserialize(bytes)
        .unwrap_or_else(|e| baton_runtime::record::undecodable(format!("{what}: {e}")))
}

/// A session-windowed key as Kafka's `SessionWindowedSerializer` writes it
/// (`SessionKeySchema`): the key in its serde, then the session's end, then its start (8 bytes
/// each, big-endian).
///
/// ```
/// use baton_streams::serdes::{Serde, SessionWindowed, Str};
/// use baton_streams::{Window, Windowed};
///
/// let serde = SessionWindowed::new(Str);
/// let key = Windowed { key: "bob".to_string(), window: Window { start_ms: 10, end_ms: 25 } };
/// let bytes = serde.serialize(&key);
/// assert_eq!(&bytes[3..11], &25i64.to_be_bytes());
/// assert_eq!(serde.deserialize(&bytes).unwrap(), key);
/// ```
pub struct SessionWindowed<K> {
    inner: Arc<dyn Serde<Value = K>>,
}

impl<K: Send + Sync + 'static> SessionWindowed<K> {
    /// Session-windowed keys of `inner`'s type.
    pub fn new<S: Serde<Value = K>>(inner: S) -> SessionWindowed<K> {
        SessionWindowed::shared(Arc::new(inner))
    }

    pub(crate) fn shared(inner: Arc<dyn Serde<Value = K>>) -> SessionWindowed<K> {
        SessionWindowed { inner }
    }
}

impl<K: Send + Sync + 'static> Serde for SessionWindowed<K> {
    type Value = Windowed<K>;
    fn name(&self) -> &'static str {
        "SessionWindowed"
    }
    fn serialize(&self, value: &Windowed<K>) -> Vec<u8> {
        let key = self.inner.serialize(&value.key);
        baton_runtime::topology::session_key(&key, value.window.start_ms, value.window.end_ms)
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<Windowed<K>, SerdeError> {
        let Some((key, start_ms, end_ms)) = baton_runtime::topology::split_session_key(bytes)
        else {
            return Err(SerdeError {
                serde: "SessionWindowed",
                why: format!(
                    "{} bytes, shorter than a session's end and start",
                    bytes.len()
                ),
            });
        };
        Ok(Windowed {
            key: self.inner.deserialize(key)?,
            window: Window { start_ms, end_ms },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_serdes_write_kafkas_bytes_and_refuse_other_lengths() {
        assert_eq!(Long.serialize(&1), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Integer.serialize(&-2), [0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(Double.serialize(&1.5), 1.5f64.to_bits().to_be_bytes());
        assert_eq!(Double.deserialize(&Double.serialize(&-0.25)), Ok(-0.25));
        let e = Long.deserialize(b"12").unwrap_err();
        assert_eq!(e.to_string(), "Long: 2 bytes where 8 were expected");
        assert!(Str
            .deserialize(&[0xff])
            .unwrap_err()
            .to_string()
            .starts_with("String: not UTF-8"));
        assert_eq!(Raw.deserialize(b"x"), Ok(b"x".to_vec()));
    }

    #[test]
    fn windowed_keys_need_their_window_start() {
        let serde = TimeWindowed::new(Long, Duration::from_millis(10));
        let e = serde.deserialize(b"1234567").unwrap_err();
        assert_eq!(
            e.to_string(),
            "TimeWindowed: 7 bytes, shorter than a window start"
        );
        let w = serde
            .deserialize(&[[0u8; 8], 5i64.to_be_bytes()].concat())
            .unwrap();
        assert_eq!(
            w.window,
            Window {
                start_ms: 5,
                end_ms: 15
            }
        );
        assert!(serde.deserialize(&[0u8; 9]).is_err(), "a 1-byte Long");
    }
}
