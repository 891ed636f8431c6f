//! A small min-cost flow (successive shortest paths with a queue-based Bellman-Ford), for the
//! few places where a greedy choice is not good enough and the graph is small.

use std::collections::VecDeque;

struct Edge {
    to: usize,
    cap: i64,
    cost: i64,
}

pub struct Network {
    edges: Vec<Edge>,
    out: Vec<Vec<usize>>,
}

impl Network {
    pub fn new(nodes: usize) -> Network {
        Network {
            edges: Vec::new(),
            out: vec![Vec::new(); nodes],
        }
    }

    /// Adds an edge and its residual twin; returns the edge's id, for [`Network::flow_on`].
    pub fn add(&mut self, from: usize, to: usize, cap: i64, cost: i64) -> usize {
        let id = self.edges.len();
        self.edges.push(Edge { to, cap, cost });
        self.out[from].push(id);
        self.edges.push(Edge {
            to: from,
            cap: 0,
            cost: -cost,
        });
        self.out[to].push(id + 1);
        id
    }

    /// The flow on edge `id`: what its twin can send back.
    pub fn flow_on(&self, id: usize) -> i64 {
        self.edges[id + 1].cap
    }

    /// Sends as much as it can from `source` to `sink`, cheapest paths first; returns the flow.
    /// Costs may be negative as long as the graph has no negative cycle to start with.
    pub fn min_cost_max_flow(&mut self, source: usize, sink: usize) -> i64 {
        let n = self.out.len();
        let mut total = 0;
        loop {
            let mut dist = vec![i64::MAX; n];
            let mut via = vec![usize::MAX; n];
            let mut queued = vec![false; n];
            let mut queue = VecDeque::from([source]);
            dist[source] = 0;
            while let Some(u) = queue.pop_front() {
                queued[u] = false;
                for &e in &self.out[u] {
                    let edge = &self.edges[e];
                    if edge.cap > 0 && dist[u] + edge.cost < dist[edge.to] {
                        dist[edge.to] = dist[u] + edge.cost;
                        via[edge.to] = e;
                        if !queued[edge.to] {
                            queued[edge.to] = true;
                            queue.push_back(edge.to);
                        }
                    }
                }
            }
            if dist[sink] == i64::MAX {
                return total;
            }
            let mut push = i64::MAX;
            let mut at = sink;
            while at != source {
                let e = via[at];
                push = push.min(self.edges[e].cap);
                at = self.edges[e ^ 1].to;
            }
            let mut at = sink;
            while at != source {
                let e = via[at];
                self.edges[e].cap -= push;
                self.edges[e ^ 1].cap += push;
                at = self.edges[e ^ 1].to;
            }
            total += push;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_cheap_path_first() {
        // 0 -> 1 -> 3 costs 5, 0 -> 2 -> 3 costs -1; one unit fits through the middle.
        let mut n = Network::new(4);
        let a = n.add(0, 1, 1, 0);
        let b = n.add(0, 2, 1, 0);
        n.add(1, 3, 1, 5);
        n.add(2, 3, 1, -1);
        assert_eq!(n.min_cost_max_flow(0, 3), 2);
        assert_eq!((n.flow_on(a), n.flow_on(b)), (1, 1));
        let mut n = Network::new(4);
        n.add(0, 1, 1, 0);
        let b = n.add(0, 2, 1, 0);
        let shared = n.add(1, 3, 0, 0);
        n.add(2, 3, 1, -1);
        assert_eq!(n.min_cost_max_flow(0, 3), 1);
        assert_eq!((n.flow_on(b), n.flow_on(shared)), (1, 0));
    }
}
