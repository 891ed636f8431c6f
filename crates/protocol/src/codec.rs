//! Big-endian reading and writing with every declared length checked against the bytes left.

use std::fmt;

use baton_assignor::TaskId;

/// Which blob a decode error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blob {
    Subscription,
    Assignment,
}

impl fmt::Display for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Blob::Subscription => "subscription",
            Blob::Assignment => "assignment",
        })
    }
}

/// Bad bytes: what, where and why, e.g.
/// `assignment v7: standby task list at byte 58: length 2147483647 exceeds the 12 bytes that remain`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{blob}{}: {field} at byte {offset}: {problem}", version.map(|v| format!(" v{v}")).unwrap_or_default())]
pub struct DecodeError {
    pub blob: Blob,
    pub version: Option<i32>,
    pub field: &'static str,
    pub offset: usize,
    pub problem: String,
}

/// Something that cannot be written at the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{blob} v{version}: {problem}")]
pub struct EncodeError {
    pub blob: Blob,
    pub version: i32,
    pub problem: Unwritable,
}

/// Why a value cannot be written: a version or field the layout lacks, a value too large
/// for the field Kafka gives it, or parts that disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unwritable {
    #[error("can only write versions 1 to {0}")]
    Version(i32),
    #[error("{0} cannot be written at this version")]
    Field(&'static str),
    #[error("{0} entries do not fit an int32 length")]
    Entries(usize),
    #[error("string of {0} bytes is too long")]
    String(usize),
    #[error("string of {0} bytes exceeds Java's writeUTF limit of 65535")]
    JavaUtf(usize),
    #[error("{0} does not fit an int32")]
    Id(u32),
    #[error("topic_dictionary: index {0} appears twice")]
    DictionaryIndexTwice(i32),
    #[error("topic_dictionary: topic {0:?} appears twice")]
    DictionaryTopicTwice(String),
    #[error("topic_dictionary: topic {0:?} of a host map is not in it")]
    NotInDictionary(String),
}

impl EncodeError {
    /// Refuses a version we cannot write, or a field set where `version` cannot carry it.
    /// `fields` are `(versions that carry the field, whether it is set, its name)`.
    pub fn check(
        blob: Blob,
        version: i32,
        fields: &[(std::ops::RangeInclusive<i32>, bool, &'static str)],
    ) -> Result<(), EncodeError> {
        let fail = |problem: Unwritable| EncodeError {
            blob,
            version,
            problem,
        };
        if !(1..=crate::BATON_VERSION).contains(&version) {
            return Err(fail(Unwritable::Version(crate::BATON_VERSION)));
        }
        for (versions, set, name) in fields {
            if *set && !versions.contains(&version) {
                return Err(fail(Unwritable::Field(name)));
            }
        }
        Ok(())
    }
}

/// A cursor over untrusted bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    blob: Blob,
    version: Option<i32>,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], blob: Blob) -> Self {
        Self {
            buf,
            pos: 0,
            blob,
            version: None,
        }
    }

    pub fn set_version(&mut self, version: i32) {
        self.version = Some(version);
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn error(&self, field: &'static str, at: usize, problem: impl Into<String>) -> DecodeError {
        DecodeError {
            blob: self.blob,
            version: self.version,
            field,
            offset: at,
            problem: problem.into(),
        }
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(self.error(
                field,
                self.pos,
                format!("needs {n} bytes but {} remain", self.remaining()),
            ));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn i8(&mut self, field: &'static str) -> Result<i8, DecodeError> {
        Ok(self.take(field, 1)?[0] as i8)
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(field, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(self.u16(field)? as i16)
    }

    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        let b = self.take(field, 4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let b = self.take(field, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub fn uuid(&mut self, field: &'static str) -> Result<uuid::Uuid, DecodeError> {
        let b = self.take(field, 16)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(uuid::Uuid::from_bytes(a))
    }

    /// An `int32` element count, checked: `count * min_entry_bytes` must fit in what remains,
    /// so a short blob can never make us allocate for billions of entries.
    pub fn count(
        &mut self,
        field: &'static str,
        min_entry_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.i32(field)?;
        self.checked_len(field, at, n, min_entry_bytes)
    }

    /// A declared length `n` (read at `at`), checked against what remains.
    fn checked_len(
        &self,
        field: &'static str,
        at: usize,
        n: i32,
        min_entry_bytes: usize,
    ) -> Result<usize, DecodeError> {
        if n < 0 {
            return Err(self.error(field, at, format!("length {n} is negative")));
        }
        let n = n as usize;
        if n.saturating_mul(min_entry_bytes.max(1)) > self.remaining() {
            return Err(self.error(
                field,
                at,
                format!(
                    "length {n} exceeds the {} bytes that remain",
                    self.remaining()
                ),
            ));
        }
        Ok(n)
    }

    /// `int32` length then raw bytes (Kafka's `bytes`).
    pub fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.count(field, 1)?;
        self.take(field, n)
    }

    /// Kafka's nullable `bytes`: `int32` length (-1 = null) then raw bytes.
    pub fn nullable_bytes(&mut self, field: &'static str) -> Result<Option<&'a [u8]>, DecodeError> {
        let at = self.pos;
        let n = self.i32(field)?;
        if n == -1 {
            return Ok(None);
        }
        let n = self.checked_len(field, at, n, 1)?;
        self.take(field, n).map(Some)
    }

    /// `bytes` holding UTF-8 text.
    pub fn utf8_bytes(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let at = self.pos;
        let b = self.bytes(field)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.error(field, at, "is not valid UTF-8"))
    }

    /// Kafka's nullable `string`: `int16` length (-1 = null) then UTF-8.
    pub fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        let at = self.pos;
        let n = self.i16(field)?;
        if n == -1 {
            return Ok(None);
        }
        if n < 0 {
            return Err(self.error(field, at, format!("length {n} is negative")));
        }
        let b = self.take(field, n as usize)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| self.error(field, at, "is not valid UTF-8"))
    }

    /// Java's `DataInput.readUTF`: `uint16` length then modified UTF-8.
    pub fn java_utf(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let at = self.pos;
        let n = self.u16(field)? as usize;
        let b = self.take(field, n)?;
        crate::java_utf::decode(b)
            .ok_or_else(|| self.error(field, at, "is not valid modified UTF-8"))
    }

    /// A task id: `int32` subtopology, `int32` partition, and from v10 the named topology as
    /// `int32` char count plus UTF-16 chars. Named topologies are not supported.
    pub fn task_id(&mut self, field: &'static str, version: i32) -> Result<TaskId, DecodeError> {
        let at = self.pos;
        let sub = self.i32(field)?;
        let part = self.i32(field)?;
        if version >= 10 {
            let chars_at = self.pos;
            let chars = self.i32(field)?;
            if chars != 0 {
                return Err(self.error(
                    field,
                    chars_at,
                    format!("named topology of {chars} chars: named topologies are not supported"),
                ));
            }
        }
        if sub < 0 || part < 0 {
            return Err(self.error(
                field,
                at,
                format!("task {sub}_{part} has a negative number"),
            ));
        }
        Ok(TaskId::new(sub as u32, part as u32))
    }

    /// Everything must be consumed: trailing bytes mean a layout we do not understand.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() > 0 {
            return Err(self.error(
                "end",
                self.pos,
                format!("{} unexpected trailing bytes", self.remaining()),
            ));
        }
        Ok(())
    }
}

