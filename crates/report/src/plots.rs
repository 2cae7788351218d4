//! The plots, each an SVG document drawn with plotters' SVG backend (no fonts needed: text stays
//! text and the browser lays it out).

use crate::format::number;
use crate::palette;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use tailguard_model::results::{ReplicaLoad, RunResult, TimeoutSeries};

/// Width and height of one plot in SVG pixels; the page scales it to half its width.
const SIZE: (u32, u32) = (640, 400);
/// Plotters' SVG backend writes a font size of the size asked / 1.24, so 16 is 13 px.
const FONT: &str = "sans-serif";
/// More replicas than this are drawn as a heatmap, not as lines.
const MAX_LINES: usize = 8;
/// A heatmap has at most this many columns; longer series are averaged over wider bins.
const MAX_COLUMNS: usize = 150;

type Drawn = Result<(), Box<dyn Error>>;

/// A drawing backend whose errors can be boxed (the SVG one's are I/O errors).
trait Backend: DrawingBackend<ErrorType: 'static> {}
impl<DB: DrawingBackend<ErrorType: 'static>> Backend for DB {}

/// One variant's latency distribution as (ms, fraction at or below) points.
pub(crate) struct Line<'a> {
    name: &'a str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    /// Only the percentiles were recorded: the points are joined, not stepped.
    approximate: bool,
}

impl<'a> Line<'a> {
    /// The distribution of `run`: its CDF, else its percentiles, else nothing.
    pub(crate) fn of(run: &'a RunResult, color: RGBColor) -> Line<'a> {
        let clean = |points: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
            let mut out: Vec<(f64, f64)> = Vec::new();
            for (x, f) in points {
                if !(x.is_finite() && f.is_finite() && x > 0.0) {
                    continue;
                }
                match out.last_mut() {
                    Some(last) if x <= last.0 => last.1 = last.1.max(f),
                    _ => out.push((x, f.clamp(0.0, 1.0))),
                }
            }
            out
        };
        let name = run.variant.as_str();
        if run.succeeded == 0 {
            return Line { name, color, points: Vec::new(), approximate: false };
        }
        if !run.cdf.is_empty() {
            return Line {
                name,
                color,
                points: clean(run.cdf.iter().map(|p| (p[0], p[1])).collect()),
                approximate: false,
            };
        }
        let l = &run.latency_ms;
        let percentiles =
            vec![(l.p10, 0.1), (l.p50, 0.5), (l.p90, 0.9), (l.p95, 0.95), (l.p99, 0.99), (l.p999, 0.999), (l.max, 1.0)];
        Line { name, color, points: clean(percentiles), approximate: true }
    }

    /// The fraction at or below `x` (0 for a line without points).
    fn at(&self, x: f64) -> f64 {
        self.points.iter().take_while(|p| p.0 <= x).last().map_or(0.0, |p| p.1)
    }

    fn label(&self) -> String {
        match (self.points.is_empty(), self.approximate) {
            (true, _) => format!("{} (no successes)", self.name),
            (false, true) => format!("{} (percentiles)", self.name),
            (false, false) => self.name.to_string(),
        }
    }

    /// The CDF as a polyline: steps between recorded points, straight segments between percentiles.
    fn cdf_path(&self) -> Vec<(f64, f64)> {
        let Some(&(x0, f0)) = self.points.first() else { return Vec::new() };
        if self.approximate {
            return self.points.clone();
        }
        let mut path = vec![(x0, 0.0), (x0, f0)];
        for w in self.points.windows(2) {
            path.push((w[1].0, w[0].1));
            path.push(w[1]);
        }
        path
    }

    /// The CCDF (fraction slower) as a polyline ending at `floor`, where the last point's 0 would
    /// lie on a log axis.
    fn ccdf_path(&self, floor: f64) -> Vec<(f64, f64)> {
        self.cdf_path().into_iter().map(|(x, f)| (x, (1.0 - f).max(floor))).collect()
    }
}

/// The CDF of every variant; a log latency axis when latencies span a factor of 10 or more.
pub(crate) fn latency_cdf(lines: &[Line<'_>]) -> Result<String, String> {
    let (lo, hi) = latency_range(lines);
    svg(|root| {
        let chart = ChartBuilder::on(root);
        if hi / lo >= 10.0 {
            let ticks = log_ticks(lo, hi);
            draw_cdf(chart, (lo..hi).log_scale().with_key_points(ticks), lines, cdf_legend(lines, (lo, hi), true))
        } else {
            draw_cdf(chart, lo..hi, lines, cdf_legend(lines, (lo, hi), false))
        }
    })
}

fn draw_cdf<DB: Backend, X>(
    mut builder: ChartBuilder<'_, '_, DB>,
    x: X,
    lines: &[Line<'_>],
    corner: SeriesLabelPosition,
) -> Drawn
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = base(&mut builder, "Latency CDF").build_cartesian_2d(x, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("fraction of requests at or below")
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.08))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 16))
        .draw()?;
    for line in lines {
        let style = line.color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(line.cdf_path(), style))?
            .label(line.label())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
    }
    legend(&mut chart, corner)
}

