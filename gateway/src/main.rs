//! `tower-chat-gateway`: the gateway as an installed program (`cargo install --path gateway`).
//!
//! ```text
//! tower-chat-gateway --demo                  # offline: a scripted model, no key
//! tower-chat-gateway --upstream https://api.openai.com/v1 --config gateway.toml
//! ```
//!
//! Everything happens in [`tower_chat_gateway::main_with_args`], which `examples/gateway.rs` calls as well, so
//! the binary and the example cannot drift apart. See `docs/src/gateway/running.md` for every option.

/// jemalloc, with its background threads: pages a load freed go back to the system on jemalloc's decay timer,
/// with no call from the gateway; its thread caches are capped when it is built (`.cargo/config.toml`). glibc's
/// allocator keeps most of the pages after a burst of streams (its arenas stay pinned by the few allocations that
/// outlive the burst), even with `malloc_trim` (BENCHMARKS.md, "Connections, memory, soak"). Not on MSVC, which
/// jemalloc does not support.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    tower_chat_gateway::main_with_args(std::env::args_os().skip(1))
}
