//! SVG pictures of an allocation problem and its placements, for people to look at: the memory
//! load over time, and a placement as rectangles (time × address), one picture per policy.
//!
//! Plain SVG text, no dependencies; large instances stay readable because every rectangle is
//! drawn at the picture's scale (thin buffers become hairlines, not gaps).

use crate::export::human_bytes;
use crate::plan::Instance;
use crate::swap::{SimResult, Stream, What};
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 360.0;
const MARGIN: f64 = 48.0;

/// Escapes text for an SVG text node.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn time_span(instance: &Instance) -> (u64, u64) {
    let start = instance
        .buffers()
        .iter()
        .map(|b| b.lower)
        .min()
        .unwrap_or(0);
    let end = instance
        .buffers()
        .iter()
        .map(|b| b.upper)
        .max()
        .unwrap_or(1);
    (start, end.max(start + 1))
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{MARGIN}\" y=\"20\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
}

fn axes(out: &mut String, x_label: &str, y_label: &str, y_max: u64) {
    let (left, bottom, top) = (MARGIN, HEIGHT - MARGIN, MARGIN);
    let _ = write!(
        out,
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{left}\" y2=\"{top}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        WIDTH - MARGIN,
        WIDTH / 2.0,
        HEIGHT - 12.0,
        escape(x_label),
        HEIGHT / 2.0,
        HEIGHT / 2.0,
        escape(y_label),
        left - 4.0,
        top + 4.0,
        human_bytes(y_max),
    );
}

/// The live bytes over time as a step curve, with the peak marked.
pub fn load_curve(instance: &Instance, title: &str) -> String {
    let (start, end) = time_span(instance);
    let mut deltas: Vec<(u64, i128)> = Vec::with_capacity(2 * instance.len());
    for b in instance.buffers() {
        deltas.push((b.lower, i128::from(b.size)));
        deltas.push((b.upper, -i128::from(b.size)));
    }
    deltas.sort_unstable_by_key(|&(t, d)| (t, d > 0));
    let peak = instance.peak_live().max(1);
    let x = |t: u64| MARGIN + (t - start) as f64 / (end - start) as f64 * (WIDTH - 2.0 * MARGIN);
    let y = |v: i128| HEIGHT - MARGIN - v as f64 / peak as f64 * (HEIGHT - 2.0 * MARGIN);
    let mut out = String::new();
    header(&mut out, title);
    axes(&mut out, "time (events)", "live bytes", peak);
    let mut path = format!("M{:.1},{:.1}", x(start), y(0));
    let mut live = 0i128;
    for (t, delta) in deltas {
        let _ = write!(path, " L{:.1},{:.1}", x(t), y(live));
        live += delta;
        let _ = write!(path, " L{:.1},{:.1}", x(t), y(live));
    }
    let _ = writeln!(out, "<path d=\"{path}\" fill=\"none\" stroke=\"#1f77b4\"/>");
    let _ = writeln!(
        out,
        "<line x1=\"{MARGIN}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>",
        y(peak as i128),
        WIDTH - MARGIN,
        y(peak as i128)
    );
    out.push_str("</svg>\n");
    out
}

/// A placement: each buffer a rectangle from its lifetime (x) and its address range (y); the
/// dashed line is the peak of live bytes, the top of the picture the footprint.
pub fn placement(instance: &Instance, offsets: &[u64], footprint: u64, title: &str) -> String {
    let (start, end) = time_span(instance);
    let top = footprint.max(instance.peak_live()).max(1);
    let x = |t: u64| MARGIN + (t - start) as f64 / (end - start) as f64 * (WIDTH - 2.0 * MARGIN);
    let y = |v: u64| HEIGHT - MARGIN - v as f64 / top as f64 * (HEIGHT - 2.0 * MARGIN);
    let mut out = String::new();
    header(&mut out, title);
    axes(
        &mut out,
        "time (events)",
        "address (offset in the pool)",
        top,
    );
    for (i, (b, &offset)) in instance.buffers().iter().zip(offsets).enumerate() {
        let (x0, x1) = (x(b.lower), x(b.upper));
        let (y0, y1) = (y(offset + b.size), y(offset));
        let hue = (i * 47) % 360;
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{:.2}\" \
             fill=\"hsl({hue},60%,65%)\" stroke=\"hsl({hue},60%,35%)\" stroke-width=\"0.3\"/>",
            (x1 - x0).max(0.3),
            (y1 - y0).max(0.3)
        );
    }
    let peak = instance.peak_live();
    let _ = writeln!(
        out,
        "<line x1=\"{MARGIN}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n\
         <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">peak live {}</text>",
        y(peak),
        WIDTH - MARGIN,
        y(peak),
        WIDTH - MARGIN,
        y(peak) - 3.0,
        human_bytes(peak)
    );
    out.push_str("</svg>\n");
    out
}