/// The fraction of requests slower than each latency, both axes logarithmic, with p99 and p99.9
/// marked: the tail that a CDF squeezes against 1.
pub(crate) fn latency_ccdf(lines: &[Line<'_>]) -> Result<String, String> {
    let (lo, hi) = latency_range(lines);
    // A decade below the smallest fraction any variant resolves (its last point before the max),
    // where the curves drop at their max.
    let smallest =
        lines.iter().flat_map(|l| l.points.iter().map(|p| 1.0 - p.1)).filter(|&y| y > 1e-9).fold(1.0f64, f64::min);
    let floor = 10f64.powf((smallest.log10() - 1e-9).ceil() - 1.0).clamp(1e-6, 0.01);
    svg(|root| {
        let chart = ChartBuilder::on(root);
        let y = (floor..1.0).log_scale().with_key_points(decades(floor, 1.0));
        let corner = ccdf_legend(lines, (lo, hi), hi / lo >= 10.0, floor);
        if hi / lo >= 10.0 {
            draw_ccdf(chart, (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)), y, lines, (floor, lo, hi), corner)
        } else {
            draw_ccdf(chart, lo..hi, y, lines, (floor, lo, hi), corner)
        }
    })
}

fn draw_ccdf<DB: Backend, X, Y>(
    mut builder: ChartBuilder<'_, '_, DB>,
    x: X,
    y: Y,
    lines: &[Line<'_>],
    (floor, lo, hi): (f64, f64, f64),
    corner: SeriesLabelPosition,
) -> Drawn
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = base(&mut builder, "Latency tail (CCDF)").build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("fraction of requests slower")
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| percent(*v))
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.08))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 16))
        .draw()?;
    for (fraction, name) in [(0.01, "p99"), (0.001, "p99.9")] {
        if fraction > floor {
            let style = BLACK.mix(0.45).stroke_width(1);
            chart.draw_series(DashedLineSeries::new([(lo, fraction), (hi, fraction)], 4, 4, style))?;
            // Labelled at the right end, just above the line, where the curves have usually ended.
            let style = (FONT, 16).into_font().color(&BLACK.mix(0.6)).pos(Pos::new(HPos::Right, VPos::Bottom));
            chart.draw_series(std::iter::once(Text::new(name, (hi, fraction * 1.08), style)))?;
        }
    }
    for line in lines {
        let style = line.color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(line.ccdf_path(floor), style))?
            .label(line.label())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
    }
    legend(&mut chart, corner)
}

