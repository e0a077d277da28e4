//! Exact encodings of the envelope, ids, errors and payloads.

/// A small deterministic generator for random inputs.
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[test]
fn hand_encoded_output_matches_the_generic_encoder() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let ids = ["p", "", "a\"quote", "tab\tnew\nline", "ünïcödé", "\u{1}ctl", "emoji 🦀"];
    for round in 0..2000 {
        let id = format!("{}{}", ids[round % ids.len()], next() % 1000);
        let len = (next() % 300) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let stream = [Stream::Stdout, Stream::Stderr, Stream::Pty][(next() % 3) as usize];
        let seq = if round % 7 == 0 { u64::MAX - next() % 3 } else { next() % 100_000 };
        let params =
            OutputParams { process_id: id.clone(), seq, stream, chunk: Base64(bytes.clone()) };
        assert_eq!(
            encode_output(&id, seq, stream, &bytes),
            encode_notification::<ProcessOutput>(&params, 64),
            "round {round}"
        );
    }
}

use super::*;
use serde_json::json;

fn decode_err(line: &str) -> String {
    Message::decode(line.as_bytes()).unwrap_err().to_string()
}

#[test]
fn request_round_trips_exactly() {
    let line = r#"{"id":1,"method":"initialize","params":{"clientName":"t"}}"#;
    let message = Message::decode(line.as_bytes()).unwrap();
    assert_eq!(
        message,
        Message::Request(Request {
            id: 1.into(),
            method: "initialize".into(),
            params: json!({"clientName": "t"}),
        })
    );
    assert_eq!(message.encode(), line);
}

