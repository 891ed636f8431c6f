//! The target copy holders of every stateful task: at most `r` distinct clients per task.

use crate::cluster::{ClientIx, TaskIx};

const EMPTY: ClientIx = ClientIx::MAX;

/// A flat `tasks x r` table: no allocation per task, which matters at 50,000 tasks.
#[derive(Debug, Clone)]
pub struct Holders {
    r: usize,
    slots: Vec<ClientIx>,
    len: Vec<u8>,
}

impl Holders {
    pub fn new(tasks: usize, r: usize) -> Self {
        assert!(r < u8::MAX as usize, "replication factor {r} out of range");
        Self {
            r,
            slots: vec![EMPTY; tasks * r],
            len: vec![0; tasks],
        }
    }

    pub fn of(&self, task: TaskIx) -> &[ClientIx] {
        let start = task.ix() * self.r;
        &self.slots[start..start + self.len[task] as usize]
    }

    pub fn is_full(&self, task: TaskIx) -> bool {
        self.len[task] as usize >= self.r
    }

    pub fn contains(&self, task: TaskIx, client: ClientIx) -> bool {
        self.of(task).contains(&client)
    }

    /// Moves `task`'s copy from `from` to `to`.
    pub fn replace(&mut self, task: TaskIx, from: ClientIx, to: ClientIx) {
        debug_assert!(!self.contains(task, to));
        let start = task.ix() * self.r;
        let n = self.len[task] as usize;
        if let Some(slot) = self.slots[start..start + n]
            .iter_mut()
            .find(|c| **c == from)
        {
            *slot = to;
        }
    }

    pub fn add(&mut self, task: TaskIx, client: ClientIx) {
        debug_assert!(!self.is_full(task) && !self.contains(task, client));
        let n = self.len[task] as usize;
        self.slots[task.ix() * self.r + n] = client;
        self.len[task] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_fill_up_to_r() {
        let (t0, t1) = (TaskIx(0), TaskIx(1));
        let mut h = Holders::new(3, 2);
        h.add(t1, ClientIx(7));
        assert!(h.contains(t1, ClientIx(7)) && !h.is_full(t1));
        h.add(t1, ClientIx(4));
        assert_eq!(h.of(t1), &[ClientIx(7), ClientIx(4)]);
        assert!(h.is_full(t1));
        assert!(h.of(t0).is_empty());
    }
}
