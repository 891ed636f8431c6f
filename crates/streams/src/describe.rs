//! The topology as Kafka's `Topology.describe()` prints it: sub-topologies, sources,
//! processors with their stores, sinks, and the edges between them. Nodes are named as Kafka
//! Streams names them (`KSTREAM-SOURCE-0000000000`, a counter over the whole application).

use std::fmt;

/// A node's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node(String);

#[derive(Debug, Clone)]
enum Kind {
    Source { topic: String },
    Processor { stores: Vec<String> },
    Sink { topic: String },
}

#[derive(Debug, Clone)]
struct Entry {
    name: Node,
    kind: Kind,
    from: Vec<Node>,
}

/// What an application is made of, built alongside it.
#[derive(Debug, Clone, Default)]
pub struct Description {
    subtopologies: Vec<Vec<Entry>>,
    counter: u32,
    /// Each sub-topology's place in Kafka's numbering: the creation rank of its first source.
    ranks: Vec<u64>,
    /// Creation ranks taken so far.
    created: u64,
    /// Sub-topologies that are global tables' (no tasks).
    globals: Vec<usize>,
    /// Sub-topologies merged into another ([`Description::absorb`]): nodes added to them go
    /// to that one.
    forward: std::collections::BTreeMap<usize, usize>,
}

impl Description {
    /// The next name of Kafka's form, `<prefix><counter>` (`KSTREAM-SOURCE-0000000000`):
    /// `InternalStreamsBuilder.newProcessorName`. Kafka takes a number for every operation,
    /// named or not, in a fixed order per operation; callers follow that order, so that an
    /// application that names nothing gets Kafka's names for the same calls.
    pub fn next_name(&mut self, prefix: &str) -> Node {
        let n = self.counter;
        self.counter += 1;
        Node(format!("{prefix}{n:010}"))
    }

    /// Takes a number and names nothing with it, as Kafka does in places "for compatibility".
    pub fn burn(&mut self) {
        self.counter += 1;
    }

    fn name(&mut self, kind: &str) -> Node {
        self.next_name(&format!("KSTREAM-{kind}-"))
    }

    /// The next creation rank: sources (and tables) in the order the application made them.
    pub fn rank(&mut self) -> u64 {
        self.created += 1;
        self.created
    }

    /// Sub-topology `at` holds a source made at `rank` (a table read before its joining
    /// stream, say): it is numbered no later than that.
    pub fn rank_subtopology(&mut self, at: usize, rank: u64) {
        let at = self.at(at);
        if let Some(r) = self.ranks.get_mut(at) {
            *r = (*r).min(rank);
        }
    }

