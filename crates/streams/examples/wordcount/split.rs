//! The word split of Kafka's `WordCountDemo`; the end-to-end test checks it too.

/// Java's `line.split("\\W+")`, as `WordCountDemo` splits: runs of characters other than
/// `[A-Za-z0-9_]` separate words; a leading separator gives a leading empty word, trailing
/// empty words are dropped, and an empty line is one empty word.
pub fn split_words(line: &str) -> Vec<String> {
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
