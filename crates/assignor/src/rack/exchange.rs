//! The min-cost exchange of actives between racks: least total traffic cost, every client
//! keeping its number of actives.
//!
//! KIP-925 states it as a min-cost flow over tasks × clients, where a client's capacity is
//! the number of actives the balanced assignment gave it. Two facts make it small:
//! - clients of one rack differ only by the non-overlap cost, which every move pays once;
//!   so moving a task within its rack never lowers the cost, and an optimum only moves tasks
//!   between racks. The flow shrinks to tasks × racks, with a rack's capacity the sum of its
//!   clients' (the tasks that leave a rack free exactly the slots the arrivals take);
//! - starting from the balanced assignment (a feasible flow), a flow is optimal when its
//!   residual graph has no negative cycle. Every residual cycle alternates racks and tasks, and
//!   the cheapest way from rack `a` to rack `b` is the task on `a` whose cost rises least by
//!   moving to `b`. So it suffices to cancel negative cycles on the racks alone, with those
//!   cheapest moves as edge weights (a simple cycle over racks uses distinct tasks).
//!
//! Each cancelled cycle lowers the integer total, so it ends; with `R` racks a round costs
//! `O(R³)` plus heap updates, whatever the number of clients.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::costs::{RackCosts, RackIx};
use crate::cluster::{ClientIx, TaskIx};

/// One active to place: its task, the client the balanced assignment gave it, a group
/// (clients keep their number of actives within each group), and racks it must not move to
/// (where its standbys are: a zone outage must not take both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub task: TaskIx,
    pub client: ClientIx,
    pub group: u32,
    pub blocked: Vec<RackIx>,
}

/// The cost of a blocked move: more than any cycle of allowed moves can save, so no negative
/// cycle uses one (costs are at most 10^6 per partition, see `MAX_RACK_COST`).
const BLOCKED: i64 = 1 << 50;

/// A bound on cancelled cycles, against pathological inputs: each cancels at least one unit of
/// cost, and in practice each item moves once or twice. Past it the result is still valid
/// (counts kept), only perhaps not the least cost.
const MAX_ROUNDS_PER_ITEM: usize = 8;

/// The client each item runs on after the exchange, in item order. Deterministic: ties go to
/// the lower item index.
pub fn exchange(costs: &RackCosts, items: &[Item]) -> Vec<ClientIx> {
    let mut out: Vec<ClientIx> = items.iter().map(|i| i.client).collect();
    if costs.rack_count() < 2 {
        return out;
    }
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        groups.entry(item.group).or_default().push(i);
    }
    for members in groups.values() {
        let group: Vec<Item> = members.iter().map(|&i| items[i].clone()).collect();
        for (&i, c) in members.iter().zip(solve(costs, &group)) {
            out[i] = c;
        }
    }
    out
}

/// A move of item `i` from the rack it is on: `(cost increase, item)`, least first.
type Moves = BinaryHeap<Reverse<(i64, usize)>>;

struct Solver<'a> {
    costs: &'a RackCosts,
    items: &'a [Item],
    racks: usize,
    home: Vec<RackIx>,
    at: Vec<RackIx>,
    /// Per rack: moves of its items to any rack where they read nothing locally and that is
    /// neither their home nor blocked (all such racks cost the same).
    generic: Vec<Moves>,
    /// Per (from, to): moves to a rack that is special for the item (a replica rack, its home,
    /// or a blocked one).
    special: Vec<Moves>,
}

