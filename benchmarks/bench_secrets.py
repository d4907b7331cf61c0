"""Per-step cost of a flow with ``sensitive`` fields (issue 13, item 2): the loop of
:mod:`loop_flow` on a SQLite file store, with its contract plain and with ``sensitive:
[card_number]`` (the run input carries a card number, so each step redacts by value and seals the
cursor). Prints wall-clock and CPU (process time) µs per step: the median and the minimum of
interleaved trials (on a shared machine the minimum CPU time is the steadiest figure).

    python benchmarks/bench_secrets.py [--transitions 1200] [--trials 5] [--store sqlite|memory]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loop_flow import make_project  # noqa: E402


def one(root: Path, store_kind: str, transitions: int) -> tuple:
    import flowctl
    from flowctl.store.sql import MemoryStore, open_store

    project = flowctl.load_project(root)
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if store_kind == "memory" else open_store(f"sqlite:///{tmp}/flowctl.db")
        engine = flowctl.Engine(project, store, check=False)
        started, cpu = time.perf_counter(), time.process_time()
        result = engine.run("loop", {"card_number": "4111111111111111", "note": "card 4111111111111111"})
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert result.status == "succeeded", result
        store.close()
    return took / result.steps * 1e6, cpu / result.steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transitions", type=int, default=1200)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = make_project(Path(tmp) / "plain", args.transitions)
        secret = make_project(Path(tmp) / "secret", args.transitions)
        contract = secret / "orchestration" / "contracts" / "step.v1.0.0.yaml"
        contract.write_text(contract.read_text() + "sensitive: [card_number]\n")
        times = {"plain": [], "sensitive": []}
        one(secret, args.store, 30)  # warm-up: imports (cryptography) and compiled expressions
        for _ in range(args.trials):
            times["plain"].append(one(plain, args.store, args.transitions))
            times["sensitive"].append(one(secret, args.store, args.transitions))
    for name, values in times.items():
        wall, cpu = [w for w, _ in values], [c for _, c in values]
        print(f"{args.store} {name:9s} wall {statistics.median(wall):7.1f} µs/step (min {min(wall):.1f}), "
              f"cpu {statistics.median(cpu):7.1f} µs/step (min {min(cpu):.1f})")


if __name__ == "__main__":
    main()
