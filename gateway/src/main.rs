//! `tower-chat-gateway`: the gateway as an installed program (`cargo install --path gateway`).
//!
//! ```text
//! tower-chat-gateway --demo                  # offline: a scripted model, no key
//! tower-chat-gateway --upstream https://api.openai.com/v1 --config gateway.toml
//! ```
//!
//! Everything happens in [`tower_chat_gateway::main_with_args`], which `examples/gateway.rs` calls as well, so
//! the binary and the example cannot drift apart. See `gateway/README.md` for every option.

fn main() -> std::process::ExitCode {
    tower_chat_gateway::main_with_args(std::env::args_os().skip(1))
}
