//! Kafka Streams' foreign-key table join (KIP-213, `KTable.join(other, foreignKeyExtractor,
//! joiner)`): a row of the left table subscribes to the row of the right table its foreign
//! key names, through two topics Baton makes and owns.
//!
//! 1. [`ForeignKeyStep::Subscribe`] (after the left table's updates): each update sends a
//!    subscription, keyed by the foreign key, to the registration topic (co-partitioned with
//!    the right table): its primary key, its partition, the instruction Kafka's
//!    `SubscriptionSendProcessorSupplier` gives, and the 128-bit hash of the new value.
//! 2. [`ForeignKeyStep::Receive`] (reading the registration topic beside the right table):
//!    keeps the subscription in the subscription store under [`combined_key`], and answers it
//!    with the right row of its foreign key, to the response topic, to the left row's partition.
//! 3. [`ForeignKeyStep::ForeignUpdate`] (after the right table's updates): answers every
//!    subscription to the updated key (a prefix scan of the subscription store).
//! 4. [`ForeignKeyStep::Resolve`] (reading the response topic beside the left table): joins an
//!    answer with the left row if the row's hash is still the one it asked with; a stale
//!    answer (the row changed since) is dropped.
//!
//! Every byte is Kafka's: `SubscriptionWrapper` v1, `SubscriptionResponseWrapper` v0,
//! `CombinedKeySchema`, its `Murmur3.hash128` (seed 104729), and the subscription store's
//! values timestamped, as its changelog is.

use std::sync::Arc;

use baton_assignor::TaskId;
use bytes::Bytes;

use super::{read_timestamped, row_pair, stored_value, Stores, StreamRecord};
use crate::layout::timestamped;
use crate::record::undecodable;
use crate::store::StoreError;

/// A left value's bytes → its foreign key's bytes; `None`: no foreign key (Kafka's null).
pub type ForeignKeyFn = Arc<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// One of the four steps of a foreign-key join.
pub enum ForeignKeyStep {
    /// Kafka's `SubscriptionSendProcessorSupplier`: the left table's update (its new and old
    /// values) as subscriptions keyed by foreign key; `left`: a left join's instructions.
    Subscribe {
        foreign_key: ForeignKeyFn,
        left: bool,
    },
    /// Kafka's `SubscriptionReceiveProcessorSupplier` then `SubscriptionJoinProcessorSupplier`:
    /// keeps the subscription in `subscriptions` and answers it with the row of `foreign` (the
    /// right table's timestamped store).
    Receive {
        subscriptions: String,
        foreign: String,
    },
    /// Kafka's `ForeignTableJoinProcessorSupplier`: the right table's update answers each of
    /// its subscriptions.
    ForeignUpdate { subscriptions: String },
    /// Kafka's `ResponseJoinProcessorSupplier`: an answer joined with the left row of
    /// `primary` (its timestamped store) when their hashes agree, passed on as a
    /// [`super::row_pair`] (the typed layer's joiner reads it) or as a delete.
    Resolve { primary: String, left: bool },
}

impl ForeignKeyStep {
    /// The stores the step keeps (not those it only reads).
    pub(super) fn kept_store(&self) -> Option<&str> {
        match self {
            ForeignKeyStep::Receive { subscriptions, .. }
            | ForeignKeyStep::ForeignUpdate { subscriptions } => Some(subscriptions),
            _ => None,
        }
    }

    /// Whether the step's records leave with other keys than they came with.
    pub(super) fn changes_keys(&self) -> bool {
        !matches!(self, ForeignKeyStep::Resolve { .. })
    }
}

/// Kafka's `Murmur3.DEFAULT_SEED`.
const SEED: i32 = 104_729;
/// `SubscriptionWrapper.CURRENT_VERSION`.
const SUBSCRIPTION_VERSION: u8 = 1;
/// `SubscriptionResponseWrapper.CURRENT_VERSION`.
const RESPONSE_VERSION: u8 = 0;
/// The flag of a version byte that says no hash follows.
const NO_HASH: u8 = 0x80;

/// What a subscription asks the right side to do (Kafka's `SubscriptionWrapper.Instruction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instruction {
    /// Forget the subscription; answer nothing.
    DeleteKeyNoPropagate = 0,
    /// Forget the subscription; answer with no row.
    DeleteKeyAndPropagate = 1,
    /// Keep it; answer with the row, or with no row if there is none.
    PropagateNullIfNoFkVal = 2,
    /// Keep it; answer only if there is a row.
    PropagateOnlyIfFkVal = 3,
}

