//! Tool calling as vLLM does it with a tool parser: the request's tools and
//! `tool_choice`, validated with vLLM's (or Anthropic's) messages; whether
//! the answer is a call; and the call itself, with arguments generated from
//! the tool's parameter schema, deterministically from a seed.

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::prefix_cache::BYTES_PER_TOKEN;
use super::synth::{splitmix64, word};

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The function's name.
    pub name: String,
    /// What it does, when given.
    pub description: Option<String>,
    /// Its parameters' JSON Schema, when given.
    pub parameters: Option<Value>,
    /// `strict`, when given (echoed by the Responses API).
    pub strict: Option<bool>,
}

/// What the request allows or forces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Never call (`"none"`, or no tools).
    None,
    /// The model decides (`"auto"`, the default with tools).
    Auto,
    /// Some tool must be called (`"required"`, Anthropic's `any`).
    Required,
    /// This function must be called.
    Named(String),
}

/// The tools of a request and its `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    /// Function tools, in request order.
    pub tools: Vec<Tool>,
    /// The request's choice, defaulted as the API does.
    pub choice: Choice,
    /// The request used chat's legacy `functions`/`function_call`.
    pub legacy: bool,
}

impl Default for Tools {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            choice: Choice::None,
            legacy: false,
        }
    }
}

const CHAT_USAGE: &str =
    r#"Correct usage: `{"type": "function", "function": {"name": "my_function"}}`"#;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message)
}

fn tool_list<'a>(tools: Option<&'a Value>, what: &str) -> Result<&'a [Value], ApiError> {
    match tools {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(bad(format!("`{what}` must be a list of tools."))),
    }
}

/// A tool from its `name`, `description`, parameter schema and `strict`;
/// 400 when the name is missing or the schema is not an object.
fn tool(spec: &Value, schema_key: &str, at: &str) -> Result<Tool, ApiError> {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(format!("{at}.name: Field required (a non-empty string).")))?;
    let parameters = match spec.get(schema_key) {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => Some(schema.clone()),
        Some(_) => {
            return Err(bad(format!(
                "{at}.{schema_key}: must be a JSON Schema object."
            )))
        }
    };
    Ok(Tool {
        name: name.to_owned(),
        description: spec
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        parameters,
        strict: spec.get("strict").and_then(Value::as_bool),
    })
}

