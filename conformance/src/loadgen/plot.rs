//! The optional PNG (`load --png`): per-second p50 (blue) and p99 (red)
//! latency over the run, on a white background with a light grid, tick
//! labels in milliseconds and seconds, and a legend. The bitmap backend here
//! has no fonts, so labels are drawn from a small built-in pixel font.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
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
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&buffer))
        .with_context(|| format!("cannot write {}", path.display()))
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
        text(&root, px - width - 8, py - 7, &label, ink, SCALE)?;
    }
    for s in [0, seconds / 2, seconds] {
        let (px, py) = chart.backend_coord(&(f64::from(s), 0.0));
        let label = format!("{s} s");
        text(
            &root,
            px - text_width(&label, SCALE) / 2,
            py + 8,
            &label,
            ink,
            SCALE,
        )?;
    }
    text(&root, 80, 16, "latency ms", ink, SCALE)?;
    text(&root, 330, 16, "p50", P50, SCALE)?;
    text(&root, 420, 16, "p99", P99, SCALE)?;
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

/// 5×7 glyphs, one row per byte, the leftmost dot in bit 4.
fn glyph(c: char) -> [u8; 7] {
    match c {
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [30, 1, 1, 14, 1, 1, 30],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        'a' => [0, 0, 14, 1, 15, 17, 15],
        'c' => [0, 0, 14, 16, 16, 17, 14],
        'e' => [0, 0, 14, 17, 31, 16, 14],
        'l' => [12, 4, 4, 4, 4, 4, 14],
        'm' => [0, 0, 26, 21, 21, 17, 17],
        'n' => [0, 0, 22, 25, 17, 17, 17],
        'p' => [0, 0, 30, 17, 30, 16, 16],
        's' => [0, 0, 14, 16, 14, 1, 30],
        't' => [8, 8, 28, 8, 8, 9, 6],
        'y' => [0, 0, 17, 17, 15, 1, 14],
        _ => [0; 7],
    }
}

fn text_width(s: &str, scale: i32) -> i32 {
    s.chars().count() as i32 * 6 * scale
}

/// Draws `s` with its top-left corner at (`x`, `y`).
fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: i32,
    y: i32,
    s: &str,
    color: RGBColor,
    scale: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (i, c) in s.chars().enumerate() {
        let left = x + i as i32 * 6 * scale;
        for (row, bits) in glyph(c).iter().enumerate() {
            for col in 0..5 {
                if bits & (1 << (4 - col)) != 0 {
                    let (px, py) = (left + col * scale, y + row as i32 * scale);
                    area.draw(&Rectangle::new(
                        [(px, py), (px + scale - 1, py + scale - 1)],
                        color.filled(),
                    ))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(text_width("p50", 2), 36);
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