/// The share of a plot's height a legend of `lines` takes (a row of about 20 of some 300 px).
fn legend_height(lines: &[Line<'_>]) -> f64 {
    (0.04 + 0.067 * lines.len() as f64).min(0.9)
}

/// The latency at fraction `f` of the axis from `lo` to `hi`.
fn along((lo, hi): (f64, f64), log: bool, f: f64) -> f64 {
    if log {
        lo * (hi / lo).powf(f)
    } else {
        lo + (hi - lo) * f
    }
}

/// The CDF's empty corner for the legend: lower right (curves that have risen by then) unless
/// more curves are still low there than are already high at the upper left.
fn cdf_legend(lines: &[Line<'_>], range: (f64, f64), log: bool) -> SeriesLabelPosition {
    let h = legend_height(lines);
    let lower_right = lines.iter().filter(|l| l.at(along(range, log, 0.6)) < h).count();
    let upper_left = lines.iter().filter(|l| l.at(along(range, log, 0.4)) > 1.0 - h).count();
    if upper_left < lower_right {
        SeriesLabelPosition::UpperLeft
    } else {
        SeriesLabelPosition::LowerRight
    }
}

/// The CCDF's empty corner for the legend: lower left unless more curves have already fallen
/// there than are still high at the upper right.
fn ccdf_legend(lines: &[Line<'_>], range: (f64, f64), log: bool, floor: f64) -> SeriesLabelPosition {
    let h = legend_height(lines);
    let height = |g: f64| floor * (1.0 / floor).powf(g);
    let slower = |l: &Line<'_>, x: f64| 1.0 - l.at(x);
    let lower_left = lines.iter().filter(|l| slower(l, along(range, log, 0.4)) < height(h)).count();
    let upper_right = lines.iter().filter(|l| slower(l, along(range, log, 0.6)) > height(1.0 - h)).count();
    if upper_right < lower_left {
        SeriesLabelPosition::UpperRight
    } else {
        SeriesLabelPosition::LowerLeft
    }
}

/// Attempts per replica over time: a line per replica, or a heatmap when there are many. `peak`
/// fixes the y axis (or color scale) so the plots of one scenario compare. Returns the plot and
/// what kind it is, for the caption.
pub(crate) fn replica_load(
    run: &RunResult,
    load: &ReplicaLoad,
    interval_s: f64,
    peak: u64,
) -> (Result<String, String>, &'static str) {
    let title = format!("{}: attempts per replica of {}", run.variant, load.service);
    if load.replicas.len() <= MAX_LINES {
        (load_lines(&title, load, interval_s, peak), "one line per replica")
    } else {
        (load_heatmap(&title, load, interval_s, peak), "heatmap, brighter is busier")
    }
}

fn load_lines(title: &str, load: &ReplicaLoad, interval_s: f64, peak: u64) -> Result<String, String> {
    let intervals = load.replicas.iter().map(Vec::len).max().unwrap_or(0);
    let end = (intervals as f64 * interval_s).max(interval_s);
    svg(|root| {
        let mut builder = ChartBuilder::on(root);
        let mut chart = base(&mut builder, title).build_cartesian_2d(0.0..end, 0.0..(peak as f64 * 1.12).max(1.0))?;
        time_mesh(&mut chart, &format!("attempts per {} s", number(interval_s)))?;
        for (r, counts) in load.replicas.iter().enumerate() {
            let style = palette::series(r).stroke_width(2);
            let points = counts.iter().enumerate().map(|(i, &n)| ((i as f64 + 0.5) * interval_s, n as f64));
            chart
                .draw_series(LineSeries::new(points, style))?
                .label(format!("replica {r}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

fn load_heatmap(title: &str, load: &ReplicaLoad, interval_s: f64, peak: u64) -> Result<String, String> {
    let intervals = load.replicas.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let bin = intervals.div_ceil(MAX_COLUMNS);
    let columns = intervals.div_ceil(bin);
    let rows = load.replicas.len();
    let end = intervals as f64 * interval_s;
    let peak = peak.max(1) as f64;
    svg(|root| {
        let (left, right) = root.split_horizontally(SIZE.0 - 90);
        let mut builder = ChartBuilder::on(&left);
        // One segment per replica, labelled at its middle (the integer range includes its end).
        let mut chart = base(&mut builder, title).build_cartesian_2d(0.0..end, (0..rows - 1).into_segmented())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("time after warm-up (s)")
            .y_desc("replica")
            .x_label_formatter(&|v| tick(*v))
            .y_labels(rows.min(12))
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(r) | SegmentValue::Exact(r) => r.to_string(),
                SegmentValue::Last => String::new(),
            })
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 16))
            .draw()?;
        let cells = load.replicas.iter().enumerate().flat_map(|(r, counts)| {
            (0..columns).map(move |c| {
                let slice = counts.get(c * bin..((c + 1) * bin).min(counts.len())).unwrap_or(&[]);
                let mean = slice.iter().sum::<u64>() as f64 / slice.len().max(1) as f64;
                let x0 = (c * bin) as f64 * interval_s;
                let x1 = (((c + 1) * bin).min(intervals)) as f64 * interval_s;
                let top = if r + 1 == rows { SegmentValue::Last } else { SegmentValue::Exact(r + 1) };
                let bottom = SegmentValue::Exact(r);
                Rectangle::new([(x0, bottom), (x1, top)], palette::viridis(mean / peak).filled())
            })
        });
        chart.draw_series(cells)?;
        // The color bar: attempts per interval, 0 at the bottom.
        let mut bar = ChartBuilder::on(&right)
            .margin_top(46)
            .margin_bottom(58)
            .margin_right(8)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..1.0, 0.0..peak)?;
        bar.configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(5)
            .y_label_formatter(&|v| tick(*v))
            .label_style((FONT, 15))
            .draw()?;
        let steps = 64;
        bar.draw_series((0..steps).map(|i| {
            let (a, b) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
            Rectangle::new([(0.0, a * peak), (1.0, b * peak)], palette::viridis((a + b) / 2.0).filled())
        }))?;
        Ok(())
    })
}

/// An edge's timeout and its callee's latency over time.
pub(crate) fn timeout(run: &RunResult, edge: &TimeoutSeries, interval_s: f64) -> Result<String, String> {
    let values = || edge.timeout_ms.iter().chain(&edge.latency_ms).copied().filter(|v| v.is_finite() && *v > 0.0);
    let top = values().fold(0.0, f64::max);
    // Zoomed on the values, unless that would exaggerate small changes.
    let bottom = values().fold(f64::INFINITY, f64::min) * 0.85;
    let bottom = if bottom.is_finite() && bottom > 0.25 * top { bottom } else { 0.0 };
    let intervals = edge.timeout_ms.len().max(edge.latency_ms.len());
    let end = (intervals as f64 * interval_s).max(interval_s);
    let title = format!("{}: {}", run.variant, edge.edge);
    svg(|root| {
        let mut builder = ChartBuilder::on(root);
        // Headroom above the lines for the legend.
        let ceiling = (top + 0.35 * (top - bottom)).max(1.0);
        let mut chart = base(&mut builder, &title).build_cartesian_2d(0.0..end, bottom..ceiling)?;
        time_mesh(&mut chart, "ms")?;
        let at = |values: &[f64]| -> Vec<(f64, f64)> {
            values.iter().enumerate().map(|(i, &v)| ((i as f64 + 0.5) * interval_s, v)).collect()
        };
        let latency = RGBColor(0x1f, 0x77, 0xb4).stroke_width(2);
        let timeout = RGBColor(0xd6, 0x27, 0x28).stroke_width(2);
        chart
            .draw_series(LineSeries::new(at(&edge.latency_ms), latency))?
            .label("latency of answers")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], latency));
        chart
            .draw_series(LineSeries::new(at(&edge.timeout_ms), timeout))?
            .label("timeout set")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], timeout));
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Draws into a fresh SVG document of [`SIZE`] on white.
fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Drawn) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The common frame: title, margins, label areas.
fn base<'a, 'b, 'c, DB: Backend>(
    builder: &'c mut ChartBuilder<'a, 'b, DB>,
    title: &str,
) -> &'c mut ChartBuilder<'a, 'b, DB> {
    builder
        .caption(title, (FONT, 21).into_font().style(FontStyle::Bold))
        .margin(12)
        .margin_right(22)
        .x_label_area_size(48)
        .y_label_area_size(84)
}

