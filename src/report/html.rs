//! The page: static HTML for the numbers (readable with scripts off, and what the browser test
//! reads), and the charts drawn as SVG by the inlined `report.js` from the embedded JSON.

use std::fmt::Write;

use serde_json::Value;

use super::Report;

const STYLE: &str = include_str!("report.css");
const SCRIPT: &str = include_str!("report.js");

/// The statistics' counts the cost table shows, as JSON pointers (absent ones are left out).
const COUNTS: [&str; 11] = [
    "/hooked_calls",
    "/events/malloc",
    "/events/free",
    "/events/launch",
    "/events/memcpy",
    "/events/memset",
    "/pointer_words_scanned",
    "/launches_without_layout",
    "/pool/plans",
    "/swap/plans",
    "/swap/plans_abandoned",
];

/// The most rows of the per-iteration table (its totals cover every iteration).
const MAX_ROWS: usize = 200;

pub fn page(report: &Report) -> String {
    let mut page = String::new();
    let title = escape(&report.title);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>itermem report: {title}</title><style>{STYLE}</style></head><body>\n\
         <h1>itermem report: {title}</h1>\n<p class=\"sub\">{} · {}</p>\n",
        escape(&report.format),
        bytes(report.recording_bytes)
    );
    if let Some(note) = &report.note {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(note));
    }
    summary(&mut page, report);
    page.push_str(
        "<h2>Live device bytes</h2>\n<p class=\"help\">What the program holds over time, swapped-out tensors included (the \
         band spans the least and most of each interval), the limit it was run under and the \
         pool that serves it once planned.</p>\n<svg id=\"memory\" class=\"chart\"></svg>\n\
         <h2>Placement</h2>\n<p class=\"help\" id=\"placement-help\">Each allocation at its \
         address (gaps between address ranges left out) over its lifetime.</p>\n\
         <svg id=\"placement\" class=\"chart\"></svg>\n\
         <h2>Swap schedule</h2>\n<p class=\"help\" id=\"schedule-help\"></p>\n\
         <svg id=\"schedule\" class=\"chart\"></svg>\n\
         <p class=\"help\" id=\"zoom-help\"></p>\n<svg id=\"zoom\" class=\"chart\"></svg>\n",
    );
    iterations(&mut page, report);
    cost(&mut page, report);
    let data = serde_json::to_string(report)
        .unwrap_or_else(|_| "null".into())
        .replace("</", "<\\/");
    let _ = write!(
        page,
        "<script id=\"report-data\" type=\"application/json\">{data}</script>\n\
         <script>{SCRIPT}</script>\n</body></html>\n"
    );
    page
}

fn summary(page: &mut String, report: &Report) {
    let t = &report.timeline;
    let mut cards = vec![("peak", "peak live bytes", bytes(t.peak_bytes))];
    cards.push((
        "limit",
        "limit",
        report.limit_bytes.map_or("none".into(), bytes),
    ));
    cards.push((
        "pool",
        "pool footprint",
        report.pool.map_or("no pool".into(), |p| bytes(p.bytes)),
    ));
    cards.push((
        "iteration",
        "detected iteration",
        match report.iteration {
            Some(i) => format!(
                "{} events, {} complete from event {}",
                group(i.period_events),
                group(t.iterations as u64),
                group(i.boundary_event)
            ),
            None => "none found".into(),
        },
    ));
    if let Some(swap) = report
        .stats
        .as_ref()
        .map(|s| &s["swap"])
        .filter(|s| s.is_object())
    {
        cards.push((
            "swaps",
            "swaps planned",
            swap["swaps_planned"].as_u64().map_or("?".into(), group),
        ));
    }
    page.push_str("<div class=\"cards\">\n");
    for (key, label, value) in cards {
        let _ = writeln!(
            page,
            "<div class=\"card\"><div class=\"label\">{label}</div>\
             <div class=\"value\" id=\"card-{key}\">{}</div></div>",
            escape(&value)
        );
    }
    page.push_str("</div>\n");
}

