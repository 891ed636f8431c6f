//! Word count, as Kafka's `WordCountDemo` writes it: lines (String values) split into words,
//! grouped by word through a repartition topic, counted; each new count written with the word
//! as its key (String) and the count as an 8-byte big-endian Long.
//!
//! ```sh
//! cargo run --release --example wordcount -- --bootstrap 127.0.0.1:9092 \
//!   --app-id wordcount --instance-id a --state-dir /tmp/wc-a --input lines --output word-counts
//! ```

use std::process::ExitCode;

use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, RunArgs, StreamsBuilder};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Word count on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Lines of text (String values).
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each word's new count: key the word (String), value the count (Long).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    baton_streams::main(args.run, "wordcount", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        builder
            .stream(&input, Consumed::with(Str, Str))
            .flat_map_values(|line: &String| split_words(&line.to_lowercase()))
            .group_by(
                |_, word: &String| word.clone(),
                Grouped::with(Str, Str).named("words"),
            )
            .count(Materialized::named("counts"))
            .to_stream()
            .to(&output, Produced::with(Str, Long));
        builder.build()
    })
}

/// Java's `line.split("\\W+")`, as `WordCountDemo` splits: runs of characters other than
/// `[A-Za-z0-9_]` separate words; a leading separator gives a leading empty word, trailing
/// empty words are dropped, and an empty line is one empty word.
fn split_words(line: &str) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut words: Vec<String> = line
        .split(|c: char| !is_word(c))
        .scan(false, |after_separator, w| {
            // Java keeps one empty word per separator *run* at the start only.
            let keep = !w.is_empty() || !*after_separator;
            *after_separator = true;
            Some(keep.then(|| w.to_owned()))
        })
        .flatten()
        .collect();
    if line.is_empty() {
        return vec![String::new()];
    }
    if words.len() == 1 && words[0].is_empty() && !line.is_empty() {
        // Only separators: Java gives no words at all.
        words.clear();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn splits_as_java_splits_on_non_word_runs() {
        let s = |l: &str| split_words(l);
        assert_eq!(s("hello world"), ["hello", "world"]);
        assert_eq!(s("  hello,, world!! "), ["", "hello", "world"]);
        assert_eq!(s("a-b_c"), ["a", "b_c"]);
        assert_eq!(s(""), [""]);
        assert!(s("!!").is_empty());
    }
}
