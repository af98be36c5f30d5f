"""Reading `perf script` call stacks of rolter and saying where the CPU time
went, in the terms the hot-path work needs: allocation, copies, JSON,
metrics, logging, Pingora, tokio, rolter's own phases, the kernel by
syscall.

A sample is a list of frames, leaf first. `perf script` prints one line per
frame; frames the compiler inlined share their caller's address and are
marked `(inlined)` (innermost first, then the function that holds them), so
the lines are grouped by address into `Frame`s: the function the symbol
table names, plus the inlined calls at that address.

Three views:
- **kind of work** (self time): the leaf frame's category. Generic code
  from core/alloc/std that was not inlined is its own row; the "callers"
  tables say on whose behalf allocation, copies and generic code ran.
- **component** (inclusive): share of samples with a frame matching a
  pattern anywhere in the stack (rolter's ProxyHttp phases, body read,
  JSON parse, metrics, Pingora's HTTP/1 reader and writer, ...); a sample
  can count in several rows.
- **syscalls**: kernel time by the syscall it ran under, and who made it.
"""

from __future__ import annotations

import collections
import dataclasses
import re

HASH = re.compile(r"::h[0-9a-f]{16}$")
KERNEL = "[kernel.kallsyms]"


@dataclasses.dataclass
class Frame:
    func: str
    dso: str
    inlined: list[str]

    @property
    def kernel(self) -> bool:
        return self.dso == KERNEL

    def names(self) -> list[str]:
        return [self.func, *self.inlined]


@dataclasses.dataclass
class Sample:
    thread: str
    frames: list[Frame]  # leaf first


def parse(text: str) -> list[Sample]:
    """`perf script -F comm,tid,ip,sym,dso` output, with call graphs."""
    samples = []
    for block in text.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if len(lines) < 2:
            continue
        # "rolter proxy 11677": the thread name may have spaces; the tid is last.
        thread = lines[0].strip().rsplit(None, 1)[0]
        frames: list[Frame] = []
        last_addr = None
        for line in lines[1:]:
            parts = line.strip().split(" ", 1)
            if len(parts) < 2:
                continue
            addr, rest = parts
            name, dso = rest, ""
            if rest.endswith(")") and " (" in rest:
                name, dso = rest[:-1].rsplit(" (", 1)
            name = re.sub(r"\+0x[0-9a-f]+$", "", HASH.sub("", name))
            inlined = dso == "inlined"
            if name == "[unknown]":
                last_addr = addr
                continue
            if addr != last_addr or not frames:
                # A new address: its symbol-table line, or (seen for libc)
                # only an inlined line, which then stands for it.
                frames.append(Frame(name, "" if inlined else dso, []))
            elif inlined:
                frames[-1].inlined.append(name)
            else:
                frames[-1].func, frames[-1].dso = name, dso
            last_addr = addr
        if frames:
            samples.append(Sample(thread, frames))
    return samples


def crate_of(name: str) -> str | None:
    """The crate a Rust path belongs to: `<a::B<c::D> as e::F>::g` -> a;
    `core::ptr::drop_in_place<x::Y>` -> x (the dropped type's)."""
    m = re.match(r"core::ptr::drop_in_place<(.*)>$", name)
    if m:
        name = m.group(1)
    m = re.match(r"<*&?(?:mut )?(?:dyn )?([A-Za-z_][A-Za-z0-9_]*)::", name)
    return m.group(1) if m else None


GENERIC_CRATES = {"core", "alloc", "std", None}

ALLOC = re.compile(
    r"malloc|(^|_)free$|cfree|realloc|calloc|_int_free|_int_malloc|_int_realloc|tcache|unlink_chunk"
    r"|sysmalloc|__rust_(alloc|dealloc|realloc)|malloc_consolidate|finish_grow|do_reserve_and_handle"
    r"|__rdl_|__libc_memalign|aligned_alloc|posix_memalign|^alloc::alloc::"
)
COPY = re.compile(r"__mem(cpy|move|set)|^mem(cpy|move|set)$|_erms$")
COMPARE = re.compile(r"__mem(cmp|chr)|__strlen|__strchr|bcmp|memcmp|memchr")

