//! Java's "modified UTF-8" (`DataOutput.writeUTF`): NUL as two bytes, and characters beyond
//! the Basic Multilingual Plane as two 3-byte surrogates. Hosts and topics in AssignmentInfo
//! use it.

pub fn encode(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for unit in s.encode_utf16() {
        let c = unit as u32;
        if (1..=0x7f).contains(&c) {
            out.push(c as u8);
        } else if c <= 0x7ff {
            out.push(0xc0 | (c >> 6) as u8);
            out.push(0x80 | (c & 0x3f) as u8);
        } else {
            out.push(0xe0 | (c >> 12) as u8);
            out.push(0x80 | ((c >> 6) & 0x3f) as u8);
            out.push(0x80 | (c & 0x3f) as u8);
        }
    }
    out
}

pub fn decode(b: &[u8]) -> Option<String> {
    let mut units = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let x = b[i] as u32;
        if x & 0x80 == 0 {
            if x == 0 {
                return None;
            }
            units.push(x as u16);
            i += 1;
        } else if x & 0xe0 == 0xc0 {
            let y = *b.get(i + 1)? as u32;
            if y & 0xc0 != 0x80 {
                return None;
            }
            units.push((((x & 0x1f) << 6) | (y & 0x3f)) as u16);
            i += 2;
        } else if x & 0xf0 == 0xe0 {
            let y = *b.get(i + 1)? as u32;
            let z = *b.get(i + 2)? as u32;
            if y & 0xc0 != 0x80 || z & 0xc0 != 0x80 {
                return None;
            }
            units.push((((x & 0x0f) << 12) | ((y & 0x3f) << 6) | (z & 0x3f)) as u16);
            i += 3;
        } else {
            return None;
        }
    }
    String::from_utf16(&units).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_java_for_ascii_nul_and_astral() {
        assert_eq!(encode("ab"), b"ab");
        assert_eq!(encode("\0"), [0xc0, 0x80]);
        assert_eq!(encode("é"), [0xc3, 0xa9]);
        // U+1F600 as the surrogates D83D DE00, 3 bytes each.
        assert_eq!(encode("😀"), [0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80]);
        for s in ["", "host-1.example", "\0x", "naïve", "😀 ok"] {
            assert_eq!(decode(&encode(s)).as_deref(), Some(s));
        }
        assert_eq!(decode(&[0x00]), None, "a raw NUL is not modified UTF-8");
        assert_eq!(decode(&[0xc3]), None);
    }
}