impl Tools {
    /// Chat's `tools` and `tool_choice` (or the legacy `functions` and
    /// `function_call`), checked as vLLM checks them.
    pub fn from_chat(
        tools: Option<&Value>,
        choice: Option<&Value>,
        functions: Option<&Value>,
        function_call: Option<&Value>,
    ) -> Result<Self, ApiError> {
        if tools.is_none() && choice.is_none() && functions.is_some() {
            return Self::legacy(functions, function_call);
        }
        let mut parsed = Vec::new();
        for (i, spec) in tool_list(tools, "tools")?.iter().enumerate() {
            let at = format!("tools[{i}]");
            if spec
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("function")
                != "function"
            {
                return Err(bad(format!(
                    "{at}.type: only `function` tools are supported."
                )));
            }
            let function = spec
                .get("function")
                .ok_or_else(|| bad(format!("{at}.function: Field required.")))?;
            parsed.push(tool(function, "parameters", &format!("{at}.function"))?);
        }
        let choice = match choice {
            None | Some(Value::Null) if parsed.is_empty() => Choice::None,
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(_) if tools.is_none_or(Value::is_null) => {
                return Err(bad("When using `tool_choice`, `tools` must be set."))
            }
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "required" && parsed.is_empty() => Choice::None,
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(Value::Object(object)) => {
                let function = object.get("function").filter(|f| f.is_object()).ok_or_else(|| {
                    bad(format!(
                        "Invalid value for `function` in `tool_choice`! {CHAT_USAGE}"
                    ))
                })?;
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        bad(format!(
                            "Expected field `name` in `function` in `tool_choice`! {CHAT_USAGE}"
                        ))
                    })?;
                Choice::Named(name.to_owned())
            }
            Some(other) => {
                return Err(bad(format!(
                    "Invalid value for `tool_choice`: {other}! Only named tools, \"none\", \"auto\" or \"required\" are supported."
                )))
            }
        };
        Self::checked(parsed, choice, false, || {
            bad("The tool specified in `tool_choice` does not match any of the specified `tools`")
        })
    }

    /// Chat's deprecated `functions` and `function_call`.
    fn legacy(functions: Option<&Value>, call: Option<&Value>) -> Result<Self, ApiError> {
        let parsed = tool_list(functions, "functions")?
            .iter()
            .enumerate()
            .map(|(i, f)| tool(f, "parameters", &format!("functions[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let choice = match call {
            None | Some(Value::Null) if parsed.is_empty() => Choice::None,
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::Object(o)) => match o.get("name").and_then(Value::as_str) {
                Some(name) => Choice::Named(name.to_owned()),
                None => return Err(bad("`function_call` must name a function: {\"name\": ..}.")),
            },
            Some(other) => {
                return Err(bad(format!(
                    "Invalid value for `function_call`: {other}! Only \"none\", \"auto\" or {{\"name\": ..}} are supported."
                )))
            }
        };
        Self::checked(parsed, choice, true, || {
            bad("The function specified in `function_call` does not match any of the specified `functions`")
        })
    }

    /// The Responses API's `tools` and `tool_choice`. Tools of other types
    /// (built-in tools) are accepted and never called.
    pub fn from_responses(tools: Option<&Value>, choice: Option<&Value>) -> Result<Self, ApiError> {
        let mut parsed = Vec::new();
        for (i, spec) in tool_list(tools, "tools")?.iter().enumerate() {
            if spec.get("type").and_then(Value::as_str) == Some("function") {
                parsed.push(tool(spec, "parameters", &format!("tools[{i}]"))?);
            } else if !spec.is_object() {
                return Err(bad(format!("tools[{i}]: each tool must be an object.")));
            }
        }
        let choice = match choice {
            None | Some(Value::Null) if parsed.is_empty() => Choice::None,
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) if s == "none" => Choice::None,
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "required" && parsed.is_empty() => {
                return Err(bad("tool_choice is 'required' but no function tools were given."))
            }
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
                match o.get("name").and_then(Value::as_str) {
                    Some(name) => Choice::Named(name.to_owned()),
                    None => return Err(bad("tool_choice.name: Field required.")),
                }
            }
            Some(other) => {
                return Err(bad(format!(
                    "Invalid value for `tool_choice`: {other}! Only \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"name\": ..}} are supported."
                )))
            }
        };
        Self::checked(parsed, choice, false, || {
            bad("The tool specified in `tool_choice` does not match any of the specified `tools`")
        })
    }

    /// Anthropic's `tools` and `tool_choice` (`auto`, `any`, `tool`, `none`).
    /// Server tools (those with a versioned `type`) are accepted and never called.
    pub fn from_messages(tools: Option<&Value>, choice: Option<&Value>) -> Result<Self, ApiError> {
        let mut parsed = Vec::new();
        for (i, spec) in tool_list(tools, "tools")?.iter().enumerate() {
            match spec.get("type").and_then(Value::as_str) {
                None | Some("custom") => {
                    if spec.get("input_schema").is_none() {
                        return Err(bad(format!("tools.{i}.input_schema: Field required")));
                    }
                    parsed.push(tool(spec, "input_schema", &format!("tools.{i}"))?);
                }
                Some(_) => {}
            }
        }
        let choice = match choice {
            None | Some(Value::Null) if parsed.is_empty() => Choice::None,
            None | Some(Value::Null) => Choice::Auto,
            Some(_) if tools.is_none_or(Value::is_null) => {
                return Err(bad(
                    "tool_choice may only be specified while providing tools.",
                ))
            }
            Some(Value::Object(o)) => match o.get("type").and_then(Value::as_str) {
                Some("auto") => Choice::Auto,
                Some("any") => Choice::Required,
                Some("none") => Choice::None,
                Some("tool") => match o.get("name").and_then(Value::as_str) {
                    Some(name) => Choice::Named(name.to_owned()),
                    None => return Err(bad("tool_choice.name: Field required")),
                },
                _ => {
                    return Err(bad(
                        "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                    ))
                }
            },
            Some(_) => return Err(bad("tool_choice: Input should be an object")),
        };
        Self::checked(parsed, choice, false, || {
            bad("tool_choice.name: the named tool is not among `tools`.")
        })
    }

    fn checked(
        tools: Vec<Tool>,
        choice: Choice,
        legacy: bool,
        unknown: impl FnOnce() -> ApiError,
    ) -> Result<Self, ApiError> {
        if let Choice::Named(name) = &choice {
            if !tools.iter().any(|t| &t.name == name) {
                return Err(unknown());
            }
        }
        Ok(Self {
            tools,
            choice,
            legacy,
        })
    }

    /// The tool to call, if any. `Required` and `Named` always call (the
    /// first tool, or the named one); `Auto` calls the first tool when the
    /// conversation ends with a user turn (`user_turn`) and answers with
    /// text after a tool result.
    pub fn pick(&self, user_turn: bool) -> Option<&Tool> {
        match &self.choice {
            Choice::None => None,
            Choice::Auto if !user_turn => None,
            Choice::Auto | Choice::Required => self.tools.first(),
            Choice::Named(name) => self.tools.iter().find(|t| &t.name == name),
        }
    }
}

/// A decided call: the function and its arguments, serialized once.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function called.
    pub name: String,
    /// The arguments, satisfying the tool's parameter schema.
    pub input: Value,
    /// `input` as the JSON text APIs carry in `arguments`.
    pub arguments: String,
    /// Random part of the call's ids, shared by its choices.
    pub id_seed: u128,
    /// Whether the request named the tool (vLLM then ends chat choices with
    /// `stop` rather than `tool_calls`).
    pub named: bool,
    /// Chat's legacy `function_call` instead of `tool_calls`.
    pub legacy: bool,
}