/// AutoSwap's effect: the memory load over the iteration without and with the plan (top), and
/// the compute, swap-out and swap-in streams' timelines with the plan (bottom).
pub fn swap_timeline(name: &str, before: &SimResult, after: &SimResult, limit: u64) -> String {
    let end = before.time_ns.max(after.time_ns).max(1.0);
    let top = before.peak_bytes.max(after.peak_bytes).max(limit).max(1);
    let x = |t: f64| MARGIN + t / end * (WIDTH - 2.0 * MARGIN);
    let load_bottom = HEIGHT * 0.55;
    let y = |v: u64| load_bottom - v as f64 / top as f64 * (load_bottom - MARGIN);
    let mut out = String::new();
    header(
        &mut out,
        &format!(
            "{name}: load without (grey) and with AutoSwap (blue), limit {}; overhead {:.2} %",
            human_bytes(limit),
            100.0 * after.overhead
        ),
    );
    let curve = |points: &[(f64, u64)]| {
        let mut path = String::new();
        let mut last = 0u64;
        for (i, &(t, v)) in points.iter().enumerate() {
            let _ = write!(
                path,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { " L" },
                x(t),
                y(last)
            );
            let _ = write!(path, " L{:.1},{:.1}", x(t), y(v));
            last = v;
        }
        path
    };
    for (result, colour) in [(before, "#999999"), (after, "#1f77b4")] {
        if !result.load_curve.is_empty() {
            let _ = writeln!(
                out,
                "<path d=\"{}\" fill=\"none\" stroke=\"{colour}\"/>",
                curve(&result.load_curve)
            );
        }
    }
    let _ = writeln!(
        out,
        "<line x1=\"{MARGIN}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>",
        y(limit),
        WIDTH - MARGIN,
        y(limit)
    );
    let lanes = [
        (Stream::Compute, "compute"),
        (Stream::SwapOut, "swap-out"),
        (Stream::SwapIn, "swap-in"),
    ];
    for (lane, (stream, label)) in lanes.iter().enumerate() {
        let top = load_bottom + 20.0 + lane as f64 * 28.0;
        let _ = writeln!(out, "<text x=\"4\" y=\"{:.1}\">{label}</text>", top + 14.0);
        for event in after.events.iter().filter(|e| e.stream == *stream) {
            let colour = match event.what {
                What::Op(_) => "#8c8c8c",
                What::Out { .. } => "#2ca02c",
                What::In { .. } => "#1f77b4",
                What::OnDemandIn { .. } => "#d62728",
            };
            let _ = writeln!(
                out,
                "<rect x=\"{:.2}\" y=\"{top:.1}\" width=\"{:.2}\" height=\"20\" fill=\"{colour}\"/>",
                x(event.start_ns),
                (x(event.end_ns) - x(event.start_ns)).max(0.3)
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Buffer;

    fn instance() -> Instance {
        Instance::new(vec![
            Buffer {
                id: 0,
                lower: 0,
                upper: 4,
                size: 100,
            },
            Buffer {
                id: 1,
                lower: 2,
                upper: 6,
                size: 50,
            },
        ])
        .unwrap()
    }

    #[test]
    fn pictures_are_well_formed_svg_with_one_rectangle_per_buffer() {
        let svg = placement(&instance(), &[0, 100], 150, "a <plan> & more");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("a &lt;plan&gt; &amp; more"));
        let curve = load_curve(&instance(), "load");
        assert!(curve.contains("<path d=\"M"));
    }
}