impl Solver<'_> {
    fn cost(&self, i: usize, r: RackIx) -> i64 {
        let moved = if r == self.home[i] {
            0
        } else if self.items[i].blocked.contains(&r) {
            BLOCKED
        } else {
            self.costs.non_overlap
        };
        self.costs.traffic_on(self.items[i].task, r) + moved
    }

    /// The cost of item `i` on a rack that holds none of its partitions, is not its home and is
    /// not blocked.
    fn generic_cost(&self, i: usize) -> i64 {
        self.costs.traffic * self.costs.partitions(self.items[i].task) as i64
            + self.costs.non_overlap
    }

    /// Files item `i`'s moves away from the rack it is on now.
    fn file(&mut self, i: usize) {
        let a = self.at[i];
        let here = self.cost(i, a);
        let g = self.generic_cost(i) - here;
        self.generic[a as usize].push(Reverse((g, i)));
        let task = self.items[i].task;
        let home = self.home[i];
        let specials: Vec<RackIx> = self
            .costs
            .replica_racks(task)
            .chain(self.items[i].blocked.iter().copied())
            .chain(std::iter::once(home))
            .filter(|&b| b != a)
            .collect::<std::collections::BTreeSet<RackIx>>()
            .into_iter()
            .collect();
        for b in specials {
            let d = self.cost(i, b) - here;
            self.special[a as usize * self.racks + b as usize].push(Reverse((d, i)));
        }
    }

    /// The cheapest valid move in `heap` (entries of items that left are dropped).
    fn top(heap: &mut Moves, at: &[RackIx], from: RackIx) -> Option<(i64, usize)> {
        while let Some(&Reverse((d, i))) = heap.peek() {
            if at[i] == from {
                return Some((d, i));
            }
            heap.pop();
        }
        None
    }

    /// The cheapest move from `a` to `b`: `(cost increase, item)`.
    fn edge(&mut self, a: usize, b: usize) -> Option<(i64, usize)> {
        let special = Self::top(&mut self.special[a * self.racks + b], &self.at, a as RackIx);
        // The generic entries of items blocked from `b` understate their move there (their
        // special entry holds the true cost): set them aside while looking.
        let mut aside = Vec::new();
        let generic = loop {
            match Self::top(&mut self.generic[a], &self.at, a as RackIx) {
                Some((_, i)) if self.items[i].blocked.contains(&(b as RackIx)) => {
                    aside.extend(self.generic[a].pop());
                }
                top => break top,
            }
        };
        self.generic[a].extend(aside);
        match (special, generic) {
            // Otherwise a generic entry of a replica rack or home overstates the move there;
            // its special entry is at most that, so the minimum of the two heaps is exact.
            (Some(s), Some(g)) => Some(s.min(g)),
            (s, g) => s.or(g),
        }
    }

    /// A negative cycle over racks, as `(rack to move to, item)`, if there is one (Bellman-Ford from a virtual
    /// source joined to every rack).
    fn negative_cycle(&mut self) -> Option<Vec<(usize, usize)>> {
        let r = self.racks;
        let mut w: Vec<Option<(i64, usize)>> = vec![None; r * r];
        for a in 0..r {
            for b in 0..r {
                if a != b {
                    w[a * r + b] = self.edge(a, b);
                }
            }
        }
        let mut dist = vec![0i64; r];
        let mut parent = vec![usize::MAX; r];
        let mut last = None;
        for _ in 0..r {
            last = None;
            for a in 0..r {
                for b in 0..r {
                    if let Some((d, _)) = w[a * r + b] {
                        if dist[a] + d < dist[b] {
                            dist[b] = dist[a] + d;
                            parent[b] = a;
                            last = Some(b);
                        }
                    }
                }
            }
            last?;
        }
        // Still relaxing after `r` rounds: walk back `r` steps to land on the cycle.
        let mut x = last?;
        for _ in 0..r {
            x = parent[x];
            debug_assert!(x != usize::MAX, "the walk back stays on relaxed racks");
        }
        let mut cycle = Vec::new();
        let mut y = x;
        loop {
            let p = parent[y];
            cycle.push((y, w[p * r + y].expect("a parent edge exists").1));
            y = p;
            if y == x {
                break;
            }
        }
        Some(cycle)
    }
}

fn solve(costs: &RackCosts, items: &[Item]) -> Vec<ClientIx> {
    let racks = costs.rack_count();
    let home: Vec<RackIx> = items.iter().map(|i| costs.rack_of(i.client)).collect();
    let mut s = Solver {
        costs,
        items,
        racks,
        at: home.clone(),
        home,
        generic: (0..racks).map(|_| Moves::new()).collect(),
        special: (0..racks * racks).map(|_| Moves::new()).collect(),
    };
    for i in 0..items.len() {
        s.file(i);
    }
    let mut rounds = items.len() * MAX_ROUNDS_PER_ITEM;
    while let Some(cycle) = s.negative_cycle() {
        if rounds == 0 {
            break;
        }
        rounds -= 1;
        // The cycle's items were read before any of them moved: one per rack, so distinct.
        for (to, i) in cycle {
            s.at[i] = to as RackIx;
            s.file(i);
        }
    }
    realize(items, &s.home, &s.at, racks)
}

/// Clients for the rack-level result: items that stay keep their client; items that leave a
/// rack free their slots, which the items arriving there take in item order.
fn realize(items: &[Item], home: &[RackIx], at: &[RackIx], racks: usize) -> Vec<ClientIx> {
    let mut freed: Vec<std::collections::VecDeque<ClientIx>> = vec![Default::default(); racks];
    for (i, item) in items.iter().enumerate() {
        if at[i] != home[i] {
            freed[home[i] as usize].push_back(item.client);
        }
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if at[i] == home[i] {
                item.client
            } else {
                freed[at[i] as usize]
                    .pop_front()
                    .expect("a rack frees as many slots as it receives")
            }
        })
        .collect()
}
