"""The processes of the side-by-side benchmark (`compare.py`): the engines,
and the three ways of reaching them (directly, through nginx, through
rolter), each pinned to its cores; and the /proc readings that say what a
proxy cost (CPU time, peak memory) and whether anything else ran.

Pinning is the same for every configuration: the proxy gets `proxy_cpus`
(core 1 on a 2-core machine) to itself; the engines, the load generator and
the runner share `client_cpus` (core 0). Direct runs leave the proxy cores
idle. Builds nothing; reuses `fleet.py`'s process bookkeeping (every child
stops at the end, and dies with the runner)."""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import signal
import time
from pathlib import Path

from fleet import REPO, Process, Processes, SetupError, free_port, http, wait_until

HERE = Path(__file__).resolve().parent
NGINX_TEMPLATE = HERE / "compare_nginx.conf.in"
UPSTREAM_NGINX_TEMPLATE = HERE / "compare_upstream_nginx.conf.in"
BENCH_SERVERS = REPO / "target" / "bench-servers" / "release"
STAMP_ENGINE = HERE / "sse_stamp_engine.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def pinned(cpus: list[int], argv: list[str]) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus)), *argv]


# --- /proc readings ------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads, dead ones included."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid: int, key: str) -> int:
    text = _read(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    found = []
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        text = _read(f"/proc/{pid}/task/{tid}/children") or ""
        found += [int(c) for c in text.split()]
    return found


def core_jiffies() -> dict[str, tuple[int, int]]:
    """Per core (and "cpu" for all): (busy, total) jiffies from /proc/stat."""
    out = {}
    for line in (_read("/proc/stat") or "").splitlines():
        if not line.startswith("cpu"):
            break
        name, *values = line.split()
        v = [int(x) for x in values]
        idle = v[3] + v[4]  # idle + iowait
        total = sum(v[:8])  # guest time is already in user
        out[name] = (total - idle, total)
    return out


@dataclasses.dataclass
class Reading:
    """What the counters said at one moment of a measurement."""

    wall: float
    proxy_cpu: float
    engine_cpu: float
    runner_cpu: float
    reaped_cpu: float  # children of the runner already waited for (k6, clients)
    cores: dict[str, tuple[int, int]]


class Meter:
    """CPU and memory of the proxy's processes (a process and its children:
    nginx's master and workers, rolter's one process) and of the engines."""

    def __init__(self, proxy_pid: int | None, engine_pids: list[int]):
        self.proxy_pid = proxy_pid
        self.engine_pids = engine_pids

    def proxy_pids(self) -> list[int]:
        if self.proxy_pid is None:
            return []
        return [self.proxy_pid, *children(self.proxy_pid)]

    def read(self) -> Reading:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return Reading(
            wall=time.monotonic(),
            proxy_cpu=sum(cpu_seconds(p) for p in self.proxy_pids()),
            engine_cpu=sum(cpu_seconds(p) for p in self.engine_pids),
            runner_cpu=me.ru_utime + me.ru_stime,
            reaped_cpu=kids.ru_utime + kids.ru_stime,
            cores=core_jiffies(),
        )

    def peak_rss_kib(self) -> int:
        """VmHWM summed over the proxy's processes (nginx: master + workers)."""
        return sum(status_kib(p, "VmHWM") for p in self.proxy_pids())

    def rss_kib(self) -> int:
        return sum(status_kib(p, "VmRSS") for p in self.proxy_pids())

    def voluntary_switches(self) -> int:
        """Voluntary context switches so far, over every thread of the
        proxy's processes: each time a thread slept and woke counts one."""
        total = 0
        for pid in self.proxy_pids():
            tasks = f"/proc/{pid}/task"
            for tid in os.listdir(tasks) if os.path.isdir(tasks) else []:
                text = _read(f"{tasks}/{tid}/status") or ""
                for line in text.splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        return total


def window(before: Reading, after: Reading, live_client_cpu: float = 0.0) -> dict:
    """The counters' deltas over a measurement, and the CPU time the machine
    spent on processes that are not ours ("foreign": other work on a shared
    machine makes the figures doubtful)."""
    wall = after.wall - before.wall
    busy = {
        name: (after.cores[name][0] - before.cores[name][0]) / CLK_TCK
        for name in after.cores
        if name in before.cores
    }
    ours = (
        (after.proxy_cpu - before.proxy_cpu)
        + (after.engine_cpu - before.engine_cpu)
        + (after.runner_cpu - before.runner_cpu)
        + (after.reaped_cpu - before.reaped_cpu)
        + live_client_cpu
    )
    return {
        "wall_s": round(wall, 3),
        "proxy_cpu_s": round(after.proxy_cpu - before.proxy_cpu, 3),
        "engine_cpu_s": round(after.engine_cpu - before.engine_cpu, 3),
        "busy_s": {k: round(v, 2) for k, v in busy.items()},
        # Jiffy granularity (10 ms) on every term: a few hundredths of a
        # core of noise either way.
        "foreign_cores": round(max(0.0, busy.get("cpu", 0.0) - ours) / wall, 3) if wall else 0.0,
    }


# --- the engines ---------------------------------------------------------------


@dataclasses.dataclass
class Engine:
    name: str
    url: str
    process: Process


def _printed_address(stdout: Path, process: Process, marker: str = "http://") -> str:
    address: list[str] = []

    def check() -> bool:
        try:
            text = stdout.read_text()
        except OSError:
            return False
        first, newline, _ = text.partition("\n")
        if newline and marker in first:
            address.append("http://" + first.split("http://", 1)[1].split()[0])
            return True
        return not process.alive()

    if not wait_until(10, check) or not address:
        raise SetupError(f"{process.name} printed no address:\n" + "\n".join(process.log_tail(20)))
    return address[0]


def start_fake_llm(
    rolter: Path, work: Path, processes: Processes, cpus: list[int], name: str, token_delay_ms: int
) -> Engine:
    """`rolter fake-llm` with no time to first token and no prefill cost, one
    runtime thread (it shares its core with the load generator), and a
    context long enough for the 4 MiB prompts (~700 k of its tokens) to be
    answered rather than refused as over `max_model_len`."""
    stdout = work / f"{name}.out"
    process = processes.spawn(
        name,
        pinned(
            cpus,
            [
                str(rolter), "fake-llm", "--listen", "127.0.0.1:0", "--name", name,
                "--ttft-ms", "0", "--prefill-us-per-token", "0",
                "--max-model-len", "16777216",
                "--token-delay-ms", str(token_delay_ms), "--threads", "1",
            ],
        ),
        work / f"{name}.log",
        stdout=stdout,
    )
    return Engine(name, _printed_address(stdout, process), process)


def start_stamp_engine(
    work: Path, processes: Processes, cpus: list[int], interval_ms: float
) -> Engine:
    stdout = work / "stamp.out"
    process = processes.spawn(
        "stamp",
        pinned(cpus, [os.environ.get("PYTHON", "python3"), str(STAMP_ENGINE),
                      "--interval-ms", str(interval_ms)]),
        work / "stamp.log",
        stdout=stdout,
    )
    return Engine("stamp", _printed_address(stdout, process), process)


def start_return_nginx(nginx: str, work: Path, processes: Processes, cpus: list[int]) -> Engine:
    """nginx answering every request with one chat completion from memory
    (`compare_upstream_nginx.conf.in`): the saturation rows' JSON upstream."""
    prefix = work / "upstream-nginx"
    prefix.mkdir(parents=True, exist_ok=True)
    listen = f"127.0.0.1:{free_port()}"
    values = {
        "USER": f"user {os.environ.get('USER') or 'root'};" if os.geteuid() == 0 else "",
        "PREFIX": str(prefix),
        "LISTEN": listen,
    }
    text = UPSTREAM_NGINX_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    conf = prefix / "nginx.conf"
    conf.write_text(text)
    process = processes.spawn(
        "upstream-nginx",
        pinned(cpus, [nginx, "-p", str(prefix), "-c", str(conf)]),
        prefix / "stderr.log",
        stop_signal=signal.SIGTERM,
    )
    url = f"http://{listen}"

    def up() -> bool:
        status, _ = http("GET", f"{url}/v1/models", timeout_s=2)
        return status == 200 or not process.alive()

    if not wait_until(10, up) or not process.alive():
        raise SetupError("the upstream nginx did not start:\n" + "\n".join(process.log_tail(20)))
    return Engine("upstream-nginx", url, process)


def start_sse_upstream(binary: Path, work: Path, processes: Processes, cpus: list[int],
                       chunks: int) -> Engine:
    """`sse-upstream` (bench-servers): every request answered with the same
    SSE stream of `chunks` events: the saturation rows' stream upstream."""
    name = f"sse-upstream-{chunks}"
    stdout = work / f"{name}.out"
    process = processes.spawn(
        name,
        pinned(cpus, [str(binary), "--listen", "127.0.0.1:0", "--chunks", str(chunks)]),
        work / f"{name}.log",
        stdout=stdout,
    )
    return Engine(name, _printed_address(stdout, process), process)


# --- the configurations --------------------------------------------------------


class Target:
    """One way of reaching the engines: `start` it, send traffic to `url`,
    read its `meter`, `stop` it."""

    name: str
    url: str
    meter: Meter

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Direct(Target):
    def __init__(self, engine: Engine, engine_pids: list[int]):
        self.name = "direct"
        self.url = engine.url
        self.meter = Meter(None, engine_pids)


class Nginx(Target):
    """nginx from the template, under a fresh prefix in the work directory."""

    def __init__(
        self,
        name: str,
        nginx: str,
        work: Path,
        processes: Processes,
        cpus: list[int],
        engines: list[Engine],
        engine_pids: list[int],
        request_buffering: bool,
    ):
        self.name = name
        self.nginx = nginx
        self.processes = processes
        self.cpus = cpus
        self.engines = engines
        self.prefix = work / name
        self.listen = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.listen}"
        self.request_buffering = request_buffering
        self.process: Process | None = None
        self.meter = Meter(None, engine_pids)

    def config_text(self) -> str:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        servers = "\n".join(
            f"        server {e.url.removeprefix('http://')};" for e in self.engines
        )
        values = {
            # As root, nginx would switch its workers to `nobody`.
            "USER": f"user {os.environ.get('USER') or 'root'};" if os.geteuid() == 0 else "",
            "WORKERS": str(len(self.cpus)),
            "NOFILE": str(soft),
            "CONNECTIONS": str(max(1024, soft - 64)),
            "PREFIX": str(self.prefix),
            "SERVERS": servers,
            "LISTEN": self.listen,
            "REQUEST_BUFFERING": "on" if self.request_buffering else "off",
        }
        text = NGINX_TEMPLATE.read_text()
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        return text

    def start(self) -> None:
        shutil.rmtree(self.prefix, ignore_errors=True)
        self.prefix.mkdir(parents=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config_text())
        self.process = self.processes.spawn(
            self.name,
            pinned(self.cpus, [self.nginx, "-p", str(self.prefix), "-c", str(conf)]),
            self.prefix / "stderr.log",
            # SIGTERM is nginx's fast shutdown.
            stop_signal=signal.SIGTERM,
        )
        process = self.process

        def up() -> bool:
            status, _ = http("GET", f"{self.url}/v1/models", timeout_s=2)
            return status == 200 or not process.alive()

        if not wait_until(10, up) or not process.alive():
            raise SetupError(
                f"{self.name} did not start:\n" + "\n".join(process.log_tail(20))
                + "\n" + (_read(str(self.prefix / "error.log")) or "")
            )
        self.meter = Meter(process.pid, self.meter.engine_pids)

    def stop(self) -> None:
        stop(self.process, signal.SIGTERM)  # nginx's fast shutdown
        self.process = None