CRATE_KINDS = [
    ("JSON (serde_json)", {"serde_json", "serde", "serde_core"}),
    ("metrics (prometheus)", {"prometheus"}),
    ("logging (log, env_logger)", {"log", "env_logger"}),
    ("HTTP/1 parsing (httparse)", {"httparse"}),
    ("http crate (HeaderMap, HeaderValue, Uri)", {"http"}),
    ("hashing, hash maps", {"xxhash_rust", "sha2", "hashbrown", "ahash", "foldhash"}),
    ("tokio runtime", {"tokio"}),
    ("rolter balancer", {"rolter_balancer"}),
    ("rolter", {"rolter"}),
    ("bytes", {"bytes"}),
    ("Rust core/alloc/std (not inlined)", {"core", "alloc", "std"}),
]


def kind(frame: Frame) -> str:
    """The kind of work a leaf frame is."""
    if frame.kernel:
        return "kernel (syscalls, TCP/IP loopback, scheduler)"
    names = frame.names()
    if any(ALLOC.search(n) for n in names[:1]) or (not crate_of(frame.func) and any(ALLOC.search(n) for n in names)):
        return "allocation (malloc/free/realloc, Vec and BytesMut growth)"
    if any(COPY.search(n) for n in names[:1]):
        return "memcpy/memmove/memset"
    if any(COMPARE.search(n) for n in names[:1]):
        return "memcmp/memchr/strlen"
    crate = crate_of(frame.func)
    if crate and crate.startswith("pingora"):
        return "Pingora"
    for label, crates in CRATE_KINDS:
        if crate in crates:
            return label
    if frame.dso.endswith("/nginx"):
        return "nginx (its binary has no symbols)"
    if "vdso" in frame.func or "vdso" in frame.dso:
        return "clock reads (vDSO clock_gettime)"
    if "libc" in frame.dso:
        return "libc (other)"
    if crate:
        return f"other crates ({crate})"
    return "other"


def owner(sample: Sample) -> str:
    """The first frame, from the leaf up, that belongs to a named crate other
    than core/alloc/std and is not the allocator or libc: whose work it is."""
    for frame in sample.frames:
        if frame.kernel:
            continue
        crate = crate_of(frame.func)
        if crate in GENERIC_CRATES or ALLOC.search(frame.func) or COPY.search(frame.func):
            # An inlined caller with a crate path may say more.
            for name in frame.inlined:
                c = crate_of(name)
                if c not in GENERIC_CRATES and not ALLOC.search(name):
                    return short(name)
            continue
        return short(frame.func)
    return "(unknown)"


COMPONENTS = [
    ("rolter request_filter (auth, body read, JSON parse, route)", r"ProxyHttp>::request_filter"),
    ("  read the whole body (proxy::body::read_body)", r"rolter::proxy::body::read(_whole)?_body"),
    ("  parse the request JSON (openai::parse_request)", r"rolter::openai::(request::)?parse_request|rolter::openai::.*parse"),
    ("  request id (proxy::request_id)", r"rolter::proxy::request_id"),
    ("  client origin (proxy::forwarding::ClientOrigin::of)", r"ClientOrigin::of"),
    ("rolter upstream_peer (balancer pick, in-flight guard, model rewrite)", r"ProxyHttp>::upstream_peer"),
    ("  rewrite the body (proxy::body::attempt_body)", r"rolter::proxy::body::attempt_body"),
    ("rolter upstream_request_filter (forwarding headers)", r"ProxyHttp>::upstream_request_filter"),
    ("rolter request_body_filter", r"ProxyHttp>::request_body_filter"),
    ("rolter upstream_response_filter (status, observe)", r"ProxyHttp>::upstream_response_filter"),
    ("rolter response_filter (response headers)", r"ProxyHttp>::response_filter"),
    ("rolter logging (metrics, access log)", r"ProxyHttp>::logging"),
    ("inside connection tasks (rolter::downstream, then Pingora)", r"rolter::downstream"),
    ("rolter metrics (any caller)", r"rolter::metrics|prometheus"),
    ("logging (log/env_logger, any caller)", r"^<?log::|env_logger"),
    ("serde_json (any caller)", r"serde_json"),
    ("Pingora HTTP/1 server session (downstream read/write)", r"pingora_core::protocols::http::v1::server"),
    ("Pingora HTTP/1 client session (upstream read/write)", r"pingora_core::protocols::http::v1::client"),
    ("Pingora upstream connection pool / connectors", r"pingora_pool|pingora_core::connectors"),
    ("Pingora proxy state machine (pingora_proxy)", r"pingora_proxy"),
    ("tokio timers and channels (any caller)", r"^<?tokio::(time|sync)::|pingora_timeout"),
]
# Samples with none of these frames ran outside a connection's task: the
# tokio scheduler and I/O driver, Pingora's timer thread, health checks.
IN_TASK = re.compile(r"rolter::downstream|pingora_proxy|pingora_core::services::listening")
OUTSIDE = "outside connection tasks (tokio scheduler + I/O driver, timer thread, health checks)"


