//! The optional PNG (`load --png`): per-second p50 (blue) and p99 (red)
//! latency over the run, on a white background with a light grid, tick
//! labels in milliseconds and seconds, and a legend, drawn in the shared
//! pixel font of [`flexinfer_service::chart`].

use std::path::Path;

use anyhow::{anyhow, Result};
use flexinfer_service::chart::glyphs::text_width;
use flexinfer_service::chart::{self, write_rgb};
use plotters::prelude::*;

use super::summary::Second;

/// Image size in pixels.
pub const SIZE: (u32, u32) = (900, 500);
/// Colour of the p50 line.
pub const P50: RGBColor = RGBColor(31, 119, 180);
/// Colour of the p99 line.
pub const P99: RGBColor = RGBColor(214, 39, 40);

/// Writes the latency chart of `timeline` to `path`.
pub fn write_png(timeline: &[Second], path: &Path) -> Result<()> {
    let (w, h) = SIZE;
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    draw(timeline, &mut buffer).map_err(|e| anyhow!("cannot draw the chart: {e}"))?;
    write_rgb(&buffer, SIZE, path)
}

fn draw(timeline: &[Second], buffer: &mut [u8]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(buffer, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let seconds = timeline.last().map_or(1, |t| t.second + 1).max(1);
    let top = timeline
        .iter()
        .map(|t| t.p99_ms)
        .fold(0.0_f64, f64::max)
        .max(0.001)
        * 1.1;
    let area = root.margin(50, 50, 90, 40);
    let mut chart =
        ChartBuilder::on(&area).build_cartesian_2d(0f64..f64::from(seconds), 0f64..top)?;
    // Grid: a line per second (at most 60) and per tenth of the latency range.
    let step = (seconds / 60).max(1);
    for s in (0..=seconds).step_by(step as usize) {
        let x = f64::from(s);
        chart.draw_series(LineSeries::new(
            [(x, 0.0), (x, top)],
            RGBColor(230, 230, 230),
        ))?;
    }
    for i in 0..=10 {
        let y = top * f64::from(i) / 10.0;
        chart.draw_series(LineSeries::new(
            [(0.0, y), (f64::from(seconds), y)],
            RGBColor(230, 230, 230),
        ))?;
    }
    let at = |t: &Second| f64::from(t.second) + 0.5;
    chart.draw_series(LineSeries::new(
        timeline.iter().map(|t| (at(t), t.p99_ms)),
        P99.stroke_width(2),
    ))?;
    chart.draw_series(LineSeries::new(
        timeline.iter().map(|t| (at(t), t.p50_ms)),
        P50.stroke_width(2),
    ))?;
    let ink = RGBColor(60, 60, 60);
    for i in [0, 5, 10] {
        let y = top * f64::from(i) / 10.0;
        let (px, py) = chart.backend_coord(&(0.0, y));
        let label = format_ms(y);
        let width = text_width(&label, SCALE);
        chart::text(&root, &label, (px - width - 8, py - 7), SCALE, &ink)?;
    }
    for s in [0, seconds / 2, seconds] {
        let (px, py) = chart.backend_coord(&(f64::from(s), 0.0));
        let label = format!("{s} s");
        let left = px - text_width(&label, SCALE) / 2;
        chart::text(&root, &label, (left, py + 8), SCALE, &ink)?;
    }
    chart::text(&root, "latency ms", (80, 16), SCALE, &ink)?;
    chart::text(&root, "p50", (330, 16), SCALE, &P50)?;
    chart::text(&root, "p99", (420, 16), SCALE, &P99)?;
    root.present()?;
    Ok(())
}

/// Pixel size of one font dot.
const SCALE: i32 = 2;

fn format_ms(ms: f64) -> String {
    if ms == 0.0 {
        "0".to_owned()
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexinfer_service::chart::glyphs::glyph;

    #[test]
    fn labels_fit_the_font() {
        for label in ["0.000", "12.5", "250", "3 s", "latency ms", "p50", "p99"] {
            for c in label.chars().filter(|c| *c != ' ') {
                assert_ne!(glyph(c), [0; 7], "no glyph for {c:?}");
            }
        }
        assert_eq!(format_ms(0.25), "0.250");
        assert_eq!(format_ms(0.0), "0");
        assert_eq!(format_ms(12.34), "12.3");
        assert_eq!(text_width("p50", 2), 34);
    }

    #[test]
    fn writes_a_png() {
        let timeline: Vec<Second> = (0..5)
            .map(|s| Second {
                second: s,
                requests: 100,
                errors: 0,
                p50_ms: 1.0 + f64::from(s),
                p99_ms: 3.0 + f64::from(s),
            })
            .collect();
        let path = std::env::temp_dir().join(format!("loadgen-plot-{}.png", std::process::id()));
        write_png(&timeline, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let _ = std::fs::remove_file(&path);
    }
}
