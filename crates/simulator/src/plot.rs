//! The picture: tasks unavailable over time, and how uneven the load is, one line per run,
//! with the scenario's events marked.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::Report;

/// Why a plot was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{0}: the plot must be a .png or .svg file")]
    Format(std::path::PathBuf),
    /// The drawing backend failed (a file that cannot be written, say).
    #[error("drawing the plot: {0}")]
    Drawing(String),
}

/// Writes a PNG or SVG (by the file's extension).
pub fn plot(reports: &[Report], path: &Path) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let size = (1100, 760);
    match ext.as_str() {
        "svg" => draw(SVGBackend::new(path, size).into_drawing_area(), reports),
        "png" => draw(BitMapBackend::new(path, size).into_drawing_area(), reports),
        _ => Err(PlotError::Format(path.to_owned())),
    }
}

fn label(r: &Report) -> String {
    format!("{} ({})", r.assignor, r.protocol)
}

/// The load spread (max - min actives per instance) at each sample.
fn spread(r: &Report) -> Vec<(f64, f64)> {
    r.load
        .iter()
        .map(|s| {
            let max = s.actives.values().max().copied().unwrap_or(0);
            let min = s.actives.values().min().copied().unwrap_or(0);
            (s.t_s, (max - min) as f64)
        })
        .collect()
}

/// A step line: each value holds until the next.
fn steps(points: &[(f64, f64)], until: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2 + 1);
    for (i, &(t, v)) in points.iter().enumerate() {
        if i > 0 {
            out.push((t, points[i - 1].1));
        }
        out.push((t, v));
    }
    if let Some(&(_, v)) = points.last() {
        out.push((until, v));
    }
    out
}

/// Runs longer than this get a logarithmic time axis, so that the first minutes, where
/// scaling happens, are not squeezed into the left edge.
const LINEAR_UP_TO_S: f64 = 900.0;

/// Each run's line: its own colour, and a width that shrinks with its index so that a line
/// drawn later never hides one drawn before it (identical runs show as nested stripes).
fn style(i: usize) -> ShapeStyle {
    const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    const WIDTHS: [u32; 3] = [5, 3, 1];
    COLORS[i % COLORS.len()].stroke_width(WIDTHS[i.min(WIDTHS.len() - 1)])
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    reports: &[Report],
) -> Result<(), PlotError> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Drawing(x.to_string());
    root.fill(&WHITE).map_err(e)?;
    let title = reports
        .first()
        .map(|r| r.scenario.clone())
        .unwrap_or_default();
    let root = root.titled(&title, ("sans-serif", 24)).map_err(e)?;
    let (top, bottom) = root.split_vertically(360);
    let t_max = reports.iter().map(|r| r.simulated_s).fold(1.0, f64::max);

    let unavail: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|r| {
            steps(
                &r.unavailable_series
                    .iter()
                    .map(|&(t, n)| (t, n as f64))
                    .collect::<Vec<_>>(),
                r.simulated_s,
            )
        })
        .collect();
    let spreads: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|r| steps(&spread(r), r.simulated_s))
        .collect();

    for (area, series, y_label) in [
        (&top, &unavail, "tasks without a running active"),
        (
            &bottom,
            &spreads,
            "load spread (max - min actives per instance)",
        ),
    ] {
        if t_max > LINEAR_UP_TO_S {
            // A log axis cannot show 0: the first second is drawn at 1 s.
            let clamp = |v: &Vec<(f64, f64)>| v.iter().map(|&(t, y)| (t.max(1.0), y)).collect();
            let series: Vec<Vec<(f64, f64)>> = series.iter().map(clamp).collect();
            panel(
                area,
                (1.0..t_max).log_scale(),
                "simulated seconds (log scale)",
                reports,
                &series,
                y_label,
                1.0,
            )?;
        } else {
            panel(
                area,
                0.0..t_max,
                "simulated seconds",
                reports,
                series,
                y_label,
                0.0,
            )?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

fn panel<DB: DrawingBackend, X>(
    area: &DrawingArea<DB, Shift>,
    x: X,
    x_label: &str,
    reports: &[Report],
    series: &[Vec<(f64, f64)>],
    y_label: &str,
    t_min: f64,
) -> Result<(), PlotError>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Drawing(x.to_string());
    let y_max = series.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(e)?;
    if let Some(r) = reports.first() {
        for &t in &r.event_times_s {
            let t = t.max(t_min);
            chart
                .draw_series(LineSeries::new(
                    vec![(t, 0.0), (t, y_max)],
                    BLACK.mix(0.3).stroke_width(1),
                ))
                .map_err(e)?;
        }
    }
    for (i, (r, line)) in reports.iter().zip(series.iter()).enumerate() {
        let style = style(i);
        chart
            .draw_series(LineSeries::new(line.clone(), style))
            .map_err(e)?
            .label(label(r))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    Ok(())
}
