//! `--plot`: admitted and rejected requests over time, as an SVG.
//!
//! One panel per key (the busiest few), time on the x axis, the limit drawn
//! as a dashed line. Admitted requests are green dots at the share of the
//! limit in use after them; rejected ones are red crosses in the band above
//! the limit line, so a glance shows where a key ran into its limit.
//!
//! The SVG is written by hand: it is a fixed layout of dots, lines and text,
//! and the plotting crates need a system font stack even to lay out SVG text.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Points kept for drawing; later requests are counted but not drawn.
const MAX_POINTS: usize = 200_000;
/// Distinct keys tracked for drawing.
const MAX_KEYS: usize = 1_000;
/// Panels drawn (the busiest keys).
const MAX_PANELS: usize = 6;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 78.0;
const PANEL_HEIGHT: f64 = 150.0;
const PANEL_GAP: f64 = 62.0;
const BOTTOM: f64 = 20.0;

#[derive(Debug, Clone, Copy)]
struct Point {
    at_ms: u64,
    key: usize,
    allowed: bool,
    used: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct KeyCounts {
    admitted: u64,
    rejected: u64,
}

/// Collects decisions, then renders them.
#[derive(Debug)]
pub struct Plot {
    title: String,
    limit: u64,
    keys: Vec<String>,
    key_index: HashMap<String, usize>,
    counts: Vec<KeyCounts>,
    points: Vec<Point>,
    dropped: u64,
}

impl Plot {
    /// A plot titled `title` for a limit of `limit`.
    pub fn new(title: String, limit: u64) -> Self {
        Plot {
            title,
            limit: limit.max(1),
            keys: Vec::new(),
            key_index: HashMap::new(),
            counts: Vec::new(),
            points: Vec::new(),
            dropped: 0,
        }
    }

    /// Adds one decision: `used` is `limit - remaining` after it.
    pub fn add(&mut self, at_ms: u64, key: &str, allowed: bool, used: u64) {
        let Some(key) = self.key_slot(key) else {
            self.dropped += 1;
            return;
        };
        let counts = &mut self.counts[key];
        if allowed {
            counts.admitted += 1;
        } else {
            counts.rejected += 1;
        }
        if self.points.len() < MAX_POINTS {
            self.points.push(Point {
                at_ms,
                key,
                allowed,
                used,
            });
        } else {
            self.dropped += 1;
        }
    }

