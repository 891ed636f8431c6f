//! `split`: each record of a stream goes to the first branch whose predicate holds, as Kafka
//! Streams' `KStream.split()`. The branches stay in their stream's sub-topology: the records
//! reaching the split are evaluated once each (the stream's steps, then the predicates in
//! order), and every branch takes its share from that one evaluation.

use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use baton_runtime::topology::fork_epoch;

use crate::dsl::{Chain, KStream};

type Predicate<K, V> = Box<dyn Fn(&K, &V) -> bool + Send + Sync>;

/// The name of a branch: [`BranchedKStream::branch`].
pub struct Branched {
    name: Option<String>,
}

impl Branched {
    /// As Kafka's `Branched.as(name)`: the branch is `<split prefix><name>` in the map.
    pub fn named(name: &str) -> Branched {
        Branched {
            name: Some(name.to_owned()),
        }
    }

    /// Named by its position: `<split prefix>1` for the first branch, ... and
    /// `<split prefix>0` for the default branch, as Kafka Streams names them.
    pub fn generated() -> Branched {
        Branched { name: None }
    }
}

/// A stream being split: add branches with [`BranchedKStream::branch`], end with
/// [`BranchedKStream::default_branch`] or [`BranchedKStream::no_default_branch`].
pub struct BranchedKStream<K, V> {
    stream: KStream<K, V>,
    prefix: String,
    branches: Vec<(String, Option<Predicate<K, V>>)>,
}

/// The outputs of one record at one split: per branch, the records not taken yet.
type Shares<K, V> = Vec<Option<Vec<(K, V)>>>;

/// A split's evaluation of one record: the stream's steps, then the predicates.
type Evaluate<K, V> = dyn Fn(&[u8], &[u8]) -> Shares<K, V> + Send + Sync;

/// The shares of the record a split evaluated last, with the fork epoch it came in.
type Cached = (u64, Box<dyn Any>);

static NEXT_SPLIT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Per split: the fork epoch of the record last evaluated there, and its shares.
    static SHARES: RefCell<HashMap<usize, Cached>> = RefCell::new(HashMap::new());
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    /// Splits the stream: each record goes to the first branch whose predicate holds, or to
    /// the default branch, or nowhere. Branch names start with a generated prefix
    /// (`KSTREAM-BRANCH-<n>`); [`KStream::split_named`] gives one.
    pub fn split(self) -> BranchedKStream<K, V> {
        let prefix = self
            .graph
            .borrow_mut()
            .description
            .next_name("KSTREAM-BRANCH-");
        self.split_named(prefix.as_str())
    }

    /// As [`KStream::split`], the branches' names starting with `prefix` (Kafka's
    /// `split(Named.as(prefix))`).
    pub fn split_named(self, prefix: &str) -> BranchedKStream<K, V> {
        BranchedKStream {
            stream: self,
            prefix: prefix.to_owned(),
            branches: Vec::new(),
        }
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> BranchedKStream<K, V> {
    /// A branch for the records, not taken by an earlier branch, for which `predicate` holds.
    pub fn branch(
        mut self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        branched: Branched,
    ) -> Self {
        let name = self.name(branched, self.branches.len() + 1);
        self.branches.push((name, Some(Box::new(predicate))));
        // Kafka's `BranchedKStreamImpl.createBranch` takes a number for every branch.
        self.stream.graph.borrow_mut().description.burn();
        self
    }

    /// The branches by name, with a last branch for the records no other branch took.
    pub fn default_branch(mut self, branched: Branched) -> BTreeMap<String, KStream<K, V>> {
        let name = self.name(branched, 0);
        self.branches.push((name, None));
        self.stream.graph.borrow_mut().description.burn();
        self.finish()
    }

    /// The branches by name; records no branch took are dropped.
    pub fn no_default_branch(self) -> BTreeMap<String, KStream<K, V>> {
        self.finish()
    }

    fn name(&self, branched: Branched, position: usize) -> String {
        let name = branched.name.unwrap_or_else(|| position.to_string());
        format!("{}{name}", self.prefix)
    }

    fn finish(self) -> BTreeMap<String, KStream<K, V>> {
        let BranchedKStream {
            stream,
            prefix,
            branches,
        } = self;
        let mut g = stream.graph.borrow_mut();
        let fork = g.fork_at(&stream.at);
        let splitter =
            g.description
                .named_processor(stream.at.sub, "BRANCH", Some(&prefix), &[&stream.last]);
        let (names, predicates): (Vec<String>, Vec<Option<Predicate<K, V>>>) =
            branches.into_iter().unzip();
        let mut seen = std::collections::BTreeSet::new();
        for n in &names {
            if !seen.insert(n) {
                g.errors.push(format!("split: branch {n:?} is named twice"));
            }
        }
        let nodes: Vec<_> = names
            .iter()
            .map(|n| {
                g.description
                    .named_processor(stream.at.sub, "BRANCH", Some(n), &[&splitter])
            })
            .collect();
        drop(g);
        let parent = stream.chain;
        let evaluate = Arc::new(move |k: &[u8], v: &[u8]| -> Shares<K, V> {
            let mut shares: Shares<K, V> = predicates.iter().map(|_| Some(Vec::new())).collect();
            for (k, v) in parent(k, v) {
                let first = predicates
                    .iter()
                    .position(|p| p.as_ref().is_none_or(|p| p(&k, &v)));
                if let Some(share) = first.and_then(|i| shares[i].as_mut()) {
                    share.push((k, v));
                }
            }
            shares
        });
        let split = NEXT_SPLIT.fetch_add(1, Ordering::Relaxed);
        names
            .into_iter()
            .zip(nodes)
            .enumerate()
            .map(|(i, (name, last))| {
                let evaluate = evaluate.clone();
                let chain: Chain<K, V> =
                    Arc::new(move |k, v| share(split, fork, i, k, v, &*evaluate));
                let branch = KStream {
                    graph: stream.graph.clone(),
                    at: stream.at.clone(),
                    chain,
                    key_changed: stream.key_changed,
                    updates: stream.updates,
                    last,
                    deletes: None,
                };
                (name, branch)
            })
            .collect()
    }
}

/// Branch `i`'s share of the record that fork `fork` passes on now: from the evaluation an
/// earlier branch made of it, or from a new one (the borrow is not held while user code
/// runs, since a nested split evaluates this one).
fn share<K: 'static, V: 'static>(
    split: usize,
    fork: usize,
    i: usize,
    k: &[u8],
    v: &[u8],
    evaluate: &Evaluate<K, V>,
) -> Vec<(K, V)> {
    let epoch = fork_epoch(fork);
    let cached = SHARES.with(|m| {
        let mut m = m.borrow_mut();
        match m.get_mut(&split) {
            Some((e, shares)) if *e == epoch => shares
                .downcast_mut::<Shares<K, V>>()
                .map(|s| s.get_mut(i).and_then(Option::take).unwrap_or_default()),
            _ => None,
        }
    });
    if let Some(mine) = cached {
        return mine;
    }
    let mut shares = evaluate(k, v);
    let mine = shares.get_mut(i).and_then(Option::take).unwrap_or_default();
    SHARES.with(|m| {
        m.borrow_mut().insert(split, (epoch, Box::new(shares)));
    });
    mine
}
