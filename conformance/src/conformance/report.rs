//! Reports: one console line per check, a JSON document and JUnit XML.

use std::fmt::Write as _;

use super::{CheckResult, Outcome, RunReport};

/// The console line(s) for one check: `PASS id  description`, then the
/// evidence, indented, for failures and skips.
pub fn console_line(result: &CheckResult) -> String {
    let mut line = format!(
        "{} {:<30} {}",
        result.outcome.label(),
        result.id,
        result.description
    );
    if let Some(evidence) = &result.evidence {
        for part in evidence.lines() {
            let _ = write!(line, "\n       {part}");
        }
    }
    line
}

/// The JSON report.
pub fn json(report: &RunReport) -> String {
    let value = serde_json::json!({
        "gateway": report.gateway,
        "profile": report.profile,
        "model": report.model,
        "summary": {
            "passed": report.count(Outcome::Pass),
            "failed": report.count(Outcome::Fail),
            "skipped": report.count(Outcome::Skip),
        },
        "duration_ms": report.duration_ms,
        "checks": report.checks,
    });
    serde_json::to_string_pretty(&value).expect("a report always serializes")
}

/// The JUnit XML report: one `testsuite`, one `testcase` per check.
pub fn junit(report: &RunReport) -> String {
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"flexinfer-conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{}\">",
        report.checks.len(),
        report.count(Outcome::Fail),
        report.count(Outcome::Skip),
        seconds(report.duration_ms)
    );
    let _ = writeln!(
        xml,
        "  <testsuite name=\"flexinfer-conformance.{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{}\">",
        escape(&format!("{:?}", report.profile).to_lowercase()),
        report.checks.len(),
        report.count(Outcome::Fail),
        report.count(Outcome::Skip),
        seconds(report.duration_ms)
    );
    let _ = writeln!(
        xml,
        "    <properties><property name=\"gateway\" value=\"{}\"/></properties>",
        escape(&report.gateway)
    );
    for check in &report.checks {
        let class = check.id.split('.').next().unwrap_or(check.id);
        let _ = write!(
            xml,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\">",
            escape(class),
            escape(check.id),
            seconds(check.duration_ms)
        );
        let evidence = check.evidence.as_deref().unwrap_or("");
        match check.outcome {
            Outcome::Pass => {}
            Outcome::Fail => {
                let _ = write!(
                    xml,
                    "<failure message=\"{}\">{}</failure>",
                    escape(check.description),
                    escape(evidence)
                );
            }
            Outcome::Skip => {
                let _ = write!(xml, "<skipped message=\"{}\"/>", escape(evidence));
            }
        }
        xml.push_str("</testcase>\n");
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

fn seconds(ms: u64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

/// Escapes text for XML attributes and content, dropping characters XML 1.0 forbids.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Profile;
    use super::*;

    fn report() -> RunReport {
        RunReport {
            gateway: "http://127.0.0.1:1".into(),
            profile: Profile::Quick,
            model: Some("m".into()),
            checks: vec![
                CheckResult {
                    id: "a.ok",
                    description: "ok",
                    outcome: Outcome::Pass,
                    evidence: None,
                    duration_ms: 5,
                },
                CheckResult {
                    id: "b.bad",
                    description: "bad <one>",
                    outcome: Outcome::Fail,
                    evidence: Some("got \"x\" & <y>\u{1}".into()),
                    duration_ms: 1500,
                },
                CheckResult {
                    id: "c.skip",
                    description: "skip",
                    outcome: Outcome::Skip,
                    evidence: Some("why".into()),
                    duration_ms: 0,
                },
            ],
            duration_ms: 1505,
        }
    }

    #[test]
    fn summary_and_json() {
        let r = report();
        assert_eq!(r.summary_line(), "1 passed, 1 failed, 1 skipped");
        assert!(r.failed());
        let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(v["summary"]["failed"], 1);
        assert_eq!(v["checks"][1]["outcome"], "fail");
        assert_eq!(v["checks"][1]["id"], "b.bad");
        assert!(v["checks"][0].get("evidence").is_none());
    }

    #[test]
    fn junit_is_escaped() {
        let xml = junit(&report());
        assert!(xml.contains("tests=\"3\" failures=\"1\""));
        assert!(xml.contains("<testcase classname=\"b\" name=\"b.bad\" time=\"1.500\">"));
        assert!(xml.contains(
            "<failure message=\"bad &lt;one&gt;\">got &quot;x&quot; &amp; &lt;y&gt;</failure>"
        ));
        assert!(xml.contains("<skipped message=\"why\"/>"));
    }
}
