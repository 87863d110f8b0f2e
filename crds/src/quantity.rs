//! Numeric reading of Kubernetes quantities.
//!
//! Some spec fields (KV-cache watermarks, swap space) are
//! `resource.Quantity` so that manifests can write `"0.85"` or `850m`
//! without floating-point drift in the stored object. Policies need them as
//! numbers; [`to_f64`] converts.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The approximate value of a quantity (`"0.85"`, `"850m"`, `"4Gi"`,
/// `"1e3"`), or `None` when the string is not a valid quantity.
pub fn to_f64(quantity: &Quantity) -> Option<f64> {
    parse(&quantity.0)
}

/// Parses the canonical quantity grammar: a signed decimal number followed
/// by an optional binary-SI (`Ki`..`Ei`), decimal-SI (`n`, `u`, `m`, `k`,
/// `M`..`E`) or exponent (`e3`, `E-2`) suffix.
pub fn parse(value: &str) -> Option<f64> {
    let value = value.trim();
    let number_end = value
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '+' || c == '-') && i == 0)))
        .map_or(value.len(), |(i, _)| i);
    let (number, suffix) = value.split_at(number_end);
    if number.is_empty() || number == "+" || number == "-" {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    // Sub-unit suffixes divide so that `700m` is exactly `0.7`.
    let divisor = match suffix {
        "n" => 1e9,
        "u" => 1e6,
        "m" => 1e3,
        _ => 1.0,
    };
    let multiplier = match suffix {
        "" | "n" | "u" | "m" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().ok()?;
            return format!("{number}e{power}").parse().ok();
        }
        _ => return None,
    };
    Some(number * multiplier / divisor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: Option<f64>, expected: f64) {
        let actual = actual.expect("valid quantity");
        assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
    }

    #[test]
    fn parses_plain_and_suffixed_values() {
        close(parse("0.85"), 0.85);
        close(parse("850m"), 0.85);
        assert_eq!(parse("700m"), Some(0.7));
        close(parse("5e-1"), 0.5);
        close(parse("4"), 4.0);
        close(parse("4Gi"), 4.0 * 1024.0 * 1024.0 * 1024.0);
        close(parse("2k"), 2000.0);
        close(parse("1e3"), 1000.0);
        close(parse("-1.5"), -1.5);
        close(parse(".5"), 0.5);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "5Xi", "-", "1e"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