fn iterations(page: &mut String, report: &Report) {
    page.push_str("<h2>Iterations</h2>\n");
    let rows = report
        .stats
        .as_ref()
        .and_then(|s| s["swap"]["iterations"].as_array());
    let Some(rows) = rows.filter(|rows| !rows.is_empty()) else {
        page.push_str(
            "<p class=\"absent\" id=\"iterations-absent\">No per-iteration statistics: they \
             come from the statistics file (<code>--stats</code>) of a swap-mode run.</p>\n",
        );
        return;
    };
    page.push_str(
        "<table id=\"iterations\"><thead><tr><th>#</th><th>start event</th>\
         <th>swapped out</th><th>swapped in</th><th>on-demand swap-ins</th><th>stall</th>\
         <th>time</th></tr></thead><tbody>\n",
    );
    let number = |row: &Value, key: &str| row[key].as_f64().unwrap_or(0.0);
    for (n, row) in rows.iter().enumerate().take(MAX_ROWS) {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td data-key=\"swapped_out_bytes\">{}</td>\
             <td data-key=\"swapped_in_bytes\">{}</td><td data-key=\"on_demand_swap_ins\">{}</td>\
             <td data-key=\"stall_ns\">{}</td><td data-key=\"time_ns\">{}</td></tr>",
            n + 1,
            group(number(row, "start_event") as u64),
            bytes(number(row, "swapped_out_bytes") as u64),
            bytes(number(row, "swapped_in_bytes") as u64),
            group(number(row, "on_demand_swap_ins") as u64),
            duration(number(row, "stall_ns")),
            duration(number(row, "time_ns")),
        );
    }
    page.push_str("</tbody>");
    let total = |key: &str| rows.iter().map(|row| number(row, key)).sum::<f64>();
    let _ = writeln!(
        page,
        "<tfoot><tr><td colspan=\"2\">all {}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td></tr></tfoot></table>",
        rows.len(),
        if rows.len() > MAX_ROWS {
            format!(" ({MAX_ROWS} shown)")
        } else {
            String::new()
        },
        bytes(total("swapped_out_bytes") as u64),
        bytes(total("swapped_in_bytes") as u64),
        group(total("on_demand_swap_ins") as u64),
        duration(total("stall_ns")),
        duration(total("time_ns")),
    );
}

fn cost(page: &mut String, report: &Report) {
    page.push_str("<h2>What the run cost</h2>\n");
    let Some(stats) = &report.stats else {
        page.push_str(
            "<p class=\"absent\" id=\"cost-absent\">No statistics file given \
             (<code>--stats</code>): hook counts and planning times are in it.</p>\n",
        );
        return;
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    // Rows are named by their place in the file: `pool.plan_ms`, `plan.evaluations`.
    let mut add =
        |file: &str, source: &Value, pointer: &str, show: &dyn Fn(&Value) -> Option<String>| {
            if let Some(value) = source.pointer(pointer).and_then(show) {
                rows.push((
                    format!("{file}{}", pointer.replace('/', "."))
                        .trim_start_matches('.')
                        .to_string(),
                    value,
                ));
            }
        };
    let count = |v: &Value| v.as_u64().map(group);
    let ms = |v: &Value| v.as_f64().map(|v| format!("{v:.1} ms"));
    let ns = |v: &Value| v.as_f64().map(duration);
    for pointer in COUNTS {
        add("", stats, pointer, &count);
    }
    add("", stats, "/pool/plan_ms", &ms);
    if let Some(plan) = &report.plan {
        add("plan", plan, "/plan_ms", &ms);
        add("plan", plan, "/evaluations", &count);
    }
    add("", stats, "/swap/predicted_iteration_ns", &ns);
    add("", stats, "/swap/measured_iteration_ns", &ns);
    add("", stats, "/swap/pinned_host_bytes", &|v: &Value| {
        v.as_u64().map(bytes)
    });
    page.push_str("<table id=\"cost\"><tbody>\n");
    for (key, value) in rows {
        let _ = writeln!(
            page,
            "<tr data-key=\"{key}\"><th><code>{key}</code></th><td>{value}</td></tr>"
        );
    }
    page.push_str("</tbody></table>\n");
}

/// `n` with thousands separators: 9,833,476.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes exactly, with a binary-prefixed reading: `9,833,476 B (9.4 MiB)`.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{} B", group(n))
    } else {
        format!("{} B ({})", group(n), crate::export::human_bytes(n))
    }
}

/// Nanoseconds in the unit that reads best: `2.6 µs`, `130.4 ms`.
pub fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// [`crate::svg::escape`], and quotes, for attribute values too.
fn escape(text: &str) -> String {
    crate::svg::escape(text).replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(9_833_476), "9,833,476");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(6_000_000), "6,000,000 B (5.7 MiB)");
        assert_eq!(duration(2614.0), "2.6 µs");
        assert_eq!(duration(130_358_964.0), "130.4 ms");
    }

    #[test]
    fn file_names_cannot_inject_markup() {
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