class Rolter(Target):
    """`rolter serve`: one route (`chat`) over the engines, whose upstream
    model differs from the public one, so every request is parsed, routed
    and has its `model` rewritten in the body."""

    def __init__(
        self,
        name: str,
        rolter: Path,
        work: Path,
        processes: Processes,
        cpus: list[int],
        engines: list[Engine],
        engine_pids: list[int],
        strategy: str = "round_robin",
    ):
        self.name = name
        self.rolter = rolter
        self.processes = processes
        self.cpus = cpus
        self.engines = engines
        self.strategy = strategy
        self.dir = work / name
        self.listen = f"127.0.0.1:{free_port()}"
        self.admin = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.listen}"
        self.process: Process | None = None
        self.meter = Meter(None, engine_pids)

    def write_files(self) -> tuple[Path, Path]:
        self.dir.mkdir(parents=True, exist_ok=True)
        yaml = self.dir / "pingora.yaml"
        yaml.write_text(pingora_yaml(self.dir, len(self.cpus)))
        providers = "".join(
            f'[[providers]]\nname = "{e.name}"\nbase_url = "{e.url}"\n\n' for e in self.engines
        )
        targets = ",\n".join(
            f'  {{ provider = "{e.name}", model = "bench-upstream" }}' for e in self.engines
        )
        toml = self.dir / "rolter.toml"
        toml.write_text(
            "# Written by load-tests/compare.py.\n"
            "[server]\n"
            f'listen = ["{self.listen}"]\n'
            f'admin_listen = "{self.admin}"\n'
            "require_api_key = false\n"
            "# Off for the benchmark, as nginx's.\n"
            'access_log = "off"\n\n'
            f"{providers}"
            "[[routes]]\n"
            'model = "chat"\n'
            f'strategy = "{self.strategy}"\n'
            f"targets = [\n{targets},\n]\n"
        )
        return yaml, toml

    def start(self) -> None:
        yaml, toml = self.write_files()
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self.process = self.processes.spawn(
            self.name,
            pinned(self.cpus, [str(self.rolter), "serve", "-c", str(yaml), "--config", str(toml)]),
            self.dir / "rolter.log",
            env=env,
            # SIGINT is Pingora's fast shutdown.
            stop_signal=signal.SIGINT,
        )
        process = self.process

        def ready() -> bool:
            status, _ = http("GET", f"http://{self.admin}/readyz", timeout_s=2)
            return status == 200 or not process.alive()

        if not wait_until(30, ready) or not process.alive():
            raise SetupError(f"{self.name} did not become ready:\n" + "\n".join(process.log_tail(30)))
        self.meter = Meter(process.pid, self.meter.engine_pids)

    def stop(self) -> None:
        stop(self.process, signal.SIGINT)  # Pingora's fast shutdown
        self.process = None


