//! Byte sizes: parsing flag values such as `8Gi` or `500MB`, and printing
//! sizes and rates in decimal units (MB = 10^6 bytes, GB/s = 10^9 bytes/s).

use std::time::Duration;

/// Parses a byte count: a plain integer, or one with a decimal (`k`, `M`,
/// `G`, `T`, optionally followed by `B`) or binary (`Ki`, `Mi`, `Gi`, `Ti`)
/// suffix, as Kubernetes quantities are written.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let multiplier: u64 = match suffix.trim() {
        "" | "B" => 1,
        "k" | "K" | "kB" | "KB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "T" | "TB" => 1_000_000_000_000,
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        "Ti" | "TiB" => 1 << 40,
        other => return Err(format!("unknown size suffix {other:?} in {text:?}")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 1048576, 512Mi, 8Gi, 2GB)"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// `bytes` in decimal megabytes with one decimal, e.g. `209.7 MB`.
pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// Throughput in decimal gigabytes per second with two decimals.
pub fn gigabytes_per_second(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return "n/a GB/s".to_owned();
    }
    format!("{:.2} GB/s", bytes as f64 / secs / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_decimal_and_binary_sizes() {
        assert_eq!(parse_bytes("1048576"), Ok(1_048_576));
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("8Gi"), Ok(8 << 30));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_bytes("1.5k"), Ok(1_500));
        assert!(parse_bytes("ten").is_err());
        assert!(parse_bytes("5Xi").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn prints_decimal_units() {
        assert_eq!(megabytes(209_715_200), "209.7 MB");
        assert_eq!(
            gigabytes_per_second(3_000_000_000, Duration::from_secs(2)),
            "1.50 GB/s"
        );
        assert_eq!(gigabytes_per_second(1, Duration::ZERO), "n/a GB/s");
    }
}