impl ToolCall {
    /// The call of `tool` with arguments generated from `seed`.
    pub fn new(tool: &Tool, tools: &Tools, seed: u64) -> Self {
        let schema = tool.parameters.clone().unwrap_or_else(|| json!({}));
        let input = arguments(&schema, seed ^ super::synth::seed(&tool.name, ""));
        let input = if input.is_object() { input } else { json!({}) };
        Self {
            name: tool.name.clone(),
            arguments: input.to_string(),
            input,
            id_seed: rand::random(),
            named: matches!(tools.choice, Choice::Named(_)),
            legacy: tools.legacy,
        }
    }

    /// Tokens the call counts as: one per fragment of its arguments.
    pub fn tokens(&self) -> u32 {
        u32::try_from(fragments(&self.arguments).len()).unwrap_or(u32::MAX)
    }

    /// Fragment `token` of the arguments text (empty past the end).
    pub fn fragment(&self, token: u32) -> &str {
        fragments(&self.arguments)
            .get(token as usize)
            .copied()
            .unwrap_or("")
    }

    /// The call's id with `prefix` (such as `chatcmpl-tool-`, `call_`, `toolu_`)
    /// for choice `index`.
    pub fn id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}{:032x}", self.id_seed.wrapping_add(index as u128))
    }
}

/// The arguments text cut into pieces of about one token (4 bytes), on
/// character boundaries, as streamed deltas carry them.
pub fn fragments(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + BYTES_PER_TOKEN).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    if out.is_empty() {
        out.push("");
    }
    out
}

/// Deepest nesting generated; beyond it only required members are filled.
const MAX_DEPTH: usize = 6;

/// A value satisfying the JSON Schema `schema` (types, `required`, `enum`,
/// `const`, `default`, bounds, `multipleOf`, string lengths and common
/// formats, nested objects and arrays, `anyOf`/`oneOf`/`allOf`, local
/// `$ref`s), the same for the same seed. `pattern` is not honoured.
pub fn arguments(schema: &Value, seed: u64) -> Value {
    Generator {
        root: schema.clone(),
        state: seed,
    }
    .value(schema, 0)
}

struct Generator {
    root: Value,
    state: u64,
}

