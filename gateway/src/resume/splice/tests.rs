use super::*;

fn chat_event(id: &str, created: u64, delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\
         \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
    )
}

fn live(api: Api) -> StreamResume {
    let mut s = StreamResume::new(api);
    s.begin(true);
    s
}

fn filter(s: &mut StreamResume, chunk: &str, end: bool) -> Result<String, StreamFault> {
    let mut body = Some(Bytes::from(chunk.to_owned()));
    s.filter(&mut body, end)?;
    Ok(body
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .unwrap_or_default())
}

fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn whole_events_pass_untouched_and_a_cut_one_waits() {
    let mut s = live(Api::Chat);
    let role = chat_event("a", 1, r#"{"role":"assistant","content":""}"#, "null");
    let mut body = Some(Bytes::from(role.clone()));
    let before = body.as_ref().unwrap().as_ptr();
    s.filter(&mut body, false).unwrap();
    assert_eq!(body.as_ref().unwrap().as_ptr(), before, "not copied");
    let token = chat_event("a", 1, r#"{"content":"the"}"#, "null");
    let (head, tail) = token.split_at(20);
    assert_eq!(filter(&mut s, head, false).unwrap(), "");
    assert_eq!(filter(&mut s, tail, false).unwrap(), token);
    assert_eq!(s.transcript().text, "the");
    assert_eq!(s.transcript().tokens, 1);
}

#[test]
fn a_resumed_chat_stream_reads_as_one_answer() {
    let mut s = live(Api::Chat);
    let first = [
        chat_event("first", 100, r#"{"role":"assistant","content":""}"#, "null"),
        chat_event("first", 100, r#"{"content":"the"}"#, "null"),
        chat_event("first", 100, r#"{"content":" model"}"#, "null"),
    ]
    .concat();
    let cut = chat_event("first", 100, r#"{"content":" lost"}"#, "null");
    let sent = filter(&mut s, &format!("{first}{}", &cut[..30]), false).unwrap();
    assert_eq!(sent, first, "the cut event is held back");
    let original = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}"#;
    let Next::Continue(body) = s.next(|| Bytes::from_static(original)) else {
        panic!("resumable")
    };
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["messages"][1]["content"], "the model");
    assert_eq!(body["max_tokens"], 3);
    s.begin(true);
    let second = [
        chat_event(
            "second",
            200,
            r#"{"role":"assistant","content":""}"#,
            "null",
        ),
        chat_event("second", 200, r#"{"content":" answers"}"#, "null"),
        chat_event("second", 200, r#"{}"#, "\"stop\""),
        "data: {\"id\":\"second\",\"created\":200,\"model\":\"m\",\"choices\":[],\
         \"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1,\"total_tokens\":13}}\n\n"
            .to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let spliced = filter(&mut s, &second, true).unwrap();
    assert!(spliced.ends_with("data: [DONE]\n\n"));
    let got = events(&spliced);
    assert_eq!(got.len(), 3, "the second role chunk is dropped: {spliced}");
    for e in &got {
        assert_eq!(
            (e["id"].as_str(), e["created"].as_u64()),
            (Some("first"), Some(100))
        );
    }
    assert_eq!(
        got[0]["choices"][0]["delta"],
        serde_json::json!({"content": " answers"})
    );
    assert_eq!(got[1]["choices"][0]["finish_reason"], "stop");
    // Both engines' work: the first prefilled 12 - 2 and streamed 2.
    assert_eq!(
        got[2]["usage"],
        serde_json::json!({"prompt_tokens": 22, "completion_tokens": 3, "total_tokens": 25})
    );
    assert_eq!(s.transcript().text, "the model answers");
    assert_eq!(s.resumes(), 1);
}

#[test]
fn an_error_event_mid_stream_is_a_fault_and_what_came_before_waits() {
    let mut s = live(Api::Completions);
    let ok = "data: {\"id\":\"k\",\"created\":1,\"choices\":[{\"index\":0,\"text\":\"Once\"}]}\n\n";
    let error = "data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n";
    assert_eq!(
        filter(&mut s, &format!("{ok}{error}data: [DONE]\n\n"), true),
        Err(StreamFault)
    );
    let Next::Continue(body) = s.next(|| Bytes::from_static(br#"{"prompt":"Say:","stream":true}"#))
    else {
        panic!("resumable")
    };
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["prompt"],
        "Say:Once"
    );
    s.begin(true);
    let next =
        "data: {\"id\":\"z\",\"created\":9,\"choices\":[{\"index\":0,\"text\":\" upon\"}]}\n\n";
    let sent = filter(&mut s, next, false).unwrap();
    let got = events(&sent);
    assert_eq!(got.len(), 2, "{sent}");
    assert_eq!(got[0]["choices"][0]["text"], "Once");
    assert_eq!(
        (got[1]["id"].as_str(), got[1]["created"].as_u64()),
        (Some("k"), Some(1))
    );
}

#[test]
fn a_finished_answer_only_gets_its_end() {
    let mut s = live(Api::Chat);
    filter(
        &mut s,
        &chat_event("a", 1, r#"{"content":"x"}"#, "\"stop\""),
        false,
    )
    .unwrap();
    assert_eq!(
        s.next(Bytes::new),
        Next::Close(Bytes::from_static(b"data: [DONE]\n\n"))
    );
}

#[test]
fn what_cannot_be_continued_fails_with_its_reason() {
    let mut s = live(Api::Chat);
    filter(
        &mut s,
        &chat_event("a", 1, r#"{"tool_calls":[{"index":0}]}"#, "null"),
        false,
    )
    .unwrap();
    assert_eq!(s.next(Bytes::new), Next::Fail("the answer is a tool call"));
    let mut s = live(Api::Chat);
    filter(
        &mut s,
        &chat_event("a", 1, r#"{"content":"x"}"#, "null"),
        false,
    )
    .unwrap();
    assert!(matches!(
        s.next(|| Bytes::from_static(br#"{"n":3,"messages":[]}"#)),
        Next::Fail(why) if why.contains("several")
    ));
}

#[test]
fn events_end_with_a_blank_line_of_either_kind() {
    assert_eq!(event_len(b"data: x\n\nrest"), Some(9));
    assert_eq!(event_len(b"data: x\r\n\r\nrest"), Some(11));
    assert_eq!(event_len(b"data: x\n"), None);
    assert_eq!(data_of(b": comment\n\n"), None);
    assert_eq!(
        data_of(b"event: e\ndata: a\ndata: b\n\n").as_deref(),
        Some(&b"a\nb"[..])
    );
}

#[test]
fn an_engine_that_never_ends_an_event_is_passed_on_and_not_resumed() {
    let mut s = live(Api::Chat);
    let endless = "x".repeat(MAX_EVENT / 2 + 1);
    assert_eq!(
        filter(&mut s, &endless, false).unwrap(),
        "",
        "held while small"
    );
    let passed = filter(&mut s, &endless, false).unwrap();
    assert_eq!(passed.len(), 2 * endless.len(), "then passed as it came");
    assert!(matches!(s.next(Bytes::new), Next::Fail(why) if why.contains("1 MiB")));
}

#[test]
fn an_engine_that_died_before_its_first_event_leaves_the_role_chunk_to_the_next() {
    let mut s = live(Api::Chat);
    assert_eq!(filter(&mut s, "", false).unwrap(), "");
    let original = br#"{"messages":[{"role":"user","content":"hi"}]}"#;
    assert!(matches!(
        s.next(|| Bytes::from_static(original)),
        Next::Continue(_)
    ));
    s.begin(true);
    let sent = filter(
        &mut s,
        &chat_event("b", 2, r#"{"role":"assistant","content":""}"#, "null"),
        false,
    )
    .unwrap();
    assert_eq!(events(&sent)[0]["choices"][0]["delta"]["role"], "assistant");
}

#[test]
fn an_answer_cut_after_its_done_is_not_given_a_second_one() {
    let mut s = live(Api::Chat);
    filter(&mut s, "data: [DONE]\n\n", false).unwrap();
    assert_eq!(s.next(Bytes::new), Next::Close(Bytes::new()));
}

#[test]
fn an_engine_error_is_kept_to_be_told_and_a_restart_forgets_everything() {
    let mut s = live(Api::Chat);
    let error = "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n";
    let text = chat_event("a", 1, r#"{"content":"x"}"#, "null");
    assert_eq!(
        filter(&mut s, &format!("{text}{error}"), false),
        Err(StreamFault)
    );
    assert_eq!(s.engine_error(), Some("boom"));
    s.restart();
    assert!(s.take_carry().is_empty());
    assert_eq!(s.transcript().text, "");
    assert!(!s.live());
}

#[test]
fn events_may_end_their_lines_with_a_carriage_return_alone() {
    let mut s = live(Api::Completions);
    let event = "data: {\"id\":\"k\",\"choices\":[{\"index\":0,\"text\":\"a\"}]}\r\r";
    let next = "data: {\"id\":\"k\",\"choices\":[{\"index\":0,\"text\":\"b\"}]}\r\r";
    // The second event's first byte shows the first one's `\r\r` is whole.
    assert_eq!(filter(&mut s, event, false).unwrap(), "");
    assert_eq!(filter(&mut s, &next[..1], false).unwrap(), event);
    assert_eq!(s.transcript().text, "a");
    assert_eq!(event_len(b"data: x\r\rrest"), Some(9));
    assert_eq!(event_len(b"data: x\r\n\rrest"), Some(10));
}
