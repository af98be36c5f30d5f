"""The processes of a load run: fake engines and the rolter gateway on
loopback, their configuration files in a temporary directory, and the
bookkeeping that stops every one of them at the end (bounded waits; children
also die with the runner if it is killed)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = "chat"

# After SIGQUIT, Pingora's old process hands its listeners over and keeps
# serving for CLOSE_TIMEOUT (pingora-core's server/mod.rs), then stops its
# listeners; rolter then exits as soon as its last request in flight ends
# (src/signals.rs). Pingora cuts whatever still runs `grace_period_seconds`
# after the listeners stopped, so the grace period bounds the longest stream
# that survives an upgrade; it costs nothing when streams are short.
PINGORA_CLOSE_TIMEOUT_S = 5
GRACEFUL_SHUTDOWN_TIMEOUT_S = 30


class SetupError(Exception):
    """The run could not be set up; the message says what and how to fix it."""


# --- processes -----------------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: children rely on the cleanup below
    _prctl = None


def _die_with_runner() -> None:
    # Runs in the child between fork and exec: if the runner is killed
    # (SIGKILL, OOM) its children get SIGKILL instead of lingering. Every
    # child is spawned from the main thread, which lives as long as the runner.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclasses.dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_exit(self, limit_s: float) -> int | None:
        try:
            return self.popen.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 30) -> list[str]:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]


class Processes:
    """Every process the runner started, stopped in reverse order at the end."""

    def __init__(self) -> None:
        self.started: list[tuple[Process, int, float]] = []

    def spawn(
        self,
        name: str,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        stdout: Path | None = None,
        stop_signal: int = signal.SIGTERM,
        stop_wait_s: float = 5.0,
    ) -> Process:
        with open(log, "ab") as err, open(stdout or log, "ab") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=REPO,
                # Own process group: a Ctrl-C on the terminal reaches the
                # runner only, which then stops everything in order.
                start_new_session=True,
                preexec_fn=_die_with_runner,
            )
        process = Process(name, popen, log)
        self.started.append((process, stop_signal, stop_wait_s))
        return process

    def stop_all(self) -> None:
        for process, stop_signal, wait_s in reversed(self.started):
            if not process.alive():
                continue
            try:
                process.popen.send_signal(stop_signal)
            except ProcessLookupError:
                continue
            if process.wait_exit(wait_s) is None:
                process.popen.kill()
                process.wait_exit(5)


# --- small helpers -----------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(
    method: str, url: str, token: str | None = None, timeout_s: float = 10.0
) -> tuple[int | None, str]:
    """(status, body); status None and the error text when nothing answered."""
    request = urllib.request.Request(url, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def wait_until(limit_s: float, check, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


# --- the gateway under test -------------------------------------------------


class Gateway:
    """The gateway's files and its current `rolter serve` process."""

    def __init__(
        self, rolter: Path, work: Path, processes: Processes, admin_token: str, grace_period_s: int
    ):
        self.rolter = rolter
        self.grace_period_s = grace_period_s
        self.work = work
        self.processes = processes
        self.admin_token = admin_token
        self.listen = f"127.0.0.1:{free_port()}"
        self.admin = f"127.0.0.1:{free_port()}"
        self.toml = work / "rolter.toml"
        self.yaml = work / "pingora.yaml"
        self.pid_file = work / "rolter.pid"
        self.upgrade_sock = work / "upgrade.sock"
        self.generation = 0
        self.process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://{self.listen}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin}"

    def write_pingora_yaml(self) -> None:
        self.yaml.write_text(
            "---\n"
            "version: 1\n"
            "threads: 2\n"
            "work_stealing: false\n"
            "fast_timeout_to_tokio_threshold_seconds: 0\n"
            f"pid_file: {self.pid_file}\n"
            f"upgrade_sock: {self.upgrade_sock}\n"
            f"grace_period_seconds: {self.grace_period_s}\n"
            f"graceful_shutdown_timeout_seconds: {GRACEFUL_SHUTDOWN_TIMEOUT_S}\n"
            "upstream_keepalive_pool_size: 128\n"
        )

    def write_config(self, engines: list[tuple[str, str]], rotation: int = 0) -> list[str]:
        """Writes rolter.toml with the route's targets rotated by `rotation`
        (atomically: a reload never reads half a file). Returns the order."""
        providers = "".join(
            f'[[providers]]\nname = "{name}"\nbase_url = "{url}"\n\n' for name, url in engines
        )
        names = [name for name, _ in engines]
        k = rotation % len(names)
        order = names[k:] + names[:k]
        targets = ",\n".join(f'  {{ provider = "{name}" }}' for name in order)
        text = (
            f"# Written by load-tests/run.py (rotation {rotation}).\n"
            "[server]\n"
            f'listen = ["{self.listen}"]\n'
            f'admin_listen = "{self.admin}"\n'
            "require_api_key = false\n\n"
            f"{providers}"
            "[[routes]]\n"
            f'model = "{MODEL}"\n'
            'strategy = "round_robin"\n'
            f"targets = [\n{targets},\n]\n\n"
            "[[admin_tokens]]\n"
            'name = "load-test"\n'
            'token_env = "ROLTER_ADMIN_TOKEN"\n'
            'role = "admin"\n'
        )
        tmp = self.toml.with_suffix(".toml.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.toml)
        return order

    def spawn(self, upgrade: bool) -> Process:
        name = f"gateway-{self.generation}"
        argv = [str(self.rolter), "serve"]
        if upgrade:
            argv.append("-u")
        argv += ["-c", str(self.yaml), "--config", str(self.toml)]
        env = dict(os.environ, ROLTER_ADMIN_TOKEN=self.admin_token)
        env.setdefault("RUST_LOG", "info")
        # SIGINT is Pingora's fast shutdown: right for cleaning up.
        return self.processes.spawn(
            name, argv, self.work / f"{name}.log", env=env, stop_signal=signal.SIGINT
        )

    def ready(self) -> bool:
        status, _ = http("GET", f"{self.admin_url}/readyz", timeout_s=2)
        return status == 200

    def start(self) -> None:
        self.process = self.spawn(upgrade=False)
        process = self.process
        if not wait_until(30, lambda: self.ready() or not process.alive()) or not process.alive():
            tail = "\n".join(process.log_tail(40))
            raise SetupError(f"{process.name} did not become ready:\n{tail}")

    def metrics_requests(self) -> float | None:
        """rolter_requests_total summed over its labels, from /metrics."""
        status, text = http("GET", f"{self.admin_url}/metrics")
        if status != 200:
            return None
        total = 0.0
        for line in text.splitlines():
            if line.startswith("rolter_requests_total"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def start_engines(
    rolter: Path, work: Path, processes: Processes, count: int, token_delay_ms: int,
    extra_args: tuple[str, ...] = (),
) -> list[tuple[str, str]]:
    engines = []
    for i in range(count):
        name = f"engine-{i + 1}"
        stdout = work / f"{name}.out"
        process = processes.spawn(
            name,
            [
                str(rolter), "fake-llm", "--listen", "127.0.0.1:0", "--name", name,
                "--token-delay-ms", str(token_delay_ms), *extra_args,
            ],
            work / f"{name}.log",
            stdout=stdout,
        )
        address: list[str] = []

        def printed_address() -> bool:
            # `fake-llm listening on http://ADDR` is the first line of stdout.
            try:
                text = stdout.read_text()
            except OSError:
                return False
            first, newline, _ = text.partition("\n")
            if newline and "http://" in first:  # a whole line, not half of one
                # Later words name the engine's KV-event sockets, if any.
                address.append("http://" + first.split("http://", 1)[1].split()[0])
                return True
            return not process.alive()

        if not wait_until(10, printed_address) or not address:
            raise SetupError(
                f"{name} printed no address:\n" + "\n".join(process.log_tail(20))
            )
        engines.append((name, address[0]))
    return engines