impl Generator {
    fn next(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// The target of a local `$ref` (`#/...`), or `{}` when it has none.
    fn target(&self, reference: &str) -> Value {
        reference
            .strip_prefix('#')
            .and_then(|p| self.root.pointer(p))
            .cloned()
            .unwrap_or_else(|| json!({}))
    }

    fn value(&mut self, schema: &Value, depth: usize) -> Value {
        let Some(object) = schema.as_object() else {
            return Value::Object(Map::new());
        };
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            // A recursive schema ends in empty objects once deep enough.
            if depth > 2 * MAX_DEPTH {
                return Value::Object(Map::new());
            }
            let target = self.target(reference);
            return self.value(&target, depth + 1);
        }
        if let Some(constant) = object.get("const") {
            return constant.clone();
        }
        if let Some(Value::Array(options)) = object.get("enum") {
            if !options.is_empty() {
                let pick = self.below(options.len() as u64) as usize;
                return options[pick].clone();
            }
        }
        if let Some(default) = object.get("default") {
            return default.clone();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = object.get(key) {
                let usable: Vec<&Value> = options
                    .iter()
                    .filter(|o| o.get("type") != Some(&json!("null")))
                    .collect();
                if !usable.is_empty() {
                    let pick = self.below(usable.len() as u64) as usize;
                    return self.value(usable[pick], depth);
                }
            }
        }
        if let Some(Value::Array(parts)) = object.get("allOf") {
            let merged = self.merge(object, parts);
            return self.value_of(&merged, depth);
        }
        self.value_of(object, depth)
    }

