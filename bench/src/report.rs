//! Report sections: tables of medians and spreads, the bars of issue 6 with
//! their verdicts, the machine and the command; rendered as Markdown and JSON.

use serde::Serialize;
use serde_json::Value;

use crate::stats::Summary;

/// One bar of the issue and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// The bar, as the issue states it.
    pub bar: String,
    /// Met, missed, or not applicable (`None`).
    pub met: Option<bool>,
    /// The figures behind the verdict.
    pub detail: String,
}

impl Bar {
    /// A bar judged over `details.len()` comparisons, all of which `ok` covers:
    /// not applicable when nothing was compared (e.g. `--only kinformer`).
    pub fn compared(bar: impl Into<String>, ok: bool, details: &[String]) -> Bar {
        Bar {
            bar: bar.into(),
            met: (!details.is_empty()).then_some(ok),
            detail: if details.is_empty() {
                "nothing to compare in this run".into()
            } else {
                details.join("; ")
            },
        }
    }
}

/// A table: header and rows of cells.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Table {
    /// Caption above the table.
    pub caption: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(caption: &str, header: &[&str]) -> Self {
        Table {
            caption: caption.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row: one cell per column (checked in debug builds, which the
    /// quick-mode test runs).
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(
            cells.len(),
            self.header.len(),
            "row {cells:?} of table {:?}",
            self.caption
        );
        self.rows.push(cells);
    }
}

/// The result of one workload.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Section {
    /// Workload name (`sync`, `churn`, ...).
    pub workload: String,
    /// Heading.
    pub title: String,
    /// The issue whose bars the section judges.
    pub issue: u32,
    /// What was measured and how.
    pub method: Vec<String>,
    /// The tables.
    pub tables: Vec<Table>,
    /// The bars.
    pub bars: Vec<Bar>,
    /// Raw child reports, for anyone who wants more than the tables.
    pub raw: Vec<Value>,
}

/// A median with its range: `12.3 [11.9–13.0]`.
pub fn fmt_summary(s: &Summary, precision: usize) -> String {
    if s.n <= 1 {
        format!("{:.*}", precision, s.median)
    } else {
        format!(
            "{:.p$} [{:.p$}–{:.p$}]",
            s.median,
            s.min,
            s.max,
            p = precision
        )
    }
}

/// A byte count in MiB.
pub fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

/// `a / b`, formatted (— when `b` is 0).
pub fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 || !a.is_finite() || !b.is_finite() {
        "—".into()
    } else {
        format!("{:.2}×", a / b)
    }
}

/// The machine: cores, CPU model, memory, and the allocator of the run.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".to_string(), |(_, m)| m.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cores} cores ({model}), {mem_gib:.0} GiB memory, Linux, {}",
        crate::mem::ALLOCATOR
    )
}

impl Section {
    /// The section as Markdown.
    pub fn markdown(&self, command: &str, scale: &str) -> String {
        let mut md = String::new();
        md.push_str(&format!("### {}\n\n", self.title));
        md.push_str(&format!(
            "Command: `{command}` (scale `{scale}`). Machine: {}.\n\n",
            machine()
        ));
        for m in &self.method {
            md.push_str(&format!("{m}\n"));
        }
        if !self.method.is_empty() {
            md.push('\n');
        }
        for t in &self.tables {
            if !t.caption.is_empty() {
                md.push_str(&format!("{}\n\n", t.caption));
            }
            md.push_str(&format!("| {} |\n", t.header.join(" | ")));
            md.push_str(&format!(
                "|{}\n",
                t.header.iter().map(|_| "---|").collect::<String>()
            ));
            for r in &t.rows {
                md.push_str(&format!("| {} |\n", r.join(" | ")));
            }
            md.push('\n');
        }
        if !self.bars.is_empty() {
            md.push_str(&format!(
                "| Bar (issue {}) | Verdict | Figures |\n|---|---|---|\n",
                self.issue
            ));
            for b in &self.bars {
                let verdict = match b.met {
                    Some(true) => "met",
                    Some(false) => "**not met**",
                    None => "n/a",
                };
                md.push_str(&format!("| {} | {verdict} | {} |\n", b.bar, b.detail));
            }
            md.push('\n');
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_with_nothing_compared_is_not_applicable() {
        let none = Bar::compared("fast", true, &[]);
        assert_eq!(none.met, None);
        let missed = Bar::compared("fast", false, &["1 subscriber: 0.8×".to_string()]);
        assert_eq!(missed.met, Some(false));
        assert_eq!(missed.detail, "1 subscriber: 0.8×");
    }

    #[test]
    fn markdown_has_tables_and_bars() {
        let mut t = Table::new("caption", &["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        let s = Section {
            workload: "x".into(),
            title: "X".into(),
            issue: 6,
            method: vec!["how".into()],
            tables: vec![t],
            bars: vec![Bar {
                bar: "fast".into(),
                met: Some(false),
                detail: "slow".into(),
            }],
            raw: vec![],
        };
        let md = s.markdown("cmd", "quick");
        assert!(md.contains("| a | b |\n|---|---|\n| 1 | 2 |"), "{md}");
        assert!(md.contains("| fast | **not met** | slow |"), "{md}");
        assert_eq!(
            fmt_summary(&Summary::of([1.0, 2.0, 3.0]), 1),
            "2.0 [1.0–3.0]"
        );
        assert_eq!(ratio(1.0, 2.0), "0.50×");
    }
}
