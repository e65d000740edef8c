//! The approvals payload (`"tower_chat": {"approvals": [...]}`): parsed, capped, deduplicated and resumed
//! against a store holding one paused turn. Never a panic; a resume succeeds only with the real id.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tower_chat::{ApprovalRequest, ConversationId, Message, ToolCall};
use tower_chat_gateway::fuzzing::approvals;
use tower_chat_gateway::request_limits::RequestLimits;
use tower_chat_gateway::PendingStore;

fuzz_target!(|data: &[u8]| {
    let Ok(answers) = approvals(data) else {
        return;
    };
    let limits = RequestLimits::default();
    if limits
        .check_approvals(answers.iter().map(|a| a.id.as_str()))
        .is_err()
    {
        return;
    }
    let store = PendingStore::new(Duration::from_secs(60));
    let request = ApprovalRequest {
        id: "apr_real".into(),
        call: ToolCall::new(
            "c1",
            "write_file",
            serde_json::json!({"path": "a", "content": "b"}),
        ),
        reason: None,
    };
    store.pause(
        None,
        ConversationId::new("conv"),
        vec![Message::user("x")],
        &[request],
        None,
    );
    match store.resume(None, &answers) {
        Ok(resumed) => {
            assert!(answers.iter().all(|a| a.id == "apr_real"));
            assert_eq!(resumed.decisions.0.len(), answers.len());
        }
        Err(error) => assert_eq!(error.status.as_u16(), 400),
    }
});
