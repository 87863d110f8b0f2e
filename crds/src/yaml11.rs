//! Which plain YAML scalars are not strings to a YAML 1.1 reader.
//!
//! serde_yaml quotes a string only when YAML 1.2's core schema would read it
//! as something else, but Helm and kubectl read manifests with go-yaml's
//! YAML 1.1 rules, under which an unquoted `ON`, `y`, `012` or `12:30` is a
//! boolean or a number. [`reads_as_non_string`] is the union of the YAML 1.1
//! type repository's implicit resolvers (`bool`, `null`, `int`, `float`,
//! `merge`, `value`, `timestamp`, as in <https://yaml.org/type/>) and the
//! YAML 1.2 core schema's; where the 1.1 patterns differ between the spec and
//! PyYAML the wider one is taken, because quoting a string too often is
//! harmless and quoting it too rarely changes its meaning.

/// Whether a YAML 1.1 or 1.2 reader takes the plain (unquoted) scalar `s`
/// for anything but the string `s`.
pub fn reads_as_non_string(s: &str) -> bool {
    is_bool(s) || is_null(s) || s == "<<" || s == "=" || is_int(s) || is_float(s) || is_timestamp(s)
}

/// `y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF`.
fn is_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// `~|null|Null|NULL|` (the empty scalar).
fn is_null(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

/// Strips one leading sign.
fn unsigned(s: &str) -> &str {
    s.strip_prefix(['-', '+']).unwrap_or(s)
}

fn all_nonempty(s: &str, allowed: impl Fn(char) -> bool) -> bool {
    !s.is_empty() && s.chars().all(allowed)
}

/// YAML 1.1 `int` (binary, octal with a leading `0`, decimal, hexadecimal,
/// base 60, all with `_` separators) and YAML 1.2's `0o` octal.
fn is_int(s: &str) -> bool {
    let u = unsigned(s);
    if let Some(bits) = u.strip_prefix("0b") {
        return all_nonempty(bits, |c| matches!(c, '0' | '1' | '_'));
    }
    if let Some(hex) = u.strip_prefix("0x") {
        return all_nonempty(hex, |c| c.is_ascii_hexdigit() || c == '_');
    }
    if let Some(octal) = u.strip_prefix("0o") {
        return all_nonempty(octal, |c| matches!(c, '0'..='7'));
    }
    if u.starts_with(|c: char| c.is_ascii_digit())
        && all_nonempty(u, |c| c.is_ascii_digit() || c == '_')
    {
        return true;
    }
    is_sexagesimal(u, false)
}

/// `[0-9][0-9_]*(:[0-5]?[0-9])+`, followed by `\.[0-9_]*` when `fraction`.
fn is_sexagesimal(u: &str, fraction: bool) -> bool {
    let (whole, frac) = if fraction {
        match u.split_once('.') {
            Some((whole, frac)) => (whole, Some(frac)),
            None => return false,
        }
    } else {
        (u, None)
    };
    if frac.is_some_and(|f| !f.chars().all(|c| c.is_ascii_digit() || c == '_')) {
        return false;
    }
    let mut parts = whole.split(':');
    let head = parts.next().unwrap_or_default();
    if !(head.starts_with(|c: char| c.is_ascii_digit())
        && all_nonempty(head, |c| c.is_ascii_digit() || c == '_'))
    {
        return false;
    }
    let mut sixties = 0;
    for part in parts {
        let bytes = part.as_bytes();
        let ok = match bytes {
            [d] => d.is_ascii_digit(),
            [t, d] => (b'0'..=b'5').contains(t) && d.is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
        sixties += 1;
    }
    sixties > 0
}

/// YAML 1.1 `float` (the spec's `[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?`
/// widened by PyYAML's `_`, base 60, `.inf`, `.nan`) and YAML 1.2's
/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(s: &str) -> bool {
    let u = unsigned(s);
    if matches!(u, ".inf" | ".Inf" | ".INF") || matches!(s, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    if is_sexagesimal(u, true) {
        return true;
    }
    // Mantissa and optional exponent.
    let (mantissa, exponent) = match u.find(['e', 'E']) {
        Some(at) => (&u[..at], Some(&u[at + 1..])),
        None => (u, None),
    };
    if let Some(exponent) = exponent {
        let digits = unsigned(exponent);
        if !all_nonempty(digits, |c| c.is_ascii_digit()) {
            return false;
        }
    }
    match mantissa.split_once('.') {
        // 1.1: `([0-9][0-9_]*)?\.[0-9._]*`; 1.2: `[0-9]*\.[0-9]*` with a digit.
        Some((whole, frac)) => {
            let whole_ok = whole.is_empty()
                || (whole.starts_with(|c: char| c.is_ascii_digit())
                    && whole.chars().all(|c| c.is_ascii_digit() || c == '_'));
            let frac_ok = frac
                .chars()
                .all(|c| c.is_ascii_digit() || c == '_' || c == '.');
            whole_ok && frac_ok
        }
        // 1.2 only: `[0-9]+[eE][-+]?[0-9]+`.
        None => exponent.is_some() && all_nonempty(mantissa, |c| c.is_ascii_digit()),
    }
}

/// YAML 1.1 `timestamp`: anything starting `[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}`
/// (the full pattern goes on to times and zones; its prefix is enough to
/// decide on quoting).
fn is_timestamp(s: &str) -> bool {
    let mut parts = s.splitn(3, '-');
    let (Some(year), Some(month), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let day_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    year.len() == 4
        && year.bytes().all(|b| b.is_ascii_digit())
        && (1..=2).contains(&month.len())
        && month.bytes().all(|b| b.is_ascii_digit())
        && (1..=2).contains(&day_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_1_1_booleans_and_nulls() {
        for s in [
            "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off",
            "Off", "OFF", "true", "True", "TRUE", "false", "False", "FALSE", "~", "null", "Null",
            "NULL", "", "<<", "=",
        ] {
            assert!(reads_as_non_string(s), "{s:?}");
        }
    }

    #[test]
    fn yaml_1_1_and_1_2_numbers_and_timestamps() {
        for s in [
            "0",
            "-1",
            "+12",
            "012",
            "0o17",
            "0b1010",
            "-0b1_0",
            "0x1F",
            "0xdead_beef",
            "1_000",
            "12:30",
            "190:20:30",
            "1.5",
            "-.5",
            ".5",
            "1.",
            "1_000.5",
            "6.8523015e+5",
            "1e3",
            "1E-3",
            "190:20:30.15",
            ".inf",
            "-.Inf",
            "+.INF",
            ".nan",
            ".NaN",
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "2002-1-1",
        ] {
            assert!(reads_as_non_string(s), "{s:?}");
        }
    }

    #[test]
    fn ordinary_strings_stay_plain() {
        for s in [
            "REDO",
            "READONLY",
            "auto",
            "nvidia",
            "60s",
            "1h",
            "Ready",
            "yes-please",
            "onion",
            "v1",
            "1.2.3a",
            "0x",
            "0b",
            "0o8",
            "12:60",
            "1:2:",
            "e3",
            "1e",
            "1e+",
            "+-1",
            "-",
            "a.b",
            "2001-12",
            "200-12-14",
            "x: y",
            ".infinity",
            "_1",
        ] {
            assert!(!reads_as_non_string(s), "{s:?}");
        }
    }
}
