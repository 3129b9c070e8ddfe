//! SVG charts (plotters' SVG backend: text is written as SVG `<text>` elements, so no font
//! files or fontconfig are needed to draw, and any browser renders it).

use plotters::prelude::*;
use std::path::Path;

/// One curve (or a set of markers).
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub dashed: bool,
    /// Markers only, no line.
    pub markers_only: bool,
    /// Stroke width in pixels (2 unless set: thin lines for many curves at once).
    pub width: u32,
}

impl Series {
    pub fn line(label: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            color,
            dashed: false,
            markers_only: false,
            width: 2,
        }
    }
}

/// A palette that stays readable in print: blues for native, reds for RoCEv2.
pub const NATIVE_COLORS: [RGBColor; 4] = [
    RGBColor(107, 174, 214),
    RGBColor(49, 130, 189),
    RGBColor(8, 69, 148),
    RGBColor(35, 139, 69),
];
pub const ROCE_COLORS: [RGBColor; 2] = [RGBColor(203, 24, 29), RGBColor(251, 106, 74)];
pub const GREY: RGBColor = RGBColor(120, 120, 120);

/// Axis settings of a chart.
#[derive(Clone, Debug)]
pub struct Axes {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x: (f64, f64),
    pub y: (f64, f64),
    pub log_x: bool,
}

fn draw_series<DB: DrawingBackend, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    s: &Series,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let style = ShapeStyle::from(&s.color).stroke_width(s.width);
    let color = s.color;
    let labelled = !s.label.is_empty();
    if !s.markers_only {
        let anno = if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(s.points.clone(), 6, 4, style))
                .map_err(|e| e.to_string())?
        } else {
            chart
                .draw_series(LineSeries::new(s.points.clone(), style))
                .map_err(|e| e.to_string())?
        };
        if labelled {
            anno.label(s.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        // Markers on sparse curves only (a long time series is a line).
        if !s.dashed && s.points.len() <= 60 {
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&p| Circle::new(p, 3, ShapeStyle::from(&color).filled())),
                )
                .map_err(|e| e.to_string())?;
        }
    } else {
        let anno = chart
            .draw_series(
                s.points
                    .iter()
                    .map(|&p| Cross::new(p, 5, ShapeStyle::from(&color).stroke_width(2))),
            )
            .map_err(|e| e.to_string())?;
        if labelled {
            anno.label(s.label.clone())
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
        }
    }
    Ok(())
}

/// Draws `series` into an SVG file at `path`.
pub fn chart(path: &Path, axes: &Axes, series: &[Series]) -> Result<(), String> {
    panels(path, (960, 600), &[(axes.clone(), series.to_vec())])
}

/// Draws several charts stacked top to bottom into one SVG file of `size` pixels (each panel
/// gets an equal share of the height).
pub fn panels(path: &Path, size: (u32, u32), charts: &[(Axes, Vec<Series>)]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((charts.len().max(1), 1));
    for (area, (axes, series)) in areas.iter().zip(charts) {
        chart_on(area, axes, series)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn chart_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    axes: &Axes,
    series: &[Series],
) -> Result<(), String> {
    let mut b = ChartBuilder::on(area);
    b.caption(&axes.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64);
    let (x0, x1) = axes.x;
    let (y0, y1) = axes.y;
    let labelled = series.iter().any(|s| !s.label.is_empty());
    if axes.log_x {
        let mut chart = b
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc.as_str())
            .y_desc(axes.y_desc.as_str())
            .x_label_formatter(&|v| trim(*v))
            .y_label_formatter(&|v| trim(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        for s in series {
            draw_series(&mut chart, s)?;
        }
        if labelled {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::MiddleLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        }
    } else {
        let mut chart = b
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc.as_str())
            .y_desc(axes.y_desc.as_str())
            .x_label_formatter(&|v| trim(*v))
            .y_label_formatter(&|v| trim(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        for s in series {
            draw_series(&mut chart, s)?;
        }
        if labelled {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}