class BarePingora(Target):
    """`bare-pingora` (bench-servers): the published Pingora 0.9.1 forwarding
    every request to the first engine and doing nothing else, with the
    gateway's Pingora settings (threads, work stealing, keep-alive pool)."""

    def __init__(self, name: str, binary: Path, work: Path, processes: Processes,
                 cpus: list[int], engines: list[Engine], engine_pids: list[int]):
        self.name = name
        self.binary = binary
        self.processes = processes
        self.cpus = cpus
        self.upstream = engines[0].url.removeprefix("http://")
        self.dir = work / name
        self.listen = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.listen}"
        self.process: Process | None = None
        self.meter = Meter(None, engine_pids)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        yaml = self.dir / "pingora.yaml"
        yaml.write_text(pingora_yaml(self.dir, len(self.cpus)))
        env = dict(os.environ, BARE_LISTEN=self.listen, BARE_UPSTREAM=self.upstream)
        self.process = self.processes.spawn(
            self.name,
            pinned(self.cpus, [str(self.binary), "-c", str(yaml)]),
            self.dir / "stderr.log",
            env=env,
            stop_signal=signal.SIGINT,
        )
        process = self.process

        def up() -> bool:
            status, _ = http("GET", f"{self.url}/v1/models", timeout_s=2)
            return status == 200 or not process.alive()

        if not wait_until(10, up) or not process.alive():
            raise SetupError(f"{self.name} did not start:\n" + "\n".join(process.log_tail(20)))
        self.meter = Meter(process.pid, self.meter.engine_pids)

    def stop(self) -> None:
        stop(self.process, signal.SIGINT)
        self.process = None


