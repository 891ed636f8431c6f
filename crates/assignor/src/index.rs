//! Dense indices into the cluster's sorted tasks and clients: each its own type, so a task's
//! index never reads a client's slot, and vectors and slices are indexed by them directly.

use std::fmt;
use std::ops::{Index, IndexMut};

macro_rules! index_type {
    ($name:ident, $what:literal) => {
        #[doc = concat!("Index of a ", $what, " in the cluster's sorted ", $what, "s.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// Beyond every real index: a sentinel for "none".
            pub const MAX: $name = $name(u32::MAX);

            /// The index of position `i` in a vector of the cluster (which holds far fewer
            /// than `u32::MAX` entries).
            pub fn new(i: usize) -> $name {
                debug_assert!(i < u32::MAX as usize);
                $name(i as u32)
            }

            /// The position it names.
            pub fn ix(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl<T> Index<$name> for [T] {
            type Output = T;
            fn index(&self, i: $name) -> &T {
                &self[i.ix()]
            }
        }

        impl<T> IndexMut<$name> for [T] {
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.ix()]
            }
        }

        impl<T> Index<$name> for Vec<T> {
            type Output = T;
            fn index(&self, i: $name) -> &T {
                &self[i.ix()]
            }
        }

        impl<T> IndexMut<$name> for Vec<T> {
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.ix()]
            }
        }
    };
}

index_type!(TaskIx, "task");
index_type!(ClientIx, "client");

/// Every index of a vector of `n` entries, in order.
pub fn indices<I: From<u32>>(n: usize) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator {
    (0..n as u32).map(I::from)
}

impl From<u32> for TaskIx {
    fn from(i: u32) -> TaskIx {
        TaskIx(i)
    }
}

impl From<u32> for ClientIx {
    fn from(i: u32) -> ClientIx {
        ClientIx(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_and_slices_are_indexed_by_either_type() {
        let mut v = vec![10, 20, 30];
        v[TaskIx(1)] += 1;
        let s: &[i32] = &v;
        assert_eq!((s[TaskIx(1)], v[ClientIx(2)]), (21, 30));
        let all: Vec<ClientIx> = indices(3).collect();
        assert_eq!(all, [ClientIx(0), ClientIx(1), ClientIx(2)]);
        assert!(ClientIx::MAX > ClientIx(7));
    }
}
