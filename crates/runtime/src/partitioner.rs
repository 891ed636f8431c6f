//! Kafka's default partitioner for keyed records: `murmur2(key) & 0x7fffffff % partitions`.
//! Producers and the runtime agree on it, so a key always lands in the same task, and records
//! written by Java clients land where Baton expects them.

/// The partition of `key` among `partitions` (which must be positive).
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    debug_assert!(partitions > 0, "a topic has at least one partition");
    (murmur2(key) & 0x7fff_ffff) as u32 % partitions.max(1)
}

/// Kafka's `Utils.murmur2`: MurmurHash2, 32-bit, seed `0x9747b28c`, little-endian words.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= (b as u32) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafkas_murmur2_vectors() {
        // From Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{:?}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        for i in 0..1000 {
            let key = format!("key-{i}");
            let p = partition_for(key.as_bytes(), 7);
            assert!(p < 7);
            assert_eq!(p, partition_for(key.as_bytes(), 7));
        }
    }
}