impl Instruction {
    fn from_byte(b: u8) -> Option<Instruction> {
        Some(match b {
            0 => Instruction::DeleteKeyNoPropagate,
            1 => Instruction::DeleteKeyAndPropagate,
            2 => Instruction::PropagateNullIfNoFkVal,
            3 => Instruction::PropagateOnlyIfFkVal,
            _ => return None,
        })
    }
}

/// A subscription as it travels and is kept (Kafka's `SubscriptionWrapper`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription<'a> {
    pub hash: Option<[i64; 2]>,
    pub instruction: Instruction,
    pub primary_key: &'a [u8],
    /// The left row's partition (version 1); `None` in version 0, answered by key hash.
    pub primary_partition: Option<i32>,
}

/// Kafka's `Murmur3.hash128` of `data` with its default seed: what a subscription carries of
/// the left value, to tell a current answer from a stale one.
pub fn murmur3_hash128(data: &[u8]) -> [i64; 2] {
    hash128_seeded(data, SEED)
}

fn hash128_seeded(data: &[u8], seed: i32) -> [i64; 2] {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    let mix1 = |k: u64| k.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    let mix2 = |k: u64| k.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    // Java sign-extends the int seed into both longs.
    let (mut h1, mut h2) = (i64::from(seed) as u64, i64::from(seed) as u64);
    let blocks = data.chunks_exact(16);
    let tail = blocks.remainder();
    for block in blocks {
        h1 ^= mix1(word(&block[..8]));
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix2(word(&block[8..]));
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    if tail.len() > 8 {
        h2 ^= mix2(word(&tail[8..]));
    }
    if !tail.is_empty() {
        h1 ^= mix1(word(&tail[..tail.len().min(8)]));
    }
    // Java's `h ^= length` on a long: the int length sign-extended.
    let len = i64::from(data.len() as i32) as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    [h1 as i64, h2 as i64]
}

fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A subscription's bytes, version 1 (Kafka's `SubscriptionWrapperSerde`): the version (its
/// top bit set when there is no hash), the instruction, the hash's two longs, the primary key,
/// then the partition as a 4-byte int.
pub fn subscription_bytes(
    hash: Option<[i64; 2]>,
    instruction: Instruction,
    primary_key: &[u8],
    primary_partition: i32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(22 + primary_key.len());
    out.push(match hash {
        Some(_) => SUBSCRIPTION_VERSION,
        None => SUBSCRIPTION_VERSION | NO_HASH,
    });
    out.push(instruction as u8);
    push_hash(&mut out, hash);
    out.extend_from_slice(primary_key);
    out.extend_from_slice(&primary_partition.to_be_bytes());
    out
}

fn push_hash(out: &mut Vec<u8>, hash: Option<[i64; 2]>) {
    if let Some([a, b]) = hash {
        out.extend_from_slice(&a.to_be_bytes());
        out.extend_from_slice(&b.to_be_bytes());
    }
}

/// A wrapper's hash after its version byte `head` (none when its top bit is set), and the
/// bytes after it.
fn read_hash(head: u8, rest: &[u8]) -> Option<(Option<[i64; 2]>, &[u8])> {
    if head & NO_HASH != 0 {
        return Some((None, rest));
    }
    let (hash, rest) = rest.split_at_checked(16)?;
    let long = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    Some((Some([long(&hash[..8]), long(&hash[8..])]), rest))
}

/// What is wrong with a wrapper's bytes, said once for both kinds.
fn bad_bytes(what: &str, bytes: &[u8], why: &str) -> String {
    format!("a foreign-key join {what} of {} bytes: {why}", bytes.len())
}

/// A subscription read from its bytes (versions 0 and 1), or what is wrong with them.
pub fn read_subscription(bytes: &[u8]) -> Result<Subscription<'_>, String> {
    let bad = |why: &str| bad_bytes("subscription", bytes, why);
    let (&head, rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
    let (&instruction, rest) = rest.split_first().ok_or_else(|| bad("no instruction"))?;
    let instruction = Instruction::from_byte(instruction)
        .ok_or_else(|| bad(&format!("unknown instruction {instruction}")))?;
    let (hash, rest) = read_hash(head, rest).ok_or_else(|| bad("a hash cut short"))?;
    let (primary_key, primary_partition) = match head & !NO_HASH {
        0 => (rest, None),
        1 => {
            let at = rest
                .len()
                .checked_sub(4)
                .ok_or_else(|| bad("no partition"))?;
            let (pk, p) = rest.split_at(at);
            (pk, Some(i32::from_be_bytes(p.try_into().expect("4 bytes"))))
        }
        v => {
            return Err(bad(&format!(
                "version {v}, newer than this Baton reads (1)"
            )))
        }
    };
    Ok(Subscription {
        hash,
        instruction,
        primary_key,
        primary_partition,
    })
}

/// An answer's bytes (Kafka's `SubscriptionResponseWrapperSerde`, version 0): the version
/// (top bit set without a hash), the hash, then the right value, absent for none.
pub fn response_bytes(hash: Option<[i64; 2]>, foreign: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + foreign.map_or(0, <[u8]>::len));
    out.push(match hash {
        Some(_) => RESPONSE_VERSION,
        None => RESPONSE_VERSION | NO_HASH,
    });
    push_hash(&mut out, hash);
    out.extend_from_slice(foreign.unwrap_or_default());
    out
}

