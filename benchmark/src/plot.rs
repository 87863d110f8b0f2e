//! The optional PNG chart (`--plot`): output tokens/s and requests/s (top)
//! and TTFT and inter-token latency percentiles (bottom) per concurrency
//! level. Plotters draws lines into an RGB buffer; labels come from
//! [`flexinfer_service::chart::glyphs`]; the `png` crate encodes the file. The axis, legend and
//! text helpers are shared with the routing chart.

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::LoadReport;
pub(crate) use flexinfer_service::chart::write_rgb;
use flexinfer_service::chart::{self, glyphs};

/// Image size in pixels.
pub const SIZE: (u32, u32) = (1000, 760);

/// Glyph scale of every label.
pub(crate) const SCALE: i32 = 2;
pub(crate) const MARGIN_LEFT: i32 = 90;
pub(crate) const MARGIN_RIGHT: i32 = 30;
pub(crate) const MARGIN_TOP: i32 = 50;
pub(crate) const MARGIN_BOTTOM: i32 = 50;
/// Space between the y axis (or right edge) and the first (last) level.
const X_INSET: i32 = 30;

struct Series {
    name: &'static str,
    color: RGBColor,
    values: Vec<Option<f64>>,
}

/// Writes the chart of `report` to `path` as PNG.
pub fn write_png(report: &LoadReport, path: &Path) -> Result<()> {
    let (w, h) = SIZE;
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    draw(report, &mut buffer).map_err(|e| anyhow::anyhow!("cannot draw the chart: {e}"))?;
    write_rgb(&buffer, SIZE, path)
}

fn draw(report: &LoadReport, buffer: &mut [u8]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(buffer, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let levels: Vec<String> = report
        .levels
        .iter()
        .map(|l| l.concurrency.to_string())
        .collect();
    let throughput = [
        Series {
            name: "OUTPUT TOKENS/S",
            color: RGBColor(31, 119, 180),
            values: report
                .levels
                .iter()
                .map(|l| Some(l.output_tokens_per_second))
                .collect(),
        },
        Series {
            name: "REQUESTS/S",
            color: RGBColor(255, 127, 14),
            values: report
                .levels
                .iter()
                .map(|l| Some(l.requests_per_second))
                .collect(),
        },
    ];
    let latency = [
        Series {
            name: "TTFT P50",
            color: RGBColor(44, 160, 44),
            values: report
                .levels
                .iter()
                .map(|l| l.ttft_ms.map(|s| s.p50))
                .collect(),
        },
        Series {
            name: "TTFT P99",
            color: RGBColor(152, 223, 138),
            values: report
                .levels
                .iter()
                .map(|l| l.ttft_ms.map(|s| s.p99))
                .collect(),
        },
        Series {
            name: "ITL P50",
            color: RGBColor(214, 39, 40),
            values: report
                .levels
                .iter()
                .map(|l| l.itl_ms.map(|s| s.p50))
                .collect(),
        },
        Series {
            name: "ITL P99",
            color: RGBColor(255, 152, 150),
            values: report
                .levels
                .iter()
                .map(|l| l.itl_ms.map(|s| s.p99))
                .collect(),
        },
    ];
    panel(&top, "THROUGHPUT VS CONCURRENCY", &levels, &throughput)?;
    panel(&bottom, "LATENCY (MS) VS CONCURRENCY", &levels, &latency)?;
    root.present()?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    levels: &[String],
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let (width, height) = area.dim_in_pixel();
    let (width, height) = (width as i32, height as i32);
    let ymax = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0_f64, |a, &b| a.max(b));
    let step = nice_step(ymax / 5.0);
    let ytop = (ymax / step).ceil().max(1.0) * step;
    let n = levels.len().max(1);
    let x = |i: usize| {
        let inner_left = MARGIN_LEFT + X_INSET;
        let plot_w = width - inner_left - MARGIN_RIGHT - X_INSET;
        if n == 1 {
            inner_left + plot_w / 2
        } else {
            inner_left + (plot_w as f64 * i as f64 / (n - 1) as f64) as i32
        }
    };
    let y = |v: f64| {
        let plot_h = height - MARGIN_TOP - MARGIN_BOTTOM;
        height - MARGIN_BOTTOM - (plot_h as f64 * v / ytop) as i32
    };
    y_axis(area, width, ytop, step, y)?;
    for (i, level) in levels.iter().enumerate() {
        let label_x = x(i) - glyphs::text_width(level, SCALE) / 2;
        text(area, level, label_x, y(0.0) + 10, &BLACK)?;
    }
    text(area, title, MARGIN_LEFT, 12, &BLACK)?;
    let caption = "CONCURRENCY";
    text(
        area,
        caption,
        width - MARGIN_RIGHT - glyphs::text_width(caption, SCALE),
        y(0.0) + 30,
        &BLACK,
    )?;
    let entries: Vec<(&str, RGBColor)> = series.iter().map(|s| (s.name, s.color)).collect();
    legend(area, width, &entries)?;
    for s in series {
        let points: Vec<(i32, i32)> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (x(i), y(v))))
            .collect();
        area.draw(&PathElement::new(points.clone(), s.color.stroke_width(3)))?;
        for (px, py) in points {
            area.draw(&Rectangle::new(
                [(px - 4, py - 4), (px + 4, py + 4)],
                s.color.filled(),
            ))?;
        }
    }
    Ok(())
}

