//! The routing chart (`routing --plot`): bars grouped by strategy in three
//! panels, one per unit: prefix-cache hit rate (%), TTFT p50 and p99 (ms),
//! and load imbalance (busiest pod ÷ mean). Axes, legend and labels are
//! drawn by the helpers of [`crate::plot`].

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{
    legend, nice_step, text, write_rgb, y_axis, MARGIN_BOTTOM, MARGIN_LEFT, MARGIN_RIGHT,
    MARGIN_TOP, SCALE,
};
use flexinfer_service::chart::glyphs;

use super::report::RoutingReport;

/// Image size in pixels.
pub const SIZE: (u32, u32) = (1000, 1080);

/// One kind of bar in a panel.
struct Bars {
    name: &'static str,
    color: RGBColor,
    values: Vec<Option<f64>>,
}

/// Writes the chart of `report` to `path` as PNG.
pub fn write_png(report: &RoutingReport, path: &Path) -> Result<()> {
    let (w, h) = SIZE;
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    draw(report, &mut buffer).map_err(|e| anyhow::anyhow!("cannot draw the chart: {e}"))?;
    write_rgb(&buffer, SIZE, path)
}

fn draw(report: &RoutingReport, buffer: &mut [u8]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(buffer, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((3, 1));
    let names: Vec<String> = report
        .strategies
        .iter()
        .map(|s| s.strategy.clone())
        .collect();
    let of = |f: &dyn Fn(&super::report::StrategyReport) -> Option<f64>| -> Vec<Option<f64>> {
        report.strategies.iter().map(f).collect()
    };
    panel(
        &panels[0],
        "PREFIX-CACHE HIT RATE (%)",
        &names,
        &[Bars {
            name: "HIT RATE",
            color: RGBColor(31, 119, 180),
            values: of(&|s| s.hit_rate.map(|r| r * 100.0)),
        }],
    )?;
    panel(
        &panels[1],
        "TIME TO FIRST TOKEN (MS)",
        &names,
        &[
            Bars {
                name: "TTFT P50",
                color: RGBColor(44, 160, 44),
                values: of(&|s| s.ttft_ms.map(|t| t.p50)),
            },
            Bars {
                name: "TTFT P99",
                color: RGBColor(152, 223, 138),
                values: of(&|s| s.ttft_ms.map(|t| t.p99)),
            },
        ],
    )?;
    panel(
        &panels[2],
        "LOAD IMBALANCE (BUSIEST POD / MEAN)",
        &names,
        &[Bars {
            name: "IMBALANCE",
            color: RGBColor(214, 39, 40),
            values: of(&|s| s.imbalance),
        }],
    )?;
    root.present()?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    groups: &[String],
    bars: &[Bars],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let (width, height) = area.dim_in_pixel();
    let (width, height) = (width as i32, height as i32);
    let ymax = bars
        .iter()
        .flat_map(|b| b.values.iter().flatten())
        .fold(0.0_f64, |a, &b| a.max(b));
    let step = nice_step(ymax / 5.0);
    let ytop = (ymax / step).ceil().max(1.0) * step;
    let y = |v: f64| {
        let plot_h = height - MARGIN_TOP - MARGIN_BOTTOM;
        height - MARGIN_BOTTOM - (plot_h as f64 * v.clamp(0.0, ytop) / ytop) as i32
    };
    y_axis(area, width, ytop, step, y)?;
    text(area, title, MARGIN_LEFT, 12, &BLACK)?;
    let entries: Vec<(&str, RGBColor)> = bars.iter().map(|b| (b.name, b.color)).collect();
    legend(area, width, &entries)?;
    let n = groups.len().max(1) as i32;
    let plot_w = width - MARGIN_LEFT - MARGIN_RIGHT;
    let group_w = plot_w / n;
    let bar_w = (group_w * 7 / 10 / bars.len().max(1) as i32).max(2);
    for (g, name) in groups.iter().enumerate() {
        let center = MARGIN_LEFT + group_w * g as i32 + group_w / 2;
        let label = name.to_ascii_uppercase();
        text(
            area,
            &label,
            center - glyphs::text_width(&label, SCALE) / 2,
            y(0.0) + 12,
            &BLACK,
        )?;
        let left = center - bar_w * bars.len() as i32 / 2;
        for (k, b) in bars.iter().enumerate() {
            let Some(value) = b.values.get(g).copied().flatten() else {
                continue;
            };
            let x0 = left + bar_w * k as i32;
            area.draw(&Rectangle::new(
                [(x0 + 1, y(value)), (x0 + bar_w - 1, y(0.0))],
                b.color.filled(),
            ))?;
            let label = format_value(value);
            text(
                area,
                &label,
                x0 + bar_w / 2 - glyphs::text_width(&label, SCALE) / 2,
                y(value) - 18,
                &BLACK,
            )?;
        }
    }
    Ok(())
}

/// A bar's label: one decimal below 100, none above.
fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_labels() {
        assert_eq!(format_value(1234.4), "1234");
        assert_eq!(format_value(82.46), "82.5");
        assert_eq!(format_value(1.0), "1.0");
    }
}