def short(name: str, width: int = 110) -> str:
    """A readable function name: generic arguments of depth > 1 elided."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 2:
                out.append("<…")
            if depth >= 2:
                continue
        elif ch == ">":
            depth -= 1
            if depth >= 1:
                if depth == 1:
                    out.append(">")
                continue
        elif depth >= 2:
            continue
        out.append(ch)
    text = "".join(out).replace("{{closure}}", "{closure}")
    return text if len(text) <= width else text[: width - 1] + "…"


SYSCALL = re.compile(r"__(?:x64|ia32)_sys_(\w+)|__do_sys_(\w+)|__se_sys_(\w+)")


def syscall_of(sample: Sample) -> str:
    for frame in sample.frames:
        if not frame.kernel:
            break
        m = SYSCALL.search(frame.func)
        if m:
            return next(g for g in m.groups() if g)
    names = " ".join(f.func for f in sample.frames if f.kernel)
    if "page_fault" in names or "exc_page" in names:
        return "(page fault)"
    if "irq" in names or "softirq" in names or "interrupt" in names:
        return "(interrupt / softirq)"
    if "schedule" in names:
        return "(scheduler)"
    return "(other kernel)"


@dataclasses.dataclass
class Summary:
    samples: int
    threads: list[tuple[str, int]]
    kinds: list[tuple[str, int]]
    components: list[tuple[str, int]]
    top_self: list[tuple[str, str, int]]  # function, kind, samples
    alloc_owners: list[tuple[str, int]]
    copy_owners: list[tuple[str, int]]
    generic_owners: list[tuple[str, int]]
    syscalls: list[tuple[str, int, str]]  # syscall, samples, main caller


def summarize(samples: list[Sample], proxy_threads: str = "") -> Summary:
    total = len(samples)
    threads = collections.Counter(s.thread for s in samples)
    kinds = collections.Counter()
    top = collections.Counter()
    top_kind = {}
    alloc_owners = collections.Counter()
    copy_owners = collections.Counter()
    generic_owners = collections.Counter()
    syscalls = collections.Counter()
    syscall_callers: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    components = collections.Counter()
    compiled = [(label, re.compile(p)) for label, p in COMPONENTS]
    for sample in samples:
        leaf = sample.frames[0]
        k = kind(leaf)
        if k == "other":
            # A leaf known only by an inlined name without a path: the
            # first frame up the stack with a crate is what it was part of.
            for frame in sample.frames[1:]:
                if crate_of(frame.func) or frame.kernel:
                    k = kind(frame)
                    break
        kinds[k] += 1
        name = short(leaf.func, 120)
        top[name] += 1
        top_kind[name] = k
        if k.startswith("allocation"):
            alloc_owners[owner(sample)] += 1
        elif k.startswith("memcpy"):
            copy_owners[owner(sample)] += 1
        elif k.startswith("Rust core"):
            generic_owners[owner(sample)] += 1
        elif k.startswith("kernel"):
            sc = syscall_of(sample)
            syscalls[sc] += 1
            syscall_callers[sc][owner(sample)] += 1
        names = [n for f in sample.frames for n in f.names()]
        for label, pattern in compiled:
            if any(pattern.search(n) for n in names):
                components[label] += 1
        if not any(IN_TASK.search(n) for n in names):
            components[OUTSIDE] += 1
    return Summary(
        samples=total,
        threads=threads.most_common(),
        kinds=kinds.most_common(),
        components=[(label, components[label]) for label, _ in COMPONENTS] + [(OUTSIDE, components[OUTSIDE])],
        top_self=[(n, top_kind[n], c) for n, c in top.most_common(30)],
        alloc_owners=alloc_owners.most_common(12),
        copy_owners=copy_owners.most_common(10),
        generic_owners=generic_owners.most_common(10),
        syscalls=[
            (sc, c, ", ".join(f"{o} ({n * 100 / c:.0f}%)" for o, n in syscall_callers[sc].most_common(2)))
            for sc, c in syscalls.most_common(12)
        ],
    )