/// An answer: the hash of the left value it answers, and the right value, if any.
pub type Response<'a> = (Option<[i64; 2]>, Option<&'a [u8]>);

/// An answer's hash and right value; as Kafka reads it, an empty value is none.
pub fn read_response(bytes: &[u8]) -> Result<Response<'_>, String> {
    let bad = |why: &str| bad_bytes("response", bytes, why);
    let (&head, rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
    let (hash, rest) = read_hash(head, rest).ok_or_else(|| bad("a hash cut short"))?;
    let version = head & !NO_HASH;
    if version != RESPONSE_VERSION {
        return Err(bad(&format!("version {version}, this Baton reads 0")));
    }
    Ok((hash, (!rest.is_empty()).then_some(rest)))
}

/// The subscription store's key (Kafka's `CombinedKeySchema.toBytes`): the foreign key's
/// length as a 4-byte int, the foreign key, then the primary key.
pub fn combined_key(foreign_key: &[u8], primary_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + foreign_key.len() + primary_key.len());
    out.extend_from_slice(&(foreign_key.len() as u32).to_be_bytes());
    out.extend_from_slice(foreign_key);
    out.extend_from_slice(primary_key);
    out
}

/// The foreign and primary key of a [`combined_key`].
pub fn split_combined_key(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = key.split_at_checked(4)?;
    let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
    rest.split_at_checked(len)
}

/// One record through a foreign-key join step.
pub(super) fn run(
    step: &ForeignKeyStep,
    task: TaskId,
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    match step {
        ForeignKeyStep::Subscribe { foreign_key, left } => {
            subscribe((foreign_key, *left), task, r, next);
            Ok(())
        }
        ForeignKeyStep::Receive {
            subscriptions,
            foreign,
        } => receive((subscriptions, foreign), r, stores, next),
        ForeignKeyStep::ForeignUpdate { subscriptions } => {
            foreign_update(subscriptions, r, stores, next)
        }
        ForeignKeyStep::Resolve { primary, left } => resolve((primary, *left), r, stores, next),
    }
}

/// Kafka's `leftJoinInstructions` and `defaultJoinInstructions`. A record without a foreign
/// key goes on with an empty key, as Baton reads a record without a key.
fn subscribe(
    (foreign_key, left): (&ForeignKeyFn, bool),
    task: TaskId,
    r: StreamRecord,
    next: &mut Vec<StreamRecord>,
) {
    use Instruction::*;
    let hash = r.value.as_deref().map(murmur3_hash128);
    let old_fk = r.old.as_deref().map(|v| foreign_key(v));
    let new_fk = r.value.as_deref().map(|v| foreign_key(v));
    let mut send = |fk: Option<Vec<u8>>, instruction| {
        let value = subscription_bytes(hash, instruction, &r.key, task.partition as i32);
        next.push(StreamRecord::new(
            fk.unwrap_or_default(),
            value,
            r.timestamp,
        ));
    };
    match (old_fk, new_fk) {
        (Some(old), new) if left => {
            let new = new.flatten();
            if old.is_some() && old != new {
                send(old, DeleteKeyAndPropagate);
            }
            send(new, PropagateNullIfNoFkVal);
        }
        (None, Some(new)) if left => send(new, PropagateNullIfNoFkVal),
        // Kafka's inner join skips (and logs) an update whose foreign key is null.
        (Some(None), _) | (_, Some(None)) => {
            tracing::debug!(
                partition = task.partition,
                "a foreign-key join skips a row without a foreign key"
            );
        }
        (Some(Some(old)), Some(Some(new))) => {
            if old != new {
                send(Some(old), DeleteKeyNoPropagate);
            }
            send(Some(new), PropagateNullIfNoFkVal);
        }
        (Some(Some(old)), None) => send(Some(old), DeleteKeyAndPropagate),
        (None, Some(Some(new))) => send(Some(new), PropagateOnlyIfFkVal),
        (None, None) => {}
    }
}

