"""What the scenarios do to the gateway while k6 drives traffic: a Pingora
upgrade (new `rolter serve -u`, SIGQUIT to the old process, wait for it to
drain and exit) and a configuration reload that must build a new snapshot."""

from __future__ import annotations

import json
import signal
import time

from fleet import (
    GRACEFUL_SHUTDOWN_TIMEOUT_S,
    MODEL,
    PINGORA_CLOSE_TIMEOUT_S,
    Gateway,
    http,
    wait_until,
)


def log(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:6.1f}s] {message}", flush=True)


def upgrade_once(gateway: Gateway, n: int, start: float) -> dict:
    """One Pingora upgrade; returns its record (`ok` true when it completed)."""
    old = gateway.process
    assert old is not None
    record: dict = {"upgrade": n, "old_pid": old.pid, "ok": False}
    began = time.monotonic()
    record["started_at_s"] = round(began - start, 2)
    sock_before = gateway.upgrade_sock.stat().st_ino if gateway.upgrade_sock.exists() else None

    gateway.generation += 1
    new = gateway.spawn(upgrade=True)
    record["new_pid"] = new.pid
    log(start, f"upgrade {n}: started {new.name} (pid {new.pid}) with -u")

    # The new process binds the upgrade socket, then waits for the listeners.
    def sock_ready() -> bool:
        try:
            return gateway.upgrade_sock.stat().st_ino != sock_before or not new.alive()
        except FileNotFoundError:
            return not new.alive()

    if not wait_until(10, sock_ready) or not new.alive():
        record["error"] = f"{new.name} did not open {gateway.upgrade_sock}"
        return record

    # The pid file is Pingora's in daemon mode only; when present it must name
    # the process being replaced.
    if gateway.pid_file.exists():
        listed = gateway.pid_file.read_text().strip()
        if listed and listed != str(old.pid):
            record["error"] = f"pid file names {listed}, expected {old.pid}"
            return record
    old.popen.send_signal(signal.SIGQUIT)
    quit_at = time.monotonic()
    record["sigquit_at_s"] = round(quit_at - start, 2)
    log(start, f"upgrade {n}: SIGQUIT to {old.name} (pid {old.pid})")

    limit = PINGORA_CLOSE_TIMEOUT_S + gateway.grace_period_s + GRACEFUL_SHUTDOWN_TIMEOUT_S + 10
    status = old.wait_exit(limit)
    if status is None:
        record["error"] = f"{old.name} still running {limit} s after SIGQUIT"
        return record
    record["old_exit_status"] = status
    record["old_exit_after_s"] = round(time.monotonic() - quit_at, 2)
    log(start, f"upgrade {n}: {old.name} exited with {status} after {record['old_exit_after_s']} s")
    if not new.alive():
        record["error"] = f"{new.name} exited with {new.popen.returncode}"
        return record
    if not wait_until(10, gateway.ready):
        record["error"] = f"{new.name} not ready after the old process exited"
        return record
    gateway.process = new
    record["took_s"] = round(time.monotonic() - began, 2)
    record["ok"] = status == 0
    if status != 0:
        record["error"] = f"{old.name} exited with status {status}"
    return record


def reload_once(gateway: Gateway, engines: list[tuple[str, str]], n: int, last_version: int | None) -> dict:
    order = gateway.write_config(engines, rotation=n)
    record: dict = {"reload": n, "order": order, "ok": False}
    began = time.monotonic()
    status, body = http("POST", f"{gateway.admin_url}/admin/reload", gateway.admin_token)
    record["status"] = status
    record["took_ms"] = round((time.monotonic() - began) * 1000, 1)
    if status != 200:
        record["error"] = f"status {status}: {body[:300]}"
        return record
    try:
        answer = json.loads(body)
    except json.JSONDecodeError:
        record["error"] = f"not JSON: {body[:300]}"
        return record
    version = answer.get("version")
    record["version"] = version
    if answer.get("status") != "ok" or not isinstance(version, int):
        record["error"] = f"unexpected answer: {body[:300]}"
        return record
    if last_version is not None and version <= last_version:
        record["error"] = f"version {version} after {last_version}: no new snapshot"
        return record
    # The new snapshot is the one serving: /admin/routes lists its version
    # and the new order (checked when the answer has the known shape).
    status, routes = http("GET", f"{gateway.admin_url}/admin/routes", gateway.admin_token)
    served = route_order(routes) if status == 200 else None
    if served is not None:
        served_version, served_order = served
        record["routes_checked"] = True
        if served_version != version or served_order != order:
            record["error"] = (
                f"/admin/routes shows version {served_version} with {served_order}"
                f" after reload to version {version} with {order}"
            )
            return record
    record["ok"] = True
    return record


def route_order(routes_json: str) -> tuple[int, list[str]] | None:
    """(version, providers of route MODEL in order) from /admin/routes, or
    None when the answer does not have the shape known here."""
    try:
        answer = json.loads(routes_json)
        for route in answer["routes"]:
            if route["model"] == MODEL:
                return answer["version"], [t["provider"] for t in route["targets"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    return None