/// Horizontal grid lines with their labels every `step` up to `ytop`, and
/// the axes; `y` maps a value to its pixel row.
pub(crate) fn y_axis<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    width: i32,
    ytop: f64,
    step: f64,
    y: impl Fn(f64) -> i32,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let grid = RGBColor(225, 225, 225);
    let mut tick = 0.0;
    while tick <= ytop + step / 2.0 {
        let yy = y(tick);
        area.draw(&PathElement::new(
            vec![(MARGIN_LEFT, yy), (width - MARGIN_RIGHT, yy)],
            grid,
        ))?;
        let label = format_tick(tick);
        text(
            area,
            &label,
            MARGIN_LEFT - 8 - glyphs::text_width(&label, SCALE),
            yy - 7,
            &BLACK,
        )?;
        tick += step;
    }
    area.draw(&PathElement::new(
        vec![
            (MARGIN_LEFT, MARGIN_TOP),
            (MARGIN_LEFT, y(0.0)),
            (width - MARGIN_RIGHT, y(0.0)),
        ],
        BLACK,
    ))?;
    Ok(())
}

/// Colour boxes and names, right-aligned at the top of the panel.
pub(crate) fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    width: i32,
    entries: &[(&str, RGBColor)],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let mut legend_x = width - MARGIN_RIGHT;
    for (name, color) in entries.iter().rev() {
        legend_x -= glyphs::text_width(name, SCALE) + 40;
        area.draw(&Rectangle::new(
            [(legend_x, 14), (legend_x + 12, 26)],
            color.filled(),
        ))?;
        text(area, name, legend_x + 18, 13, &BLACK)?;
    }
    Ok(())
}

/// Draws `text` with its top-left corner at (`left`, `top`).
pub(crate) fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    left: i32,
    top: i32,
    color: &RGBColor,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    chart::text(area, text, (left, top), SCALE, color)?;
    Ok(())
}

/// A round step (1, 2 or 5 times a power of ten) near `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// An axis label: `5K`, `25`, `0.5`.
pub(crate) fn format_tick(v: f64) -> String {
    if v >= 1000.0 && (v / 1000.0).fract() == 0.0 {
        format!("{}K", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_and_ticks() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(13.0), 20.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(4000.0), 5000.0);
        assert_eq!(format_tick(5000.0), "5K");
        assert_eq!(format_tick(25.0), "25");
        assert_eq!(format_tick(0.5), "0.5");
    }
}
