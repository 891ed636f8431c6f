//! Plain-text tables whose columns fit their widest cell, whatever the labels.

/// The first column is left-aligned, the others right-aligned (they hold numbers), two
/// spaces apart. Every line ends with a newline and carries no trailing spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        debug_assert_eq!(row.len(), columns, "a row has one cell per column");
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_the_widest_cell() {
        let rows = vec![
            vec!["short".to_owned(), "1.0".to_owned()],
            vec![
                "a much longer label (x, y)".to_owned(),
                "12345.6".to_owned(),
            ],
        ];
        let text = render(&["RUN", "TIME s"], &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let ends: Vec<usize> = lines.iter().map(|l| l.len()).collect();
        assert!(ends.iter().all(|&e| e == ends[0]), "{text}");
        assert!(lines[1].starts_with("short "));
    }
}
