"""``flowctl keys`` and ``flowctl serve`` (cli/commands/keys.py, serve.py): a key printed once and
usable, listed without its secret, revoked; serve refuses a non-loopback host without a live key."""
from __future__ import annotations

from click.testing import CliRunner

from flowctl.cli.commands.serve import loopback
from flowctl.cli.main import main
from flowctl.store.apikeys import keys_of
from flowctl.store.sql import open_store
from support.serverkit import make_server_project


def cli(*args):
    return CliRunner().invoke(main, list(args))


def test_keys_create_list_revoke(tmp_path):
    root = make_server_project(tmp_path)
    db = f"sqlite:///{tmp_path}/k.db"
    made = cli("keys", "create", "agent", "--scope", "gate", "--scope", "invoke:refund", "--root", str(root), "--db", db)
    assert made.exit_code == 0, made.output
    printed = made.stdout.strip().splitlines()[-1]
    assert printed.startswith("fck_")
    store = open_store(db)
    try:
        assert keys_of(store).verify(printed)["scopes"] == ["gate", "invoke:refund"]
    finally:
        store.close()
    listed = cli("keys", "list", "--root", str(root), "--db", db)
    assert "agent" in listed.output and "live" in listed.output and printed.split("_", 2)[2] not in listed.output  # the secret (it may hold "_")
    assert cli("keys", "create", "agent", "--scope", "gate", "--root", str(root), "--db", db).exit_code == 2
    assert cli("keys", "create", "x", "--scope", "root", "--root", str(root), "--db", db).exit_code == 2
    assert cli("keys", "revoke", "agent", "--root", str(root), "--db", db).exit_code == 0
    store = open_store(db)
    try:
        assert keys_of(store).verify(printed) is None
    finally:
        store.close()
    assert "revoked" in cli("keys", "list", "--root", str(root), "--db", db).output


def test_keys_create_refuses_an_invoke_scope_naming_no_contract(tmp_path):
    """(new-user finding: invoke:<misspelt tool> made a key every invoke answered 403)"""
    root = make_server_project(tmp_path)
    db = f"sqlite:///{tmp_path}/k.db"
    made = cli("keys", "create", "agent", "--scope", "invoke:refnd", "--root", str(root), "--db", db)
    assert made.exit_code == 2 and "no contract 'refnd'" in made.output and "invoke:refund" in made.output, made.output
    assert cli("keys", "list", "--root", str(root), "--db", db).output.startswith("no API keys")


def test_serve_refuses_a_public_host_without_a_key(tmp_path):
    root = make_server_project(tmp_path)
    r = cli("serve", "--host", "0.0.0.0", "--port", "0", "--root", str(root), "--db", f"sqlite:///{tmp_path}/s.db")
    assert r.exit_code == 2 and "no live API key" in r.output


def test_loopback_addresses():
    assert all(loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"))
    assert not any(loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))


def test_serve_on_a_port_in_use_is_a_clear_usage_error_before_it_claims_to_serve(tmp_path):
    # (new-user finding: it printed "flowctl serve: http://…", then uvicorn's error, then exit 3)
    import socket

    root = make_server_project(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        r = cli("serve", "--port", str(port), "--root", str(root), "--db", f"sqlite:///{tmp_path}/s.db")
    finally:
        taken.close()
    assert r.exit_code == 2, r.output
    assert f"cannot listen on 127.0.0.1:{port}" in r.output and "--port" in r.output
    assert "flowctl serve: http" not in r.output


def test_flowctl_serve_as_a_process_checks_concurrently_records_each_and_stops_cleanly(tmp_path):
    """The real command, as agents meet it: ``flowctl serve`` in its own process (uvicorn, its
    lifespan and WAL checkpointer), concurrent checks over real HTTP answered and recorded in
    causal order, a request without a key refused; SIGTERM stops it as a server stops (exit 0:
    uvicorn finishes the requests in flight and raises the signal again, which had made it exit
    130 with the message of a run cut off)."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    import httpx

    root = make_server_project(tmp_path)
    db = f"sqlite:///{tmp_path}/s.db"
    made = cli("keys", "create", "agent", "--scope", "gate", "--root", str(root), "--db", db)
    key = made.stdout.strip().splitlines()[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flowctl = str(Path(sys.executable).parent / "flowctl")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "runtime"))
    proc = subprocess.Popen([flowctl, "serve", "--port", str(port), "--root", str(root), "--db", db],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    base, h = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "flowctl serve did not listen"
                time.sleep(0.1)

        def check(i):
            with httpx.Client(base_url=base, headers=h, timeout=30) as c:
                return c.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": i}, "session": f"s{i % 2}"})

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(check, range(16)))
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
        by_session = {s: sorted(r.json()["seq"] for r in answers if r.json()["session"] == s) for s in ("s0", "s1")}
        assert by_session == {"s0": list(range(1, 9)), "s1": list(range(1, 9))}  # each numbered once, no gap
        assert sorted(r.json()["decision"] for r in answers).count("allow") == 4  # refunds: 2 per session
        assert httpx.post(f"{base}/v1/gate/check", json={"tool": "refund"}).status_code == 401
        # a process on this machine cannot choose the address its refusal is recorded under
        forged = httpx.post(f"{base}/v1/gate/check", json={"tool": "refund"}, headers={"X-Forwarded-For": "203.0.113.9"})
        assert forged.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, proc.stderr.read().decode()
    store = open_store(db)
    try:
        from flowctl.store.servicelog import log_of

        log = log_of(store)
        assert [len(log.session(s)) for s in ("s0", "s1")] == [8, 8]
        assert log.verify("s0") == [] and log.verify("s1") == []
        refusals = [r["data"] for r in log.session("access")]
        assert refusals and all(r.get("remote") == "127.0.0.1" for r in refusals), refusals
        assert "203.0.113.9" not in str(refusals)
    finally:
        store.close()