    /// Sub-topologies in Kafka's numbering: by their earliest source, in the order the
    /// application made them. Kafka writes its graph's nodes in creation order
    /// (`InternalStreamsBuilder.buildAndOptimizeTopology`) and numbers node groups as it meets
    /// them (`InternalTopologyBuilder.makeNodeGroups`), so a table read before the stream that
    /// joins it puts their sub-topology first.
    pub fn kafka_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.subtopologies.len())
            .filter(|&i| !self.subtopologies[i].is_empty())
            .collect();
        order.sort_by_key(|&i| (self.ranks.get(i).copied().unwrap_or(u64::MAX), i));
        order
    }

    /// Sub-topology `at` is a global table's: printed as Kafka prints a global store.
    pub fn mark_global(&mut self, at: usize) {
        self.globals.push(at);
    }

    /// Moves sub-topology `from`'s nodes into `into` (a merge or a join made them one); `from`
    /// is left empty and is numbered no more.
    pub fn absorb(&mut self, from: usize, into: usize) {
        let (from, into) = (self.at(from), self.at(into));
        if from == into {
            return;
        }
        self.forward.insert(from, into);
        let moved = std::mem::take(&mut self.subtopologies[from]);
        self.subtopologies[into].extend(moved);
        let rank = std::mem::replace(&mut self.ranks[from], u64::MAX);
        self.rank_subtopology(into, rank);
    }

    /// Sub-topology `at`, or the one it was merged into.
    fn at(&self, mut at: usize) -> usize {
        while let Some(&into) = self.forward.get(&at) {
            at = into;
        }
        at
    }

    fn push(&mut self, at: usize, entry: Entry) -> Node {
        let at = self.at(at);
        if self.subtopologies.len() <= at {
            self.subtopologies.resize_with(at + 1, Vec::new);
        }
        while self.ranks.len() <= at {
            let rank = self.rank();
            self.ranks.push(rank);
        }
        let name = entry.name.clone();
        self.subtopologies[at].push(entry);
        name
    }

    /// A source named `name`.
    pub fn add_source(&mut self, at: usize, name: Node, topic: &str) -> Node {
        self.push(
            at,
            Entry {
                name,
                kind: Kind::Source {
                    topic: topic.to_owned(),
                },
                from: Vec::new(),
            },
        )
    }

    /// Adds `topic` to the topics of sub-topology `at`'s first source.
    pub fn also_source(&mut self, at: usize, topic: &str) {
        let at = self.at(at);
        if let Some(Entry {
            kind: Kind::Source { topic: topics },
            ..
        }) = self.subtopologies.get_mut(at).and_then(|e| e.first_mut())
        {
            topics.push_str(", ");
            topics.push_str(topic);
        }
    }

    /// The last node of sub-topology `at`.
    pub fn last(&self, at: usize) -> Node {
        self.subtopologies[self.at(at)]
            .last()
            .map(|e| e.name.clone())
            .unwrap_or_else(|| Node(String::new()))
    }

    /// A processor with a generated name `KSTREAM-<kind>-<n>` after `from`.
    pub fn processor(&mut self, at: usize, kind: &str, from: &Node, stores: &[&str]) -> Node {
        let name = self.name(kind);
        self.add_processor(at, name, &[from], stores)
    }

    /// A processor named `name`, after every node of `from`.
    pub fn add_processor(
        &mut self,
        at: usize,
        name: Node,
        from: &[&Node],
        stores: &[&str],
    ) -> Node {
        self.push(
            at,
            Entry {
                name,
                kind: Kind::Processor {
                    stores: stores.iter().map(|s| (*s).to_owned()).collect(),
                },
                from: from.iter().map(|n| (*n).clone()).collect(),
            },
        )
    }

    /// A processor without a store named `name` (or a generated `KSTREAM-<kind>-<n>` name),
    /// after every node of `from`.
    pub fn named_processor(
        &mut self,
        at: usize,
        kind: &str,
        name: Option<&str>,
        from: &[&Node],
    ) -> Node {
        let name = match name {
            Some(n) => Node(n.to_owned()),
            None => self.name(kind),
        };
        self.add_processor(at, name, from, &[])
    }

    /// Lists `store` among processor `node`'s stores (a join's result kept in a store is the
    /// merge's).
    pub fn add_store(&mut self, node: &Node, store: &str) {
        if let Some(Entry {
            kind: Kind::Processor { stores },
            ..
        }) = self.entry(node)
        {
            stores.push(store.to_owned());
        }
    }

    /// `node` takes records from `from` too (a sink that two processors write to).
    pub fn add_parent(&mut self, node: &Node, from: &Node) {
        if let Some(e) = self.entry(node) {
            e.from.push(from.clone());
        }
    }

    /// The entry of `node`, in whichever sub-topology it is.
    fn entry(&mut self, node: &Node) -> Option<&mut Entry> {
        self.subtopologies
            .iter_mut()
            .flatten()
            .find(|e| &e.name == node)
    }

    /// A sink with a generated name.
    pub fn sink(&mut self, at: usize, topic: &str, from: &Node) -> Node {
        let name = self.name("SINK");
        self.add_sink(at, name, topic, from)
    }

    /// A sink named `name`.
    pub fn add_sink(&mut self, at: usize, name: Node, topic: &str, from: &Node) -> Node {
        self.push(
            at,
            Entry {
                name,
                kind: Kind::Sink {
                    topic: topic.to_owned(),
                },
                from: vec![from.clone()],
            },
        )
    }
}

impl Node {
    /// A name the application gave.
    pub fn named(name: &str) -> Node {
        Node(name.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Topologies:")?;
        for (i, at) in self.kafka_order().into_iter().enumerate() {
            let entries = &self.subtopologies[at];
            match self.globals.contains(&at) {
                true => writeln!(
                    f,
                    "   Sub-topology: {i} for global store (will not generate tasks)"
                )?,
                false => writeln!(f, "   Sub-topology: {i}")?,
            }
            for e in entries {
                let to: Vec<&str> = entries
                    .iter()
                    .filter(|n| n.from.contains(&e.name))
                    .map(|n| n.name.0.as_str())
                    .collect();
                match &e.kind {
                    Kind::Source { topic } => {
                        writeln!(f, "    Source: {} (topics: [{topic}])", e.name.0)?
                    }
                    Kind::Processor { stores } => writeln!(
                        f,
                        "    Processor: {} (stores: [{}])",
                        e.name.0,
                        stores.join(", ")
                    )?,
                    Kind::Sink { topic } => writeln!(f, "    Sink: {} (topic: {topic})", e.name.0)?,
                }
                if !to.is_empty() {
                    writeln!(f, "      --> {}", to.join(", "))?;
                }
                if !e.from.is_empty() {
                    let from: Vec<&str> = e.from.iter().map(|n| n.0.as_str()).collect();
                    writeln!(f, "      <-- {}", from.join(", "))?;
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
