"""Where rolter's memory per open stream goes: rolter under valgrind's
massif heap profiler while `sse_clients.py hold` keeps N streams open, then
the peak snapshot's allocation tree folded by allocation site.

The streams-10k workload of compare.py measures the resident memory; this
says which allocations make it up. Heap bytes are what was asked of the
allocator (a 64 KiB buffer counts 64 KiB even while only its first page was
written); resident memory per stream can be lower, or higher when freed
chunks are reused and rewritten. Under valgrind rolter runs ~30x slower, so
the streams ramp slowly and carry one chunk a second.

A site is the first frame, walking from the allocator towards the caller,
that names code of Pingora, rolter or tokio (not the allocator, core/alloc,
`bytes` or an unnamed inlined frame), with its source line."""

from __future__ import annotations

import re
import time
from pathlib import Path

GENERIC = re.compile(
    r"^(UnknownInlinedFun|alloc|alloc_impl|alloc_impl_runtime|allocate|allocate_zeroed|alloc_zeroed"
    r"|aligned_malloc|malloc|calloc|realloc|__rustc::|__rust_|box_new|new_uninit|with_capacity"
    r"|with_capacity_in|from_elem|try_allocate_in|finish_grow|grow|reserve|new<|new$|map<|{closure#0}$"
    r"|prepare_buf|to_vec|clone|extend|copy_from_slice|<alloc::|alloc::|core::|<core::|bytes::|<bytes::"
    r"|spec_|with_capacity_zeroed_in|into_boxed|box_new_uninit)"
)
NAMED = re.compile(r"pingora|rolter|tokio::runtime::task::core::Cell|hyper|h2::|rustls|prometheus|serde_json")


def parse_peak(path: Path) -> tuple[int, dict]:
    """(heap bytes at the peak, the peak snapshot's tree)."""
    text = path.read_text(errors="replace")
    snapshots = text.split("snapshot=")[1:]
    peak = next((s for s in snapshots if "heap_tree=peak" in s), None)
    if peak is None:
        # No detailed peak: the largest detailed snapshot.
        detailed = [s for s in snapshots if "heap_tree=detailed" in s]
        peak = max(detailed, key=lambda s: int(re.search(r"mem_heap_B=(\d+)", s).group(1)))
    heap = int(re.search(r"mem_heap_B=(\d+)", peak).group(1))
    stack: list[dict] = []
    root = None
    for line in peak.splitlines():
        m = re.match(r"(\s*)n(\d+): (\d+) (.*)", line)
        if not m:
            continue
        node = {"indent": len(m.group(1)), "bytes": int(m.group(3)), "desc": m.group(4), "children": []}
        while stack and stack[-1]["indent"] >= node["indent"]:
            stack.pop()
        if stack:
            stack[-1]["children"].append(node)
        else:
            root = node
        stack.append(node)
    return heap, root


def frame_name(desc: str) -> tuple[str, str]:
    """(function, source location) of a massif frame description."""
    desc = re.sub(r"^0x[0-9A-Fa-f]+: ", "", desc)
    m = re.match(r"(.*) \(([^()]*)\)$", desc)
    return (m.group(1), m.group(2)) if m else (desc, "")


def sites(root: dict) -> dict[str, int]:
    found: dict[str, int] = {}

    def walk(node: dict, trail: list[str]) -> None:
        func, where = frame_name(node["desc"])
        if "below massif's threshold" in func:
            found["(small allocations below the threshold)"] = found.get("(small allocations below the threshold)", 0) + node["bytes"]
            return
        if NAMED.search(func) and not GENERIC.search(func) or (NAMED.search(func) and not node["children"]):
            inner = " ← ".join(trail[-2:])
            key = f"`{shorten(func)}` ({where})" + (f", via {inner}" if inner else "")
            found[key] = found.get(key, 0) + node["bytes"]
            return
        if not node["children"]:
            key = f"`{shorten(func)}` ({where})"
            found[key] = found.get(key, 0) + node["bytes"]
            return
        here = f"{shorten(func, 40)} ({where})" if where and not func.startswith("UnknownInlined") else None
        for child in node["children"]:
            walk(child, trail + ([here] if here else []))

    for child in root["children"]:
        walk(child, [])
    return found


def shorten(name: str, width: int = 90) -> str:
    name = re.sub(r"<[^<>]*(<[^<>]*(<[^<>]*>[^<>]*)*>[^<>]*)*>", "<…>", name)
    return name if len(name) <= width else name[: width - 1] + "…"


def run(ctx: dict, streams: int, out_dir: Path) -> str:
    """Runs rolter under massif with `streams` open streams; returns the
    Markdown section."""
    from compare_scenarios import PYTHON, SSE_CLIENTS
    from compare_targets import Rolter, pinned, start_fake_llm, status_kib

    processes = ctx["processes"]
    work: Path = ctx["work"]
    engine = start_fake_llm(ctx["rolter"], work, processes, ctx["client_cpus"], "engine-memory", 1000)
    massif_out = out_dir / "massif.out"
    proxy = Rolter("rolter-memory", ctx["rolter"], work, processes, ctx["proxy_cpus"], [engine],
                   [engine.process.pid])
    # Wrap the binary: valgrind, then rolter with its arguments.
    wrapper = work / "rolter-under-massif"
    wrapper.write_text(
        "#!/bin/sh\nexec valgrind --tool=massif --threshold=0.5 "
        f"--massif-out-file={massif_out} {ctx['rolter']} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    proxy.rolter = wrapper
    proxy.start()
    time.sleep(2)
    tokens = max(10, int(streams / 100) + 10)  # streams outlive the ramp (100/s)
    client = processes.spawn(
        "client-memory",
        pinned(ctx["client_cpus"], [PYTHON, str(SSE_CLIENTS), "hold", "--url", proxy.url,
                                    "--streams", str(streams), "--tokens", str(tokens), "--ramp", "100"]),
        work / "client-memory.log", stdout=work / "client-memory.out",
    )
    client.wait_exit(streams / 100 + tokens + 120)
    peak_rss = status_kib(proxy.process.pid, "VmHWM") if proxy.process else 0
    result = (work / "client-memory.out").read_text().strip().splitlines()[-1:]
    proxy.stop()  # SIGINT: valgrind writes massif.out as rolter exits
    for _ in range(100):
        if massif_out.exists() and massif_out.stat().st_size > 0:
            break
        time.sleep(0.1)
    engine.process.popen.terminate()
    heap, root = parse_peak(massif_out)
    found = sorted(sites(root).items(), key=lambda kv: -kv[1])
    lines = [
        f"## Memory per open stream: {streams:,} streams (massif)",
        "",
        f"Command: rolter under `valgrind --tool=massif --threshold=0.5`, {streams:,} streams held by "
        f"`sse_clients.py hold` (fake-llm, 1 token/s); client: {result[0] if result else '?'}. "
        f"Heap at the peak: {heap / 1e6:.1f} MB ({heap / streams / 1024:.1f} KiB per stream); "
        f"VmHWM under valgrind {peak_rss / 1024:.0f} MiB (valgrind's own memory included).",
        "",
        "| allocation site (first named frame; via = the frames below it) | heap at peak | per stream |",
        "| --- | ---: | ---: |",
    ]
    for key, size in found[:14]:
        lines.append(f"| {key} | {size / 1e6:.1f} MB | {size / streams / 1024:.1f} KiB |")
    return "\n".join(lines) + "\n"
