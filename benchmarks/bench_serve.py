"""``flowctl serve`` on loopback (issue 19): ``POST /v1/gate/check`` latency with 1 and 8 concurrent
clients, and the overhead of a session invoke over calling the same tool directly.

The server is ``flowctl serve`` in a subprocess (uvicorn, SQLite store, the per-key rate limit
raised out of the way). Each client is a thread holding one keep-alive HTTP/1.1 connection and
sending prepared requests over a plain socket (:class:`RawClient`): a load generator must not be
what is measured, and ``httpx`` clients in 8 threads of one process were (against a bare Starlette
route that does nothing they reached 620 requests/s and p99 33 ms; this client reaches about
5,800/s and 2.8 ms on the same route). Beside flowctl, the same clients are timed against that
bare route (**the floor**: uvicorn with the same settings, a Starlette route reading the body and
answering a fixed decision) in the same run. Both run on :func:`flowctl.server.wire.config`, which
sends each response in one write (headers and body together; see :mod:`flowctl.server.wire`).

A recorded (not dry-run) check of a side-effecting tool that a policy allows is what is timed, so
each one writes the gate log (rate and dedupe) and the service log. Targets (issue 19): p99 < 5 ms
with 8 clients; a session invoke of a 300 ms tool at most 5% slower than calling that tool
directly (median of interleaved trials: the invoke then adds the schema checks, the gate, the
``started`` record, verify, the saga entry and the audit commit, plus the HTTP round trip).
"""
from __future__ import annotations

import json
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


class RawClient:
    """One keep-alive HTTP/1.1 connection: :meth:`post` sends a prepared request and reads the
    response (status line, ``content-length`` body). The socket calls release the GIL."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    @staticmethod
    def request(path: str, body: dict, headers: dict) -> bytes:
        data = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{head}"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    def post(self, request: bytes) -> tuple:
        """``(status, body bytes)``."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self._recv()
        self.buf = rest[length:]
        return int(lines[0].split()[1]), rest[:length]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def _checks(port: int, headers: dict, clients: int, per_client: int, expect: bool = True, tag: str = "") -> dict:
    """``clients`` clients each sending ``per_client`` checks in a session of its own (named by
    ``tag``: each round its own sessions, so every session holds ``per_client`` calls in the rate
    window, as in a single round)."""
    samples: list = []
    lock = threading.Lock()
    start = threading.Barrier(clients)
    failed: list = []

    def client(k: int):
        mine = []
        c = RawClient(port)
        try:
            warm = RawClient.request("/v1/gate/check", {"tool": "send_email", "dry_run": True, "input": {
                "to_domain": "corp.example", "kind": "report"}}, headers)
            for i in range(20):  # warm the connection
                c.post(warm)
            session = f"bench-{clients}-{tag}{k}"
            requests = [RawClient.request("/v1/gate/check", {"tool": "send_email", "session": session, "input": {
                "to_domain": "corp.example", "kind": "report", "n": i}}, headers) for i in range(per_client)]
            start.wait()
            for request in requests:
                t = time.perf_counter()
                status, body = c.post(request)
                mine.append(time.perf_counter() - t)
                if expect and (status != 200 or json.loads(body)["decision"] != "allow"):
                    raise AssertionError(body)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            failed.append(exc)
            start.abort()
        finally:
            c.close()
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failed:
        raise failed[0]
    out = _quantiles(samples)
    out["clients"] = clients
    out["per_second"] = len(samples) / wall
    return out


FLOOR_APP = """
import sys
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

ANSWER = (b'{"decision":"allow","tool":"send_email@1.0.0","policy":"outbound","rule":"allow",'
          b'"reason":"every check of outbound holds","session":"s","seq":1,"dry_run":false,"caller":"bench"}')


async def check(request):
    await request.body()
    return Response(ANSWER, media_type="application/json")


app = Starlette(routes=[Route("/v1/gate/check", check, methods=["POST"])])

if __name__ == "__main__":  # on uvicorn exactly as flowctl serve runs (flowctl.server.wire.config)
    import uvicorn
    from flowctl.server import wire

    uvicorn.Server(wire.config(app, "127.0.0.1", int(sys.argv[1]))).run()
"""


def _server(args: list, port: int):
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{args[0]} exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{args[0]} did not listen") from None
            time.sleep(0.1)


def _floor_server(tmp: str):
    """``(process, port)`` of the bare route (the floor) on uvicorn with the configuration ``flowctl
    serve`` uses (:func:`flowctl.server.wire.config`: its HTTP protocol, uvloop, no access log)."""
    Path(tmp, "floorapp.py").write_text(FLOOR_APP)
    port = _port()
    return _server([sys.executable, str(Path(tmp, "floorapp.py")), str(port)], port), port


def _rounds(runs: list) -> dict:
    """The median round's figures (by p99), with every round's p99 and p50 beside them."""
    ranked = sorted(runs, key=lambda r: r["p99_ms"])
    out = dict(ranked[len(ranked) // 2])
    out["rounds"] = len(runs)
    out["p99_ms_each"] = [round(r["p99_ms"], 2) for r in runs]
    out["p50_ms_each"] = [round(r["p50_ms"], 2) for r in runs]
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


def run(single: int = 1000, per_client: int = 250, trials: int = 10, rounds: int = 5) -> dict:
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
        proc = _server([FLOWCTL, "serve", "--root", tmp, "--db", db, "--port", str(port),
                        "--rate", "1000000", "--burst", "1000000"], port)
        floor, floor_port = _floor_server(tmp)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            ours, bare = [], []
            for r in range(rounds):  # interleaved: flowctl, then the floor, each round
                ours.append(_checks(port, headers, 8, per_client, tag=f"r{r}-"))
                bare.append(_checks(floor_port, {}, 8, per_client, expect=False))
            out["check_8_clients"], out["floor_8_clients"] = _rounds(ours), _rounds(bare)
            out["check_1_client"] = _checks(port, headers, 1, single)
            out["floor_1_client"] = _checks(floor_port, {}, 1, single, expect=False)
            out["invoke"] = _invoke_overhead(base, headers, root, trials)
        finally:
            for p in (proc, floor):
                p.terminate()
                p.wait(20)
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    eight, floor = out["check_8_clients"], out["floor_8_clients"]
    p99 = eight["p99_ms"]
    ratio = out["invoke"]["overhead_ratio"]
    out["targets"] = {"gate check p99 < 5 ms with 8 clients (loopback, SQLite)": {
        "value": p99, "limit": 5.0, "met": p99 < 5.0,
        "ratios": {"p50 ms": eight["p50_ms"], "checks/s": eight["per_second"], "floor p99 ms": floor["p99_ms"],
                   "floor requests/s": floor["per_second"], "1 client p99 ms": out["check_1_client"]["p99_ms"]}},
        "invoke overhead over a direct call of a 300 ms tool <= 5%": {"value": ratio * 100, "limit": 5.0,
                                                                       "met": ratio <= 0.05}}
    return out


if __name__ == "__main__":
    print(json.dumps(run(300, 100, 4, 3), indent=2))
