//! The request that asks another engine to continue an answer: the
//! original request (as it went upstream) with the text streamed so far
//! appended, and its output limit less the tokens already streamed.

use serde_json::{Map, Value};

use super::Api;

/// The body that continues `text` (`tokens` chunks of it streamed) for
/// the request `original`, or why it cannot be built.
pub fn continuation_body(
    api: Api,
    original: &[u8],
    text: &str,
    tokens: u64,
) -> Result<Vec<u8>, &'static str> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(original) else {
        return Err("the request body is not a JSON object");
    };
    if body.get("n").and_then(number).is_some_and(|n| n > 1.0) {
        return Err("the request asks for several choices");
    }
    // A grammar or schema restarts from its beginning on the next engine.
    const STRUCTURED: [&str; 6] = [
        "response_format",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
    ];
    let constrained = |field: &&str| match body.get(*field) {
        None | Some(Value::Null) => false,
        Some(Value::Object(format)) if *field == "response_format" => {
            format.get("type").and_then(Value::as_str) != Some("text")
        }
        Some(_) => true,
    };
    if STRUCTURED.iter().any(constrained) {
        return Err("the request constrains the answer's structure");
    }
    if !text.is_empty() {
        match api {
            Api::Chat => continue_chat(&mut body, text)?,
            Api::Completions => continue_prompt(&mut body, text)?,
        }
    }
    for field in ["max_tokens", "max_completion_tokens"] {
        if let Some(limit) = body.get(field).and_then(number) {
            // At least one token: an engine refuses 0, and one that had
            // streamed its whole limit would have finished.
            let left = (limit.max(0.0) as u64).saturating_sub(tokens).max(1);
            body.insert(field.into(), Value::from(left));
        }
    }
    if let Some(least) = body.get("min_tokens").and_then(number) {
        let left = (least.max(0.0) as u64).saturating_sub(tokens);
        body.insert("min_tokens".into(), Value::from(left));
    }
    serde_json::to_vec(&body).map_err(|_| "the continuation could not be written")
}

/// A number given as a JSON number or a string of one.
fn number(value: &Value) -> Option<f64> {
    value
        .as_f64()
        .or_else(|| value.as_str()?.trim().parse().ok())
}

/// Chat: the text so far as the final assistant message, continued. A
/// request that continued its own final assistant message already has that
/// message extended.
fn continue_chat(body: &mut Map<String, Value>, text: &str) -> Result<(), &'static str> {
    // What the first engine echoed is not echoed again.
    body.remove("echo");
    let own = body.get("continue_final_message").and_then(Value::as_bool) == Some(true);
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return Err("the request has no messages");
    };
    if own {
        let last = messages.last_mut().and_then(Value::as_object_mut);
        let Some(last) =
            last.filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        else {
            return Err("the request continues a message that is not the assistant's");
        };
        let Some(Value::String(content)) = last.get_mut("content") else {
            return Err("the request continues a message that is not one text");
        };
        content.push_str(text);
        body.insert("add_generation_prompt".into(), Value::Bool(false));
        return Ok(());
    }
    let mut partial = Map::new();
    partial.insert("role".into(), Value::from("assistant"));
    partial.insert("content".into(), Value::from(text));
    messages.push(Value::Object(partial));
    body.insert("continue_final_message".into(), Value::Bool(true));
    body.insert("add_generation_prompt".into(), Value::Bool(false));
    Ok(())
}

/// Completions: the text so far after the prompt.
fn continue_prompt(body: &mut Map<String, Value>, text: &str) -> Result<(), &'static str> {
    if body.get("echo").and_then(Value::as_bool) == Some(true) {
        return Err("the request echoes its prompt");
    }
    match body.get_mut("prompt") {
        Some(Value::String(prompt)) => {
            prompt.push_str(text);
            Ok(())
        }
        Some(Value::Array(prompts)) if prompts.len() == 1 && prompts[0].is_string() => {
            let Some(Value::String(prompt)) = prompts.first_mut() else {
                return Err("the request has no text prompt");
            };
            prompt.push_str(text);
            Ok(())
        }
        _ => Err("the request's prompt is not one text"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(bytes: Vec<u8>) -> Value {
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn chat_continues_the_final_assistant_message() {
        let original = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":10}"#;
        let body = json(continuation_body(Api::Chat, original, "Hello the", 2).unwrap());
        assert_eq!(
            body["messages"],
            serde_json::json!([{"role":"user","content":"hi"},{"role":"assistant","content":"Hello the"}])
        );
        assert_eq!(body["continue_final_message"], true);
        assert_eq!(body["add_generation_prompt"], false);
        assert_eq!(body["max_tokens"], 8);
        assert_eq!(body["stream"], true);
    }

    #[test]
    fn nothing_streamed_sends_the_request_again() {
        let original = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4}"#;
        let body = json(continuation_body(Api::Chat, original, "", 0).unwrap());
        assert!(body.get("continue_final_message").is_none());
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        assert_eq!(body["max_completion_tokens"], 4);
    }

    #[test]
    fn completions_continue_the_prompt() {
        let body = json(
            continuation_body(
                Api::Completions,
                br#"{"prompt":"Once","max_tokens":3}"#,
                " upon",
                5,
            )
            .unwrap(),
        );
        assert_eq!(body["prompt"], "Once upon");
        assert_eq!(body["max_tokens"], 1, "never below one token");
        let body = json(
            continuation_body(Api::Completions, br#"{"prompt":["Once"]}"#, " upon", 1).unwrap(),
        );
        assert_eq!(body["prompt"], serde_json::json!(["Once upon"]));
    }

    #[test]
    fn a_continued_prefill_is_extended_and_echo_is_not_repeated() {
        let original = br#"{"messages":[{"role":"user","content":"JSON?"},{"role":"assistant","content":"Sure: {"}],"continue_final_message":true,"add_generation_prompt":false,"echo":true}"#;
        let body = json(continuation_body(Api::Chat, original, "\"a\":", 2).unwrap());
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
        assert_eq!(body["messages"][1]["content"], "Sure: {\"a\":");
        assert!(body.get("echo").is_none());
    }

    #[test]
    fn limits_given_as_floats_or_strings_are_lowered_too() {
        let original = br#"{"prompt":"x","max_tokens":10.0,"min_tokens":"4"}"#;
        let body = json(continuation_body(Api::Completions, original, " y", 3).unwrap());
        assert_eq!(
            (body["max_tokens"].as_u64(), body["min_tokens"].as_u64()),
            (Some(7), Some(1))
        );
        let err = continuation_body(Api::Chat, br#"{"n":"2","messages":[]}"#, "t", 1).unwrap_err();
        assert!(err.contains("several"), "{err}");
    }

    #[test]
    fn what_cannot_be_continued_says_why() {
        for (api, body, why) in [
            (
                Api::Chat,
                &br#"{"n":2,"messages":[]}"#[..],
                "several choices",
            ),
            (Api::Chat, br#"{"prompt":"x"}"#, "no messages"),
            (Api::Completions, br#"{"prompt":[1,2]}"#, "not one text"),
            (Api::Completions, br#"{"prompt":"x","echo":true}"#, "echoes"),
            (Api::Completions, b"[1]", "not a JSON object"),
            (
                Api::Chat,
                br#"{"messages":[],"response_format":{"type":"json_object"}}"#,
                "structure",
            ),
            (
                Api::Completions,
                br#"{"prompt":"x","guided_regex":"a+"}"#,
                "structure",
            ),
        ] {
            let err = continuation_body(api, body, "t", 1).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }
}
