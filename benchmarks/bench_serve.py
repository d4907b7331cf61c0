"""``flowctl serve`` on loopback (issue 19): ``POST /v1/gate/check`` latency with 1 and 8 concurrent
clients, and the overhead of a session invoke over calling the same tool directly.

The server is ``flowctl serve`` in a subprocess (uvicorn, SQLite store, the per-key rate limit
raised out of the way); each client is a thread with its own keep-alive ``httpx.Client``. A
recorded (not dry-run) check of a side-effecting tool that a policy allows is what is timed, so
each one writes the gate log (rate and dedupe) and the service log. Targets (issue 19): p99 < 5 ms
with 8 clients; a session invoke of a 300 ms tool at most 5% slower than calling that tool
directly (median of interleaved trials: the invoke then adds the schema checks, the gate, the
``started`` record, verify, the saga entry and the audit commit, plus the HTTP round trip).
"""
from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FLOWCTL = str(Path(sys.executable).parent / "flowctl")
TOOL_S = 0.3

TOOLS = f'''
import time

def send(input, call):
    return {{"sent": True}}

def slow(input, call):
    time.sleep({TOOL_S})
    return {{"done": True}}

def ok(input, output, call):
    return True

def undo(input, output, call):
    pass
'''

FILES = {
    "contracts/send_email.v1.0.0.yaml": "id: send_email\nversion: 1.0.0\nentrypoint: bt:send\nverify: bt:ok\n"
                                        "compensate: bt:undo\nside_effects:\n  - {type: email, target: smtp}\n"
                                        "input_schema:\n  type: object\n  required: [to_domain]\n",
    "contracts/slow_write.v1.0.0.yaml": "id: slow_write\nversion: 1.0.0\nentrypoint: bt:slow\nverify: bt:ok\n"
                                        "compensate: bt:undo\nside_effects:\n  - {type: database_write, target: t}\n",
    "policies/outbound.yaml": "policy: outbound\napplies_to: [send_email, slow_write]\nallow:\n"
                              "  - {field: input.to_domain, in: [corp.example, shop.example]}\n"
                              "  - {field: input.kind, equals: report}\n"
                              "rate: {max: 100000000, window: 1m, per: run}\n",
    "tools/bt.py": TOOLS,
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quantiles(samples: list) -> dict:
    q = statistics.quantiles(samples, n=100)
    return {"requests": len(samples), "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
            "mean_ms": statistics.fmean(samples) * 1e3}


def _checks(base: str, headers: dict, clients: int, per_client: int) -> dict:
    import httpx

    samples: list = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(k: int):
        mine = []
        with httpx.Client(base_url=base, headers=headers, timeout=30) as c:
            for i in range(20):  # warm the connection
                c.post("/v1/gate/check", json={"tool": "send_email", "input": {"to_domain": "corp.example",
                                                                               "kind": "report"}, "dry_run": True})
            start.wait()
            for i in range(per_client):
                body = {"tool": "send_email", "session": f"bench-{clients}-{k}",
                        "input": {"to_domain": "corp.example", "kind": "report", "n": i}}
                t = time.perf_counter()
                r = c.post("/v1/gate/check", json=body)
                mine.append(time.perf_counter() - t)
                assert r.status_code == 200 and r.json()["decision"] == "allow", r.text
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out = _quantiles(samples)
    out["clients"] = clients
    out["per_second"] = len(samples) / wall
    return out


def _invoke_overhead(base: str, headers: dict, root: Path, trials: int) -> dict:
    import httpx

    sys.path.insert(0, str(root / "orchestration" / "tools"))
    try:
        import bt
    finally:
        sys.path.pop(0)
    with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
        sid = c.post("/v1/sessions", json={"name": "bench"}).json()["session"]
        direct, invoke = [], []

        def one_direct():
            t = time.perf_counter()
            bt.slow({}, None)
            return time.perf_counter() - t

        def one_invoke():
            t = time.perf_counter()
            r = c.post(f"/v1/sessions/{sid}/tools/slow_write/invoke",
                       json={"input": {"to_domain": "corp.example", "kind": "report"}})
            took = time.perf_counter() - t
            assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
            return took

        one_invoke()  # the tool module imported, the connection open
        for i in range(trials):  # interleaved, the order alternating
            pair = (one_direct, one_invoke) if i % 2 == 0 else (one_invoke, one_direct)
            for fn in pair:
                (direct if fn is one_direct else invoke).append(fn())
        c.post(f"/v1/sessions/{sid}/close", json={"compensate": False})
    d, v = statistics.median(direct), statistics.median(invoke)
    return {"tool_s": TOOL_S, "trials": trials, "direct_median_s": d, "invoke_median_s": v,
            "overhead_ms": (v - d) * 1e3, "overhead_ratio": (v - d) / d}


def run(single: int = 1000, per_client: int = 250, trials: int = 10) -> dict:
    from flowctl.store.apikeys import keys_of
    from flowctl.store.sql import open_store

    out = {"loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in FILES.items():
            (root / "orchestration" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "orchestration" / rel).write_text(text)
        db = f"sqlite:///{tmp}/serve.db"
        store = open_store(db, create=True)
        _, key = keys_of(store).create("bench", ("gate", "invoke:slow_write"))
        store.close()
        port = _port()
        proc = subprocess.Popen([FLOWCTL, "serve", "--root", tmp, "--db", db, "--port", str(port),
                                 "--rate", "1000000", "--burst", "1000000"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError("flowctl serve exited")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("flowctl serve did not listen") from None
                    time.sleep(0.1)
            out["check_1_client"] = _checks(base, headers, 1, single)
            out["check_8_clients"] = _checks(base, headers, 8, per_client)
            out["invoke"] = _invoke_overhead(base, headers, root, trials)
        finally:
            proc.terminate()
            proc.wait(20)
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    p99 = out["check_8_clients"]["p99_ms"]
    ratio = out["invoke"]["overhead_ratio"]
    out["targets"] = {"gate check p99 < 5 ms with 8 clients (loopback, SQLite)": {"value": p99, "limit": 5.0,
                                                                                  "met": p99 < 5.0},
                      "invoke overhead over a direct call of a 300 ms tool <= 5%": {"value": ratio * 100, "limit": 5.0,
                                                                                     "met": ratio <= 0.05}}
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(300, 100, 4), indent=2))
