//! Emptied lists of records, kept per thread for [`super::run_steps`]: a record's way through
//! its steps takes its lists from here and gives them back, so it allocates none of its own
//! (callgrind: 600,000 allocations in `run_steps` and `process_from` for 200,000 records of
//! count per key, before).

use std::cell::RefCell;

use super::StreamRecord;

/// Lists kept at most: enough for a record's nesting (junctions and forks each take two more).
const KEPT: usize = 16;
/// A list grown past this many records is dropped rather than kept, so a rare record that
/// fanned out wide does not hold its memory for the thread's life.
const KEPT_CAPACITY: usize = 1_024;

thread_local! {
    static LISTS: RefCell<Vec<Vec<StreamRecord>>> = const { RefCell::new(Vec::new()) };
}

/// An empty list, one given back before if there is one.
pub(super) fn take() -> Vec<StreamRecord> {
    LISTS.with(|l| l.borrow_mut().pop()).unwrap_or_default()
}

/// A list holding only `r`.
pub(super) fn one(r: StreamRecord) -> Vec<StreamRecord> {
    let mut list = take();
    list.push(r);
    list
}

/// Gives `list` back, emptied. A list a panic unwound past is never given back: it is dropped.
pub(super) fn give(mut list: Vec<StreamRecord>) {
    if list.capacity() == 0 || list.capacity() > KEPT_CAPACITY {
        return;
    }
    list.clear();
    LISTS.with(|l| {
        let mut lists = l.borrow_mut();
        if lists.len() < KEPT {
            lists.push(list);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_given_back_is_taken_again_empty_and_wide_ones_are_dropped() {
        let list = one(StreamRecord::new(b"k".to_vec(), b"v".to_vec(), 1));
        let at = list.as_ptr();
        give(list);
        let again = take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), at, "the same allocation, reused");
        let mut wide = again;
        wide.reserve(KEPT_CAPACITY * 2);
        give(wide);
        assert_eq!(take().capacity(), 0, "a wide list is not kept");
        for _ in 0..KEPT * 2 {
            give(Vec::with_capacity(1));
        }
        assert_eq!(
            LISTS.with(|l| l.borrow().len()),
            KEPT,
            "the pool is bounded"
        );
    }
}