fn time_mesh<DB: Backend, X, Y>(chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>, y_desc: &str) -> Drawn
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("time after warm-up (s)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.08))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 16))
        .draw()?;
    Ok(())
}

fn legend<'a, DB: Backend + 'a, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> Drawn
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(at)
        .margin(10)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.25))
        .draw()?;
    Ok(())
}

/// The latency range of all lines, padded; a sane default when there is none.
fn latency_range(lines: &[Line<'_>]) -> (f64, f64) {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if !lo.is_finite() || hi <= 0.0 {
        return (1.0, 10.0);
    }
    if hi / lo >= 10.0 {
        (lo / 1.2, hi * 1.2)
    } else {
        let pad = ((hi - lo) * 0.08).max(hi * 0.02);
        ((lo - pad).max(0.0), hi + pad)
    }
}

/// 1-2-5 ticks within [lo, hi], thinned to decades when there would be too many.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi && ticks.len() < 100 {
        ticks.extend([1.0, 2.0, 5.0].iter().map(|m| m * decade).filter(|t| (lo..=hi).contains(t)));
        decade *= 10.0;
    }
    if ticks.len() > 9 {
        ticks.retain(|t| (t.log10() - t.log10().round()).abs() < 1e-9);
    }
    ticks
}

/// Powers of ten within [lo, hi].
fn decades(lo: f64, hi: f64) -> Vec<f64> {
    (lo.log10().round() as i32..=hi.log10().round() as i32).map(|k| 10f64.powi(k)).collect()
}

/// A tick label: whole numbers without decimals, small ones with what they need.
fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        number(v)
    }
}

/// A fraction as a percentage label: 0.01 → "1 %", 0.0001 → "0.01 %".
fn percent(v: f64) -> String {
    format!("{} %", number(v * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_1_2_5_or_decades() {
        assert_eq!(log_ticks(80.0, 1200.0), vec![100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(0.5, 50_000.0), vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        assert_eq!(decades(0.001, 1.0), vec![0.001, 0.01, 0.1, 1.0]);
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(tick(2500.0), "2500");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(percent(0.001), "0.1 %");
    }
}