#[test]
fn jsonrpc_member_is_optional_and_string_ids_work() {
    let line = r#"{"jsonrpc":"2.0","id":"a","method":"process/list"}"#;
    let message = Message::decode(line.as_bytes()).unwrap();
    assert_eq!(message.encode(), r#"{"id":"a","method":"process/list"}"#);
}

#[test]
fn notification_without_params() {
    let message = Message::decode(br#"{"method":"initialized"}"#).unwrap();
    assert_eq!(
        message,
        Message::Notification(Notification { method: "initialized".into(), params: Value::Null })
    );
    assert_eq!(message.encode(), r#"{"method":"initialized"}"#);
}

#[test]
fn responses_encode_result_and_error() {
    let ok = Message::Response(Response { id: 3.into(), result: Ok(json!({})) });
    assert_eq!(ok.encode(), r#"{"id":3,"result":{}}"#);
    let err = Message::Response(Response {
        id: (-1).into(),
        result: Err(ErrorObject::invalid_request("bad")),
    });
    assert_eq!(err.encode(), r#"{"id":-1,"error":{"code":-32600,"message":"bad"}}"#);
    let decoded = Message::decode(err.encode().as_bytes()).unwrap();
    assert_eq!(decoded, err);
}

#[test]
fn error_data_is_kept() {
    let error = ErrorObject::internal("x").with_data(json!({"kind": "notFound"}));
    let line = Message::Response(Response { id: 1.into(), result: Err(error) }).encode();
    assert_eq!(
        line,
        r#"{"id":1,"error":{"code":-32603,"message":"x","data":{"kind":"notFound"}}}"#
    );
}

#[test]
fn malformed_lines_name_the_problem() {
    assert_eq!(
        decode_err("not json"),
        "failed to parse JSON-RPC message: expected ident at line 1 column 2"
    );
    assert_eq!(
        decode_err("[1,2]"),
        "failed to parse JSON-RPC message: expected a JSON object, got an array"
    );
    assert_eq!(
        decode_err("42"),
        "failed to parse JSON-RPC message: expected a JSON object, got a number"
    );
    assert_eq!(
        decode_err(r#"{"id":null,"method":"x"}"#),
        "failed to parse JSON-RPC message: id must be an integer or a string, got null"
    );
    assert_eq!(
        decode_err(r#"{"id":1.5,"method":"x"}"#),
        "failed to parse JSON-RPC message: id must be an integer or a string, got the number 1.5"
    );
    assert_eq!(
        decode_err(r#"{"id":1,"method":7}"#),
        "failed to parse JSON-RPC message: method must be a string, got a number"
    );
    assert_eq!(
        decode_err(r#"{"id":1}"#),
        "failed to parse JSON-RPC message: a message needs a method, a result or an error"
    );
    assert_eq!(
        Message::decode(b"{\"id\":1,\"method\":\"\xff\"}").unwrap_err().to_string(),
        "failed to parse JSON-RPC message: invalid UTF-8 at byte 18"
    );
}

#[test]
fn typed_encoding_matches_the_wire() {
    let started: Result<StartResult, ErrorObject> =
        Ok(StartResult { process_id: "p".into(), sandbox_type: None });
    assert_eq!(encode_response(&1.into(), &started), r#"{"id":1,"result":{"processId":"p"}}"#);
    let sandboxed: Result<StartResult, ErrorObject> =
        Ok(StartResult { process_id: "p".into(), sandbox_type: Some(SandboxType::None) });
    assert_eq!(
        encode_response(&1.into(), &sandboxed),
        r#"{"id":1,"result":{"processId":"p","sandboxType":"none"}}"#
    );
    let refused: Result<Empty, ErrorObject> = Err(ErrorObject::invalid_request("no"));
    assert_eq!(
        encode_response(&"x".into(), &refused),
        r#"{"id":"x","error":{"code":-32600,"message":"no"}}"#
    );
    let output = OutputParams {
        process_id: "p".into(),
        seq: 1,
        stream: Stream::Stdout,
        chunk: Base64(b"hi".to_vec()),
    };
    assert_eq!(
        encode_notification::<ProcessOutput>(&output, 0),
        r#"{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk="}}"#
    );
    let exited = ExitedParams {
        process_id: "p".into(),
        seq: 0,
        exit_code: 137,
        signal: Some("SIGKILL".into()),
        limit: None,
        sandbox_denied: None,
    };
    assert_eq!(
        encode_notification::<ProcessExited>(&exited, 0),
        r#"{"method":"process/exited","params":{"processId":"p","seq":0,"exitCode":137,"signal":"SIGKILL"}}"#
    );
    let denied = ExitedParams { sandbox_denied: Some(true), signal: None, ..exited };
    assert_eq!(
        encode_notification::<ProcessExited>(&denied, 0),
        r#"{"method":"process/exited","params":{"processId":"p","seq":0,"exitCode":137,"sandboxDenied":true}}"#
    );
    assert_eq!(
        encode_request::<ProcessList>(&7.into(), &Empty {}).unwrap(),
        r#"{"id":7,"method":"process/list","params":{}}"#
    );
}

#[test]
fn base64_round_trips() {
    let bytes = Base64(b"hi".to_vec());
    assert_eq!(serde_json::to_string(&bytes).unwrap(), r#""aGk=""#);
    let back: Base64 = serde_json::from_str(r#""aGk=""#).unwrap();
    assert_eq!(back, bytes);
    let err = serde_json::from_str::<Base64>(r#""@@""#).unwrap_err().to_string();
    assert_eq!(err, "invalid base64: Invalid symbol 64, offset 0.");
}

#[test]
fn simd_base64_matches_the_base64_crate() {
    use base64::Engine as _;
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for len in (0..300).chain([4095, 4096, 65536, 65537]) {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut ours = b"prefix".to_vec();
        b64::encode_into(&bytes, &mut ours);
        let theirs = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert_eq!(&ours[6..], theirs.as_bytes(), "length {len}");
    }
}

#[test]
fn hand_encoded_read_file_result_matches_the_generic_encoder() {
    for (id, data) in [
        (RequestId::from(7), b"".to_vec()),
        (RequestId::from("a\"b"), b"hello".to_vec()),
        (RequestId::from(-1), (0..=255).collect::<Vec<u8>>()),
    ] {
        let result: Result<ReadFileResult, ErrorObject> =
            Ok(ReadFileResult { data_base64: Base64(data.clone()) });
        assert_eq!(encode_read_file(&id, &data), encode_response(&id, &result));
    }
}

#[test]
fn a_hand_encoded_http_answer_is_the_serde_text() {
    for (id, body) in [
        (RequestId::from(7), b"".to_vec()),
        (RequestId::from("a\"b"), (0..=255).collect::<Vec<u8>>()),
    ] {
        let response = HttpResponse {
            status: 203,
            headers: vec![HttpHeader::new("x-\"quoted\"", "v\u{7f}")],
            body_base64: Base64(body),
        };
        assert_eq!(
            encode_http_response(&id, &response),
            encode_response(&id, &Ok::<_, ErrorObject>(response.clone()))
        );
    }
}

#[test]
fn simd_decoding_agrees_with_the_base64_crate() {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for round in 0..3000 {
        // Long enough for the vector kernels and their scalar tails.
        let len = (next() % if round % 2 == 0 { 200 } else { 5000 }) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let mut text = engine.encode(&bytes).into_bytes();
        // Every third round, damage one byte: results and errors must still agree.
        if round % 3 == 0 && !text.is_empty() {
            let at = (next() % text.len() as u64) as usize;
            text[at] = b"!=A/+Qz\n"[(next() % 8) as usize];
        }
        let text = String::from_utf8(text).unwrap();
        let ours = Base64::decode(&text).map(|b| b.0).map_err(|e| e.to_string());
        let theirs = engine.decode(&text).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "round {round}: {text:?}");
    }
}

#[test]
fn spliced_write_file_request_matches_the_generic_encoder() {
    let quoted = std::path::PathBuf::from("/tmp/a\"dataBase64\":\"\"\\");
    for params in [
        WriteFileParams::new("/tmp/x", b"hello world, 8 MiB or so"),
        WriteFileParams::new(&quoted, &[0xff; 100]).append(),
        WriteFileParams::new("/tmp/empty", b""),
        WriteFileParams {
            data_base64: "not base64 \"quoted\"\n".into(),
            ..WriteFileParams::new("/x", b"")
        },
    ] {
        let id = RequestId::from(9);
        assert_eq!(
            encode_request::<WriteFile>(&id, &params).unwrap(),
            encode_request_generic::<WriteFile>(&id, &params).unwrap(),
        );
    }
}

#[test]
fn owned_decoding_agrees_with_borrowed_decoding() {
    let mut next = xorshift(0x1234_5678_9abc_def1);
    for round in 0..2000 {
        let len = (next() % 3000) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let mut text = Base64(bytes).encode().into_bytes();
        if round % 3 == 0 && !text.is_empty() {
            let at = (next() % text.len() as u64) as usize;
            text[at] = b"!=A/+Qz\n"[(next() % 8) as usize];
        }
        let text = String::from_utf8(text).unwrap();
        let borrowed = Base64::decode(&text).map_err(|e| e.to_string());
        let owned = Base64::decode_string(text.clone()).map_err(|e| e.to_string());
        assert_eq!(owned, borrowed, "round {round}: {text:?}");
    }
}

#[test]
fn write_file_from_bytes_matches_the_generic_encoder() {
    let quoted = std::path::PathBuf::from("/tmp/q\"\\");
    for (path, data) in [("/tmp/x", b"".to_vec()), ("/tmp/y", (0..=255).collect::<Vec<u8>>())] {
        for params in [WriteFileParams::new(path, b""), WriteFileParams::new(&quoted, b"").append()]
        {
            let id = RequestId::from("w");
            let full =
                WriteFileParams { data_base64: Base64(data.clone()).encode(), ..params.clone() };
            assert_eq!(
                encode_write_file_bytes(&id, &params, &data).unwrap(),
                encode_request_generic::<WriteFile>(&id, &full).unwrap(),
            );
        }
    }
}

#[test]
fn ids_up_to_u64_max_round_trip() {
    let line = br#"{"id":18446744073709551615,"method":"process/list"}"#;
    let Message::Request(request) = Message::decode(line).unwrap() else { panic!("a request") };
    let reply = Message::Response(Response { id: request.id, result: Ok(json!({})) });
    assert_eq!(reply.encode(), r#"{"id":18446744073709551615,"result":{}}"#);
}
