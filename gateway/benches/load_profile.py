#!/usr/bin/env python3
"""Where a gateway request's instructions go, by concern: the load bench's count mode under callgrind at two
request counts, each function's cost read with `callgrind_annotate`, grouped by the concern its name belongs
to, and the slope between the two counts printed per request.

    cargo bench -p tower-chat-gateway --bench load --no-run
    cd gateway && python3 benches/load_profile.py <load binary> [120 720]
    cd gateway && LOAD_COUNT_TARGET=direct python3 benches/load_profile.py <load binary>    # the upstream alone

Environment passed through to the bench (`LOAD_COUNT_STREAM=1`, `LOAD_PROFILE=proxy`, ...). Two columns per
concern:

- self: the instructions of the functions named in the concern (exact, but what they call outside it, such as
  `memcpy`, `malloc` or serde, is left to its own group or unattributed);
- inclusive: the costliest single function of the concern with everything it calls (its entry point: a thread's
  loop, a layer's future), so nested concerns are inside their callers' figure (tracing holds approval, which
  holds the tool loop, ...).

Groups are matched in order; a function belongs to the first group whose pattern matches its name.
"""

import os
import re
import subprocess
import sys
import tempfile

# (concern, pattern on the demangled function name). First match wins: the threads of persistence before the
# crate's other functions, the allocator before everything.
GROUPS = [
    ("allocator", r"_rjem_|\bje_|tikv_jemalloc|allocations::Counting|__rust_(alloc|dealloc|realloc)"),
    ("memcpy/memmove", r"__memcpy|__memmove|memcpy|memmove"),
    ("persistence: record writer thread", r"serve_writes"),
    ("persistence: search index thread", r"search_index|SearchIndex|fts"),
    ("persistence: on the call's path", r"tower_chat_persistence::"),
    # SQLite's own functions are mostly static C names without the `sqlite3` prefix (the log's checksums,
    # B-tree balancing, the pager, the JSON functions, the SQL parser).
    ("SQLite", r"sqlite3|^(wal|btree|pager|vdbe|json|fts5|pcache|balance_|yy_|keywordCode|getPage|allocateCursor|releaseMemArray|unix[A-Z])"),
    ("edge (gateway middleware, serve)", r"tower_chat_gateway::edge::"),
    ("turn and chat handler", r"tower_chat_gateway::(turn|api)::"),
    ("wire: parse", r"tower_chat_wire::.*(parse|from_body|into_inbound|Deserialize|deserialize|visit_)"),
    ("wire: encode", r"tower_chat_wire::.*(encode|Encoder|sse|write_json|respond|Serialize|serialize)"),
    ("wire: other", r"tower_chat_wire::"),
    ("tracing layer", r"tower_chat_tracing::|tracing_core::|tracing::span"),
    ("approval layer", r"tower_chat_approval::"),
    ("tool loop", r"tower_chat_function_invocation::"),
    ("limits layer", r"tower_chat_limits::"),
    ("leaf (core OpenAI client, SSE)", r"tower_chat::(openai|sse|transport|stream|leaf)"),
    ("core other", r"tower_chat::"),
    ("JSON (serde_json)", r"serde_json::"),
    ("HTTP/1 (hyper, both hops and both ends)", r"hyper::|hyper_util::|httparse::|http::"),
    ("tokio (scheduler, I/O, timers)", r"tokio::|mio::"),
    ("kernel calls (libc wrappers)", r"epoll_wait|writev|\bsyscall\b|__libc_(write|read|send|recv)\b|\b(write|read|sendto|recvfrom)$"),
]

LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(?:\*\s+)?(.+?)(?:\s+\[[^\]]*\])?$")


def run(binary, requests, out):
    """Count mode under callgrind; the allocations the bench printed."""
    env = dict(os.environ, LOAD_COUNT_REQUESTS=str(requests))
    printed = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "--bench"],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    return int(re.search(r"^allocations: (\d+)$", printed, re.M).group(1))


def costs(out, inclusive):
    """Function name -> instructions, from `callgrind_annotate` (self, or inclusive)."""
    args = ["callgrind_annotate", "--auto=no", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", out]
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    table = {}
    started = False
    for line in text.splitlines():
        if not started:
            started = "file:function" in line
            continue
        match = LINE.match(line)
        if not match:
            if table and not line.strip():
                break
            continue
        name = match.group(2).split(":", 1)[-1] if ":" in match.group(2) else match.group(2)
        table[name] = table.get(name, 0) + int(match.group(1).replace(",", ""))
    return table


def group_of(name):
    for concern, pattern in GROUPS:
        if re.search(pattern, name):
            return concern
    return None


def grouped(out):
    own, outer = {}, {}
    selves = costs(out, inclusive=False)
    for name, cost in selves.items():
        concern = group_of(name) or "other"
        own[concern] = own.get(concern, 0) + cost
    for name, cost in costs(out, inclusive=True).items():
        concern = group_of(name)
        if concern:
            outer[concern] = max(outer.get(concern, 0), cost)
    return own, outer, sum(selves.values())


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    low, high = (int(n) for n in sys.argv[2:4]) if len(sys.argv) >= 4 else (120, 720)
    with tempfile.TemporaryDirectory() as tmp:
        figures, allocations = [], []
        for requests in (low, high):
            out = os.path.join(tmp, f"callgrind.{requests}")
            allocations.append(run(binary, requests, out))
            figures.append(grouped(out))
    (own_low, outer_low, total_low), (own_high, outer_high, total_high) = figures
    per = high - low
    print(
        f"per request (slope {low} -> {high}): {(total_high - total_low) / per / 1000:.1f} k instructions, "
        f"{(allocations[1] - allocations[0]) / per:.1f} allocations"
    )
    print("thousands of instructions per request:")
    print("| concern | self | inclusive (entry point) |")
    print("| --- | ---: | ---: |")
    for concern in [g for g, _ in GROUPS] + ["other"]:
        own = (own_high.get(concern, 0) - own_low.get(concern, 0)) / per / 1000
        outer = (outer_high.get(concern, 0) - outer_low.get(concern, 0)) / per / 1000
        print(f"| {concern} | {own:.1f} | {outer:.1f} |")


if __name__ == "__main__":
    main()
