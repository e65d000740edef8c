//! The gateway's request parsing, for each of its three wire formats (the first byte picks the format and the
//! upstream provider): any body is either a parsed request or a 400 with a message, never a panic; a parsed
//! request then passes or fails the per-request limits, again without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_chat::schema_limits::SchemaLimits;
use tower_chat_gateway::fuzzing::parse_request;
use tower_chat_gateway::request_limits::{RequestLimits, SettingNames};

fuzz_target!(|data: &[u8]| {
    let Some((&format, body)) = data.split_first() else {
        return;
    };
    let limits = RequestLimits {
        max_messages: 8,
        max_tools: 4,
        max_schema_bytes: 512,
        max_approvals: 4,
        max_id_bytes: 16,
        max_conversation_id_bytes: 16,
        max_media_part_bytes: 4096,
        max_media_bytes: 8192,
        schema: SchemaLimits {
            max_depth: 16,
            max_nodes: 256,
            max_ref_expansions: 64,
            max_expanded_nodes: 1024,
        },
        setting_names: SettingNames::Flags,
    };
    match parse_request(format, body) {
        Ok((request, approvals)) => {
            let _ = limits.check(&request);
            let _ = limits.check_approvals(approvals.iter().map(|a| a.id.as_str()));
        }
        Err(error) => {
            assert_eq!(error.status.as_u16(), 400);
            assert!(!error.message.is_empty());
        }
    }
    let _ = limits.conversation(None, Some(body));
});
