//! The demo MCP server of `tower_chat_mcp::test_server` on stdio.
//!
//! `tower-chat-mcp-test-server [--name NAME] [--fail-start MESSAGE]`: with `--fail-start` it writes the message
//! and a second line to stderr and exits with status 2 before speaking MCP (a server that fails to start).
#![forbid(unsafe_code)]

use tower_chat_mcp::test_server::{serve_stdio, DemoServer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut name = "demo".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--name" => name = args.next().unwrap_or(name),
            "--fail-start" => {
                let message = args.next().unwrap_or_default();
                eprintln!("{name}: starting");
                eprintln!("{message}");
                std::process::exit(2);
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(64);
            }
        }
    }
    serve_stdio(DemoServer::new(name, true)).await
}
