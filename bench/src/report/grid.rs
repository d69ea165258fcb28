//! One table, as aligned text for the terminal or as markdown for summary.md.

use std::fmt::Write as _;

/// Writes `rows` under `cols` with `title` above and the lines of `note` below: text
/// columns right-aligned but the first, or a markdown table.
pub fn grid(
    o: &mut String,
    title: &str,
    cols: &[&str],
    rows: &[Vec<String>],
    note: &str,
    markdown: bool,
) {
    if markdown {
        let _ = writeln!(o, "#### {title}\n");
        let _ = writeln!(o, "| {} |", cols.join(" | "));
        let _ = writeln!(
            o,
            "|{}",
            cols.iter()
                .enumerate()
                .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
                .collect::<String>()
        );
        for r in rows {
            let _ = writeln!(o, "| {} |", r.join(" | "));
        }
        // Each line of the note its own paragraph.
        for l in note.lines() {
            let _ = writeln!(o, "\n{l}");
        }
        let _ = writeln!(o);
        return;
    }
    let widths: Vec<usize> = (0..cols.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(cols[i].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = writeln!(
        o,
        "── {title} {}",
        "─".repeat(60usize.saturating_sub(title.len()))
    );
    let line = |o: &mut String, cells: &[String]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[i] - c.chars().count());
            if i == 0 {
                let _ = write!(l, "  {c}{pad}");
            } else {
                let _ = write!(l, "  {pad}{c}");
            }
        }
        let _ = writeln!(o, "{l}");
    };
    line(o, &cols.iter().map(|c| c.to_string()).collect::<Vec<_>>());
    for r in rows {
        line(o, r);
    }
    for l in note.lines() {
        let _ = writeln!(o, "  {l}");
    }
    let _ = writeln!(o);
}
