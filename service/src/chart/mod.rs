//! What the charts of the command-line tools share (feature `chart`):
//! writing an RGB buffer as PNG and drawing labels in a built-in 5×7 pixel
//! font, since plotters' bitmap backend has no fonts of its own.

pub mod glyphs;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Encodes an RGB buffer of `size` pixels as a PNG file at `path`.
pub fn write_rgb(buffer: &[u8], (w, h): (u32, u32), path: &Path) -> Result<()> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(buffer))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Draws `text` at `scale` with its top-left corner at (`left`, `top`).
pub fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    (left, top): (i32, i32),
    scale: i32,
    color: &RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (dx, dy) in glyphs::pixels(text, scale) {
        area.draw_pixel((left + dx, top + dy), color)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_becomes_pixels_in_a_png() {
        let (w, h) = (40u32, 12u32);
        let mut buffer = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
            text(&root, "P50", (1, 1), 1, &BLACK).unwrap();
            root.present().unwrap();
        }
        let dark = buffer.chunks(3).filter(|px| px[0] == 0).count();
        assert_eq!(dark, glyphs::pixels("P50", 1).count());
        let path = std::env::temp_dir().join(format!("chart-{}.png", std::process::id()));
        write_rgb(&buffer, (w, h), &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let _ = std::fs::remove_file(&path);
    }
}