def pingora_yaml(directory: Path, threads: int) -> str:
    """The Pingora settings of every Pingora-based proxy of the benchmark
    (conf/pingora.yaml's, with as many threads as cores given)."""
    return (
        "---\nversion: 1\n"
        f"threads: {threads}\n"
        "work_stealing: false\n"
        "fast_timeout_to_tokio_threshold_seconds: 0\n"
        f"pid_file: {directory / 'pingora.pid'}\n"
        f"upgrade_sock: {directory / 'upgrade.sock'}\n"
        "grace_period_seconds: 1\n"
        "graceful_shutdown_timeout_seconds: 2\n"
        "upstream_keepalive_pool_size: 1024\n"
    )


def bench_server(name: str) -> Path:
    """A binary of `load-tests/bench-servers`, which `make bench-gateway` builds."""
    path = BENCH_SERVERS / name
    if not path.is_file():
        raise SetupError(
            f"{path} is missing: `make bench-gateway` builds it (cargo build --release "
            "--manifest-path load-tests/bench-servers/Cargo.toml --target-dir target/bench-servers)"
        )
    return path


def stop(process: Process | None, signum: int, wait_s: float = 5.0) -> None:
    if process is None or not process.alive():
        return
    process.popen.send_signal(signum)
    if process.wait_exit(wait_s) is None:
        process.popen.kill()
        process.wait_exit(5)


def find_nginx(given: str | None) -> str:
    for candidate in (given, os.environ.get("NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SetupError(
        "nginx not found: `make bench-gateway` installs it (apt-get install nginx-light), "
        "or pass --nginx PATH"
    )


def nofile_limit() -> int:
    """Raises the soft descriptor limit to the hard one (inherited by every
    child) and returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


__all__ = [
    "REPO",
    "BarePingora",
    "Direct",
    "Engine",
    "Meter",
    "Nginx",
    "Rolter",
    "Target",
    "bench_server",
    "find_nginx",
    "nofile_limit",
    "pinned",
    "start_fake_llm",
    "start_return_nginx",
    "start_sse_upstream",
    "start_stamp_engine",
    "window",
]