    fn key_slot(&mut self, key: &str) -> Option<usize> {
        if let Some(&i) = self.key_index.get(key) {
            return Some(i);
        }
        if self.keys.len() >= MAX_KEYS {
            return None;
        }
        let i = self.keys.len();
        self.keys.push(key.to_string());
        self.key_index.insert(key.to_string(), i);
        self.counts.push(KeyCounts::default());
        Some(i)
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let panels = self.busiest_keys();
        let height = TOP + panels.len().max(1) as f64 * (PANEL_HEIGHT + PANEL_GAP) + BOTTOM;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
        );
        svg.push_str(r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
        let _ = write!(
            svg,
            r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
            escape(&self.title)
        );
        self.legend(&mut svg);
        let (t0, t1) = self.time_range();
        for (row, &key) in panels.iter().enumerate() {
            let top = TOP + row as f64 * (PANEL_HEIGHT + PANEL_GAP);
            self.panel(&mut svg, key, top, t0, t1);
        }
        if panels.is_empty() {
            let _ = write!(
                svg,
                r#"<text x="{LEFT}" y="{}">no requests</text>"#,
                TOP + 30.0
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn busiest_keys(&self) -> Vec<usize> {
        let mut keys: Vec<usize> = (0..self.keys.len()).collect();
        keys.sort_by_key(|&k| std::cmp::Reverse(self.counts[k].admitted + self.counts[k].rejected));
        keys.truncate(MAX_PANELS);
        keys
    }

    fn time_range(&self) -> (u64, u64) {
        let t0 = self.points.iter().map(|p| p.at_ms).min().unwrap_or(0);
        let t1 = self.points.iter().map(|p| p.at_ms).max().unwrap_or(0);
        (t0, t1.max(t0 + 1))
    }

    fn legend(&self, svg: &mut String) {
        let y = 48.0;
        let x = LEFT;
        let _ = write!(
            svg,
            r##"<circle cx="{}" cy="{}" r="4" fill="#2a9d4b"/><text x="{}" y="{}">admitted</text>"##,
            x + 4.0,
            y - 4.0,
            x + 14.0,
            y
        );
        cross(svg, x + 104.0, y - 4.0);
        let _ = write!(svg, r#"<text x="{}" y="{y}">rejected</text>"#, x + 114.0);
        let _ = write!(
            svg,
            r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#7a1f1f" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{}" y="{y}">limit ({})</text>"##,
            x + 200.0,
            y - 4.0,
            x + 230.0,
            y - 4.0,
            x + 236.0,
            self.limit
        );
        if self.dropped > 0 {
            let _ = write!(
                svg,
                r##"<text x="{}" y="{y}" fill="#666666">({} requests not drawn)</text>"##,
                x + 380.0,
                self.dropped
            );
        }
    }

    fn panel(&self, svg: &mut String, key: usize, top: f64, t0: u64, t1: u64) {
        let plot_w = WIDTH - LEFT - RIGHT;
        let bottom = top + PANEL_HEIGHT;
        let y_max = self.limit as f64 * 1.25;
        let x_of = |t: u64| LEFT + (t - t0) as f64 / (t1 - t0) as f64 * plot_w;
        let y_of = |v: f64| bottom - v.min(y_max) / y_max * PANEL_HEIGHT;
        let counts = self.counts[key];
        let _ = write!(
            svg,
            r#"<text x="{LEFT}" y="{}" font-weight="bold">key {} <tspan font-weight="normal">— {} admitted, {} rejected</tspan></text>"#,
            top - 8.0,
            escape(&self.keys[key]),
            counts.admitted,
            counts.rejected
        );
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_HEIGHT}" fill="#fafafa" stroke="#999999"/>"##
        );
        for (value, label) in [
            (0.0, "0".to_string()),
            (self.limit as f64 / 2.0, format!("{}", self.limit / 2)),
        ] {
            let y = y_of(value);
            let _ = write!(
                svg,
                r##"<text x="{}" y="{}" text-anchor="end" fill="#444444">{label}</text>"##,
                LEFT - 6.0,
                y + 4.0
            );
        }
        let limit_y = y_of(self.limit as f64);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{limit_y}" x2="{}" y2="{limit_y}" stroke="#7a1f1f" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{}" y="{}" text-anchor="end" fill="#7a1f1f">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            limit_y + 4.0,
            self.limit
        );
        let _ = write!(
            svg,
            r##"<text transform="translate({} {}) rotate(-90)" text-anchor="middle" fill="#444444">in use</text>"##,
            LEFT - 50.0,
            top + PANEL_HEIGHT / 2.0
        );
        time_axis(svg, bottom, t1 - t0, plot_w);
        let rejected_y = y_of(self.limit as f64 * 1.125);
        let mut drawn = HashSet::new();
        for p in self.points.iter().filter(|p| p.key == key) {
            let x = x_of(p.at_ms);
            let y = if p.allowed {
                y_of(p.used as f64)
            } else {
                rejected_y
            };
            if !drawn.insert((x.round() as i64, y.round() as i64, p.allowed)) {
                continue;
            }
            if p.allowed {
                let _ = write!(
                    svg,
                    r##"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="#2a9d4b" fill-opacity="0.8"/>"##
                );
            } else {
                cross(svg, x, y);
            }
        }
    }
}

fn cross(svg: &mut String, x: f64, y: f64) {
    let _ = write!(
        svg,
        r##"<path d="M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}" stroke="#d62828" stroke-width="1.8"/>"##,
        x - 3.5,
        y - 3.5,
        x + 3.5,
        y + 3.5,
        x - 3.5,
        y + 3.5,
        x + 3.5,
        y - 3.5
    );
}

/// Ticks and labels for a span of `span_ms`, measured from the first request.
fn time_axis(svg: &mut String, bottom: f64, span_ms: u64, plot_w: f64) {
    let step = tick_step(span_ms);
    let mut t = 0;
    while t <= span_ms {
        let x = LEFT + t as f64 / span_ms as f64 * plot_w;
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{}" stroke="#999999"/><text x="{x:.1}" y="{}" text-anchor="middle" fill="#444444">{}</text>"##,
            bottom + 5.0,
            bottom + 18.0,
            format_ms(t)
        );
        t += step;
    }
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#444444">time since the first request</text>"##,
        LEFT + plot_w / 2.0,
        bottom + 34.0
    );
}

/// A round tick spacing giving about six ticks.
fn tick_step(span_ms: u64) -> u64 {
    let target = (span_ms / 6).max(1);
    let mut magnitude = 1;
    while magnitude * 10 <= target {
        magnitude *= 10;
    }
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= target)
        .unwrap_or(10 * magnitude)
}

fn format_ms(ms: u64) -> String {
    if ms == 0 {
        "0".to_string()
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else if ms >= 1_000 {
        format!("{:.1}s", ms as f64 / 1_000.0)
    } else {
        format!("{ms}ms")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(6_000), 1_000);
        assert_eq!(tick_step(10_000), 2_000);
        assert_eq!(tick_step(25), 5);
        assert_eq!(tick_step(0), 1);
        assert_eq!(format_ms(1_500), "1.5s");
        assert_eq!(format_ms(120_000), "2min");
        assert_eq!(format_ms(250), "250ms");
    }

    #[test]
    fn renders_markers_legend_and_escaped_keys() {
        let mut plot = Plot::new("token_bucket 2/s".to_string(), 2);
        plot.add(0, "<a&b>", true, 1);
        plot.add(10, "<a&b>", true, 2);
        plot.add(20, "<a&b>", false, 2);
        let svg = plot.render();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<circle").count(), 3, "two admitted + legend");
        assert_eq!(svg.matches("<path").count(), 2, "one rejected + legend");
        assert!(svg.contains("&lt;a&amp;b&gt;") && !svg.contains("<a&b>"));
        assert!(svg.contains("limit (2)") && svg.contains("time since the first request"));
    }
}
