//! Label and field selectors, as sent in `labelSelector` and
//! `fieldSelector` query parameters and as written in `spec.selector`.
//!
//! Label selectors support the full string syntax (`a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x,y)`, `a`, `!a`). Field selectors support `=`,
//! `==` and `!=` on any dotted path of the object (a real API server only
//! allows a few paths per kind; this one is more lenient). A missing field
//! compares as the empty string; numbers and booleans compare by their JSON
//! text.

use serde_json::{Map, Value};

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
enum LabelRequirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    /// Parses the query-string form.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_top_level(s) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(term)?);
        }
        Ok(LabelSelector(reqs))
    }

    /// From a map selector (`Service.spec.selector`): every pair must match.
    /// Non-string values never match.
    pub fn from_map(map: &Map<String, Value>) -> Self {
        LabelSelector(
            map.iter()
                .map(|(k, v)| {
                    LabelRequirement::Eq(k.clone(), v.as_str().unwrap_or("\u{0}").to_string())
                })
                .collect(),
        )
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() || k.chars().any(|c| c.is_whitespace() || "=!(),".contains(c)) {
        return Err(format!("invalid label key {k:?}"));
    }
    Ok(k.to_string())
}

fn parse_requirement(term: &str) -> Result<LabelRequirement, String> {
    if let Some(open) = term.find('(') {
        let close = term
            .rfind(')')
            .filter(|c| *c > open)
            .ok_or_else(|| format!("unbalanced parentheses in {term:?}"))?;
        if !term[close + 1..].trim().is_empty() {
            return Err(format!("unexpected text after ')' in {term:?}"));
        }
        let head = term[..open].trim();
        let (key, op) = head
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| format!("invalid set-based requirement {term:?}"))?;
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let key = valid_key(key)?;
        return match op.trim() {
            "in" => Ok(LabelRequirement::In(key, values)),
            "notin" => Ok(LabelRequirement::NotIn(key, values)),
            other => Err(format!("unknown set operator {other:?}")),
        };
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::NotExists(valid_key(key)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEq(valid_key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once("==") {
        return Ok(LabelRequirement::Eq(valid_key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once('=') {
        return Ok(LabelRequirement::Eq(valid_key(k)?, v.trim().to_string()));
    }
    Ok(LabelRequirement::Exists(valid_key(term)?))
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `path=value,path!=value`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, eq, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, true, v)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(format!("invalid field selector term {term:?}"));
            }
            reqs.push((path.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `obj` satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, value)| {
            let actual = field_text(obj, path);
            (actual == *value) == *eq
        })
    }
}

fn field_text(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn equality_and_set_based() {
        let l = labels(json!({"app": "web", "tier": "front"}));
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(ok("app!=db"));
        assert!(ok("app in (web, db)"));
        assert!(ok("app notin (db),!missing"));
        assert!(!ok("app in (db)"));
        assert!(!ok("tier notin (front,back)"));
        assert!(!ok("missing"));
        assert!(!ok("!app"));
        assert!(LabelSelector::parse("app in (x").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("app foo (x)").is_err());
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let ok = |s: &str| FieldSelector::parse(s).unwrap().matches(&pod);
        assert!(ok("metadata.name=p,metadata.namespace=ns"));
        assert!(ok("spec.nodeName==n1"));
        assert!(ok("spec.nodeName!=n2"));
        assert!(!ok("spec.nodeName="));
        assert!(ok("status.phase="));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