/// A subscription's bytes, or the record ends as undecodable.
fn subscription_of(value: &[u8]) -> Subscription<'_> {
    read_subscription(value).unwrap_or_else(|why| undecodable(why))
}

/// An answer to the row `primary_key` asked from `partition`, stamped `ts`.
fn answer(
    primary_key: &[u8],
    (hash, foreign): (Option<[i64; 2]>, Option<&[u8]>),
    partition: Option<i32>,
    ts: i64,
) -> StreamRecord {
    let mut r = StreamRecord::new(primary_key.to_vec(), response_bytes(hash, foreign), ts);
    r.partition = partition.and_then(|p| u32::try_from(p).ok());
    r
}

fn receive(
    (subscriptions, foreign): (&str, &str),
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    use Instruction::*;
    let Some(value) = r.value.as_deref() else {
        return Ok(());
    };
    let s = subscription_of(value);
    let no_fk = r.key.is_empty();
    if no_fk && s.instruction != PropagateNullIfNoFkVal {
        return Ok(());
    }
    if !no_fk {
        let key = combined_key(&r.key, s.primary_key);
        match s.instruction {
            DeleteKeyAndPropagate | DeleteKeyNoPropagate => stores.delete(subscriptions, &key),
            _ => stores.put(subscriptions, &key, timestamped(r.timestamp, value)),
        }
    }
    let row = match no_fk {
        true => None,
        false => stores.get(foreign, &r.key)?,
    };
    let row = row.as_deref().map(|row| read_timestamped(foreign, row));
    let ts = row.map_or(r.timestamp, |(t, _)| t.max(r.timestamp));
    let row = row.map(|(_, v)| v);
    let reply = |foreign| answer(s.primary_key, (s.hash, foreign), s.primary_partition, ts);
    match s.instruction {
        DeleteKeyAndPropagate => next.push(reply(None)),
        PropagateNullIfNoFkVal => next.push(reply(row)),
        PropagateOnlyIfFkVal if row.is_some() => next.push(reply(row)),
        PropagateOnlyIfFkVal | DeleteKeyNoPropagate => {}
    }
    Ok(())
}

/// The last key a prefix scan of `prefix` reads to (those after it that match are checked).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xFF: no key sorts after the prefix's own that does not start with it.
    let mut end = prefix.to_vec();
    end.resize(prefix.len() + 4096, u8::MAX);
    end
}

fn foreign_update(
    subscriptions: &str,
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    if r.key.is_empty() {
        return Ok(());
    }
    let prefix = combined_key(&r.key, &[]);
    for (key, stored) in stores.range(subscriptions, &prefix, &prefix_end(&prefix))? {
        let Some((fk, pk)) = split_combined_key(&key) else {
            continue;
        };
        if fk != r.key.as_ref() {
            continue;
        }
        let (_, value) = read_timestamped(subscriptions, &stored);
        let s = subscription_of(value);
        let foreign = r.value.as_deref();
        next.push(answer(
            pk,
            (s.hash, foreign),
            s.primary_partition,
            r.timestamp,
        ));
    }
    Ok(())
}

fn resolve(
    (primary, left): (&str, bool),
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let Some(value) = r.value.as_deref() else {
        return Ok(());
    };
    let (hash, foreign) = read_response(value).unwrap_or_else(|why| undecodable(why));
    let current: Option<Bytes> = stored_value(primary, stores.get(primary, &r.key)?);
    if hash != current.as_deref().map(murmur3_hash128) {
        // The row changed since it asked: a later answer is on its way.
        return Ok(());
    }
    let joined = match (foreign, &current) {
        (None, _) if !left || current.is_none() => None,
        (foreign, current) => Some(row_pair(current.as_deref(), foreign)),
    };
    next.push(StreamRecord {
        key: r.key,
        value: joined.map(Bytes::from),
        timestamp: r.timestamp,
        old: None,
        partition: None,
    });
    Ok(())
}

#[cfg(test)]
mod tests;