    /// `allOf`: the parts' members merged into one object schema.
    fn merge(&self, base: &Map<String, Value>, parts: &[Value]) -> Map<String, Value> {
        let mut merged = base.clone();
        merged.remove("allOf");
        for part in parts {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(reference) => self.target(reference),
                None => part.clone(),
            };
            let Value::Object(part) = part else {
                continue;
            };
            for (key, value) in part {
                match (key.as_str(), merged.get_mut(&key), value) {
                    ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                        mine.extend(theirs);
                    }
                    ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                        mine.extend(theirs);
                    }
                    (_, None, value) => {
                        merged.insert(key, value);
                    }
                    _ => {}
                }
            }
        }
        merged
    }

    fn value_of(&mut self, schema: &Map<String, Value>, depth: usize) -> Value {
        let kind = match schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(types)) => types
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ if schema.contains_key("properties") => "object",
            _ if schema.contains_key("items") => "array",
            _ => "string",
        };
        match kind {
            "object" => self.object(schema, depth),
            "array" => self.array(schema, depth),
            "integer" => self.integer(schema),
            "number" => self.number(schema),
            "boolean" => Value::Bool(self.below(2) == 1),
            "null" => Value::Null,
            _ => self.string(schema),
        }
    }

    fn object(&mut self, schema: &Map<String, Value>, depth: usize) -> Value {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        let Some(Value::Object(properties)) = schema.get("properties") else {
            return Value::Object(out);
        };
        for (name, property) in properties {
            let wanted = required.contains(&name.as_str());
            // Optional members: about half of them, none beyond MAX_DEPTH.
            if wanted || (depth < MAX_DEPTH && self.below(2) == 1) {
                out.insert(name.clone(), self.value(property, depth + 1));
            }
        }
        Value::Object(out)
    }

    fn array(&mut self, schema: &Map<String, Value>, depth: usize) -> Value {
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(min + 3)
            .max(min);
        let extra = if depth >= MAX_DEPTH {
            0
        } else {
            self.below(max.min(min + 3) - min + 1)
        };
        let count = (min + extra).min(64);
        let unique = schema.get("uniqueItems") == Some(&Value::Bool(true));
        let prefix = schema.get("prefixItems").and_then(Value::as_array);
        let any = json!({});
        let items = schema.get("items").unwrap_or(&any);
        let mut out: Vec<Value> = Vec::new();
        let mut tries = 0;
        while (out.len() as u64) < count && tries < count * 8 + 8 {
            tries += 1;
            let item_schema = prefix.and_then(|p| p.get(out.len())).unwrap_or(items);
            let item = self.value(item_schema, depth + 1);
            if unique && out.contains(&item) {
                continue;
            }
            out.push(item);
        }
        Value::Array(out)
    }

    fn bounds(schema: &Map<String, Value>, default_span: f64) -> (f64, f64) {
        let get = |k: &str| schema.get(k).and_then(Value::as_f64);
        let low = get("minimum").or(get("exclusiveMinimum").map(|v| v + 1.0));
        let high = get("maximum").or(get("exclusiveMaximum").map(|v| v - 1.0));
        match (low, high) {
            (Some(l), Some(h)) => (l, h.max(l)),
            (Some(l), None) => (l, l + default_span),
            (None, Some(h)) => (h - default_span, h),
            (None, None) => (0.0, default_span),
        }
    }

    fn integer(&mut self, schema: &Map<String, Value>) -> Value {
        let (low, high) = Self::bounds(schema, 100.0);
        let (low, high) = (low.ceil() as i64, high.floor() as i64);
        let step = schema
            .get("multipleOf")
            .and_then(Value::as_f64)
            .filter(|m| *m >= 1.0)
            .map_or(1, |m| m as i64);
        if high < low {
            return Value::from(low);
        }
        let first = low.div_euclid(step) * step + if low.rem_euclid(step) == 0 { 0 } else { step };
        let slots = if first > high {
            0
        } else {
            (high - first) / step + 1
        };
        if slots == 0 {
            return Value::from(low);
        }
        Value::from(first + self.below(slots as u64) as i64 * step)
    }

    fn number(&mut self, schema: &Map<String, Value>) -> Value {
        if schema.contains_key("multipleOf") {
            return self.integer(schema);
        }
        let get = |k: &str| schema.get(k).and_then(Value::as_f64);
        let low = get("minimum")
            .or(get("exclusiveMinimum").map(|v| v + 0.01))
            .unwrap_or(0.0);
        let high = get("maximum")
            .or(get("exclusiveMaximum").map(|v| v - 0.01))
            .unwrap_or(low + 100.0)
            .max(low);
        let fraction = self.below(1001) as f64 / 1000.0;
        let value = ((low + (high - low) * fraction) * 100.0).round() / 100.0;
        serde_json::Number::from_f64(value.clamp(low, high)).map_or(Value::from(0), Value::Number)
    }

    fn string(&mut self, schema: &Map<String, Value>) -> Value {
        let text = match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => "2025-01-01T12:00:00Z".to_owned(),
            Some("date") => "2025-01-01".to_owned(),
            Some("time") => "12:00:00Z".to_owned(),
            Some("email") => format!("{}@example.com", word(self.next())),
            Some("uri" | "url") => format!("https://example.com/{}", word(self.next())),
            Some("uuid") => {
                let n = (u128::from(self.next()) << 64) | u128::from(self.next());
                let h = format!("{n:032x}");
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                )
            }
            Some("ipv4") => "192.0.2.1".to_owned(),
            _ => {
                let words = 1 + self.below(3);
                (0..words)
                    .map(|_| word(self.next()))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = schema
            .get("maxLength")
            .and_then(Value::as_u64)
            .map(|m| m as usize);
        let mut chars: Vec<char> = text.chars().collect();
        while chars.len() < min {
            chars.push('x');
        }
        if let Some(max) = max {
            chars.truncate(max);
        }
        Value::String(chars.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_tools() -> Value {
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    }

    #[test]
    fn chat_choices_follow_vllm() {
        let tools = chat_tools();
        let auto = Tools::from_chat(Some(&tools), None, None, None).expect("auto");
        assert_eq!(auto.choice, Choice::Auto);
        assert!(auto.pick(true).is_some() && auto.pick(false).is_none());
        let named = json!({"type": "function", "function": {"name": "f"}});
        let named = Tools::from_chat(Some(&tools), Some(&named), None, None).expect("named");
        assert_eq!(named.pick(false).map(|t| t.name.as_str()), Some("f"));
        let none = Tools::from_chat(Some(&tools), Some(&json!("none")), None, None).expect("none");
        assert!(none.pick(true).is_none());
        for (tools, choice) in [
            (None, json!("required")),
            (
                Some(chat_tools()),
                json!({"type": "function", "function": {"name": "g"}}),
            ),
            (Some(chat_tools()), json!({"type": "function"})),
            (Some(chat_tools()), json!("sometimes")),
            (Some(json!([{"type": "function"}])), json!("auto")),
            (
                Some(json!([{"type": "function", "function": {"name": "f", "parameters": 3}}])),
                json!("auto"),
            ),
        ] {
            let error =
                Tools::from_chat(tools.as_ref(), Some(&choice), None, None).expect_err("invalid");
            assert_eq!(error.status, 400, "{choice}");
        }
        let legacy = json!([{"name": "f"}]);
        let legacy = Tools::from_chat(None, None, Some(&legacy), None).expect("legacy");
        assert!(legacy.legacy && legacy.pick(true).is_some());
    }

    #[test]
    fn responses_and_messages_choices() {
        let tools = json!([{"type": "function", "name": "f"}, {"type": "web_search"}]);
        let required = Tools::from_responses(Some(&tools), Some(&json!("required"))).expect("ok");
        assert_eq!(required.tools.len(), 1);
        assert!(Tools::from_responses(None, Some(&json!("required"))).is_err());
        let unknown = json!({"type": "function", "name": "g"});
        assert!(Tools::from_responses(Some(&tools), Some(&unknown)).is_err());
        let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        let any = Tools::from_messages(Some(&tools), Some(&json!({"type": "any"}))).expect("any");
        assert_eq!(any.choice, Choice::Required);
        assert!(Tools::from_messages(None, Some(&json!({"type": "any"}))).is_err());
        assert!(Tools::from_messages(Some(&json!([{"name": "f"}])), None).is_err());
        let tool = json!({"type": "tool", "name": "g"});
        assert!(Tools::from_messages(Some(&tools), Some(&tool)).is_err());
    }

    #[test]
    fn arguments_satisfy_the_schema_and_are_deterministic() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 12, "maxLength": 20},
                "unit": {"enum": ["c", "f"]},
                "kind": {"const": "exact"},
                "count": {"type": "integer", "minimum": 3, "maximum": 9, "multipleOf": 3},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
                "nested": {"$ref": "#/$defs/inner"},
                "either": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
                "mode": {"type": "string", "default": "fast"}
            },
            "required": ["city", "unit", "kind", "count", "ratio", "when", "tags", "nested", "either", "mode"],
            "$defs": {"inner": {"allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": ["null", "boolean"]}}, "required": ["b"]}
            ]}}
        });
        for seed in 0..50 {
            let v = arguments(&schema, seed);
            assert_eq!(v, arguments(&schema, seed));
            let city = v["city"].as_str().expect("city").chars().count();
            assert!((12..=20).contains(&city), "{v}");
            assert!(v["unit"] == "c" || v["unit"] == "f");
            assert_eq!(v["kind"], "exact");
            assert!(
                [3, 6, 9].contains(&v["count"].as_i64().expect("count")),
                "{v}"
            );
            let ratio = v["ratio"].as_f64().expect("ratio");
            assert!(ratio > 0.0 && ratio <= 1.0, "{v}");
            assert_eq!(v["when"], "2025-01-01T12:00:00Z");
            assert_eq!(v["tags"].as_array().map(Vec::len), Some(2));
            assert!(
                v["nested"]["a"].is_i64() && v["nested"]["b"].is_boolean(),
                "{v}"
            );
            assert!(v["either"].is_boolean());
            assert_eq!(v["mode"], "fast");
        }
        assert_ne!(arguments(&schema, 1), arguments(&schema, 2));
        let recursive = json!({"$ref": "#", "type": "object"});
        assert!(arguments(&recursive, 3).is_object());
    }

    #[test]
    fn fragments_rebuild_the_text() {
        for text in ["", "{}", "{\"city\":\"Zürich — ok\"}"] {
            assert_eq!(fragments(text).concat(), text);
            assert!(fragments(text)
                .iter()
                .all(|f| f.len() <= BYTES_PER_TOKEN + 3));
        }
        let tool = Tool {
            name: "f".into(),
            description: None,
            parameters: None,
            strict: None,
        };
        let call = ToolCall::new(&tool, &Tools::default(), 7);
        assert_eq!(call.arguments, "{}");
        assert_eq!(call.tokens(), 1);
        assert!(call.id("toolu_", 0).starts_with("toolu_"));
    }
}