/// Builds a blob.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn i8(&mut self, v: i8) {
        self.buf.push(v as u8);
    }

    pub fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn uuid(&mut self, v: &uuid::Uuid) {
        self.buf.extend_from_slice(v.as_bytes());
    }

    pub fn len(&mut self, n: usize) -> Result<(), Unwritable> {
        let n = i32::try_from(n).map_err(|_| Unwritable::Entries(n))?;
        self.i32(n);
        Ok(())
    }

    pub fn bytes(&mut self, b: &[u8]) -> Result<(), Unwritable> {
        self.len(b.len())?;
        self.buf.extend_from_slice(b);
        Ok(())
    }

    pub fn nullable_string(&mut self, s: Option<&str>) -> Result<(), Unwritable> {
        match s {
            None => self.i16(-1),
            Some(s) => {
                let n = i16::try_from(s.len()).map_err(|_| Unwritable::String(s.len()))?;
                self.i16(n);
                self.buf.extend_from_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    pub fn java_utf(&mut self, s: &str) -> Result<(), Unwritable> {
        let b = crate::java_utf::encode(s);
        let n = u16::try_from(b.len()).map_err(|_| Unwritable::JavaUtf(b.len()))?;
        self.buf.extend_from_slice(&n.to_be_bytes());
        self.buf.extend_from_slice(&b);
        Ok(())
    }

    /// A subtopology or partition number, which Kafka holds in an `int32`.
    pub fn id(&mut self, v: u32) -> Result<(), Unwritable> {
        let v = i32::try_from(v).map_err(|_| Unwritable::Id(v))?;
        self.i32(v);
        Ok(())
    }

    pub fn task_id(&mut self, t: TaskId, version: i32) -> Result<(), Unwritable> {
        self.id(t.subtopology)?;
        self.id(t.partition)?;
        if version >= 10 {
            self.i32(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked_against_what_remains() {
        let bytes = [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut r = Reader::new(&bytes, Blob::Assignment);
        r.set_version(7);
        let e = r.count("standby task list", 8).unwrap_err();
        assert_eq!(
            e.to_string(),
            "assignment v7: standby task list at byte 0: length 2147483647 exceeds the 12 bytes that remain"
        );
    }

    #[test]
    fn short_reads_say_how_short() {
        let mut r = Reader::new(&[1, 2], Blob::Subscription);
        let e = r.i32("version").unwrap_err();
        assert_eq!(
            e.to_string(),
            "subscription: version at byte 0: needs 4 bytes but 2 remain"
        );
    }
}
