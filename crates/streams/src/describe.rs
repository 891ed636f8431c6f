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
}

impl Description {
    fn name(&mut self, kind: &str) -> Node {
        let n = self.counter;
        self.counter += 1;
        Node(format!("KSTREAM-{kind}-{n:010}"))
    }

    fn push(&mut self, at: usize, entry: Entry) -> Node {
        if self.subtopologies.len() <= at {
            self.subtopologies.resize_with(at + 1, Vec::new);
        }
        let name = entry.name.clone();
        self.subtopologies[at].push(entry);
        name
    }

    pub fn source(&mut self, at: usize, topic: &str) -> Node {
        let name = self.name("SOURCE");
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
        self.subtopologies[at]
            .last()
            .map(|e| e.name.clone())
            .unwrap_or_else(|| Node(String::new()))
    }

    /// A processor after `from`; `COUNT` is named `AGGREGATE`, as Kafka names it.
    pub fn processor(&mut self, at: usize, kind: &str, from: &Node, stores: &[&str]) -> Node {
        let kind = if kind == "COUNT" { "AGGREGATE" } else { kind };
        let name = self.name(kind);
        self.push(
            at,
            Entry {
                name,
                kind: Kind::Processor {
                    stores: stores.iter().map(|s| (*s).to_owned()).collect(),
                },
                from: vec![from.clone()],
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
        self.push(
            at,
            Entry {
                name,
                kind: Kind::Processor { stores: Vec::new() },
                from: from.iter().map(|n| (*n).clone()).collect(),
            },
        )
    }

    pub fn sink(&mut self, at: usize, topic: &str, from: &Node) -> Node {
        let name = self.name("SINK");
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

    /// A name of Kafka's form (`<kind>-<counter>`), for what the application did not name.
    pub fn generated_name(&mut self, kind: &str) -> String {
        let n = self.counter;
        self.counter += 1;
        format!("{kind}-{n:010}")
    }

    /// A store name of Kafka's form, for a store the application did not name.
    pub fn generated_store(&mut self) -> String {
        self.name("AGGREGATE-STATE-STORE").0
    }
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Topologies:")?;
        for (i, entries) in self.subtopologies.iter().enumerate() {
            writeln!(f, "   Sub-topology: {i}")?;
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
