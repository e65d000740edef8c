//! An OpenAI-compatible HTTP gateway running the whole tower-chat stack.
//!
//! ```text
//! cargo run --release --example gateway -- --demo --files ./sandbox     # offline, no key
//! cargo run --release --example gateway -- --upstream https://api.openai.com/v1 --files ./sandbox
//! ```
//!
//! See `docs/src/gateway/running.md` for every option, and the pages beside it for the approval protocol and
//! curl examples. The installed program
//! (`cargo install --path gateway` gives `tower-chat-gateway`, `gateway/src/main.rs`) calls the same
//! [`tower_chat_gateway::main_with_args`].

fn main() -> std::process::ExitCode {
    tower_chat_gateway::main_with_args(std::env::args_os().skip(1))
}
