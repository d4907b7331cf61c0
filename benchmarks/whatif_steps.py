"""What-if experiments behind benchmarks/PROFILE.md: each variant monkeypatches ONE suspected cost
of flowctl's step (in a child process of its own; nothing under runtime/ is changed) and times the
loop of :mod:`loop_flow`; variants are interleaved over rounds and reported as median and minimum
µs/step with the saving against the unpatched baseline. A saving estimates what the matching fix in
runtime/ would buy. The patches reach into engine internals of the day they were written: a
variant that no longer applies fails loudly rather than measuring nothing.

    python benchmarks/whatif_steps.py memory [--transitions 6000] [--rounds 9]
    python benchmarks/whatif_steps.py sqlite [--transitions 1200] [--rounds 5]
"""
from __future__ import annotations

import argparse
import copy as _copy
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

VARIANTS = {
    "memory": {
        "baseline": "as is",
        "where": "Located.where() memoised (no file:line:col string built per step)",
        "encoder": "one module-level JSONEncoder for event data instead of json.dumps(...) per call",
        "deepcopy": "tool input copied with dict() when it holds only scalars",
        "check_size": "no JSON encoding of `set` values for the payload-size check",
        "raw_text": "no JSON round trip of a dict tool output (and no `raw` copy in tool_succeeded)",
        "micro": "the five above together",
        "no_hash": "no sha256 chaining of events (an upper bound, not a proposal)",
        "lean_events": "events kept as dicts: no JSON encoding, no hash (the cost of the audit trail)",
        "pyexpr": "simple JMESPath (a.b.c, a.b <op> `literal`) run as Python closures",
        "micro+pyexpr+lean_events": "everything above",
    },
    "sqlite": {
        "baseline": "as is",
        "raw_sqlite": "store.commit on one held sqlite3 connection, SQL text compiled once per column set",
        "no_path": "the run row's cursor JSON without `path` (every state visited so far)",
        "raw_sqlite+no_path": "both",
        "raw_sqlite+no_path+micro+pyexpr": "both, plus the in-memory micro fixes and Python closures for JMESPath",
    },
}


# ----------------------------------------------------------------------------- patches
def _patch_where():
    import flowctl.model as model

    orig, cache = model.Located.where, {}

    def where(self, *sub):
        key = (id(self), sub)
        found = cache.get(key)
        if found is None:
            found = cache[key] = orig(self, *sub)
        return found
    model.Located.where = where


def _patch_encoder():
    import flowctl.audit as audit
    import flowctl.runner as runner

    enc = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
    runner.encode_data = audit.encode_data = enc


def _patch_deepcopy():
    import flowctl.task as task

    scalar = (str, int, float, bool, type(None))

    class FastCopy:
        @staticmethod
        def deepcopy(x, memo=None):
            if type(x) is dict and all(type(v) in scalar for v in x.values()):
                return dict(x)
            return _copy.deepcopy(x, memo)
    assert hasattr(task, "copy")
    task.copy = FastCopy


def _patch_check_size():
    import flowctl.runner as runner

    patched = 0
    for obj in vars(runner).values():
        if isinstance(obj, type) and "check_size" in vars(obj):
            obj.check_size = lambda self, value, what: None
            patched += 1
    assert patched, "no check_size to patch"


def _patch_raw_text():
    import flowctl.task as task

    orig = task._parse_output

    def parse(raw, contract):
        return (raw, None) if type(raw) is dict else orig(raw, contract)
    task._parse_output = parse


def _patch_no_hash():
    import flowctl.runner as runner

    runner.event_hash = lambda prev, ev: "0" * 64


def _patch_lean_events():
    import flowctl.runner as runner

    runner.event_hash = lambda prev, ev: "0" * 64
    runner.encode_data = lambda data: ""


_PATH = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*$")
_CMP = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*(<=|>=|==|!=|<|>)\s*`([^`]*)`\s*$")


def _getter(path: str):
    keys = path.split(".")

    def get(scope):
        v = scope
        for k in keys:
            if type(v) is not dict:
                return None
            v = v.get(k)
        return v
    return get


def _patch_pyexpr():
    """A sketch of compiling flowctl's common expressions to Python: a field path, or a field
    compared with a literal; everything else keeps the JMESPath tree walk."""
    import operator

    import flowctl.expressions as ex

    ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
           "!=": operator.ne}
    orig_init = ex.Expression.__init__

    def init(self, text, where=""):
        orig_init(self, text, where)
        m = _PATH.match(text)
        if m:
            self._visit = lambda _tree, scope, g=_getter(m.group(1)): g(scope)
            return
        m = _CMP.match(text)
        if m:
            get, op, lit = _getter(m.group(1)), ops[m.group(2)], json.loads(m.group(3))
            numeric = m.group(2) in ("<", "<=", ">", ">=")

            def cmp(_tree, scope):
                v = get(scope)
                if numeric and (type(v) not in (int, float) or type(lit) not in (int, float)):
                    return None  # JMESPath: ordering comparisons of non-numbers are null
                return op(v, lit)
            self._visit = cmp
    ex.Expression.__init__ = init
    ex._CACHE.clear()


def _patch_raw_sqlite():
    import sqlalchemy as sa

    import flowctl.store as st

    orig = st.SqlStore.commit

    def commit(self, run_id, expect_seq, run, events=(), steps=(), *, fence=None, lease=None):
        if fence is not None or steps or not self.url.startswith("sqlite"):
            return orig(self, run_id, expect_seq, run, events, steps, fence=fence, lease=lease)
        row = {k: (st._dumps(v) if k in st._JSON_RUN else v) for k, v in run.items()}
        due = st._review_due(run)
        if due is not None:
            row["available_at"] = due
        if any(isinstance(v, sa.sql.ClauseElement) for v in row.values()):
            return orig(self, run_id, expect_seq, run, events, steps, fence=fence, lease=lease)
        cache = self.__dict__.setdefault("_whatif_sql", {})
        key = tuple(row)
        found = cache.get(key)
        if found is None:
            comp = self._update_free.compile(dialect=self.engine.dialect, column_keys=list(key))
            found = cache[key] = (str(comp), comp.positiontup, dict(comp.params))
        usql, upos, defaults = found
        params = dict(defaults, **row, b_id=run_id, b_expect=expect_seq)
        rows = [st._event_row(run_id, e) for e in events]
        if rows:
            ekey = ("events",) + tuple(rows[0])
            efound = cache.get(ekey)
            if efound is None:
                comp = self.t.events.insert().compile(dialect=self.engine.dialect, column_keys=list(rows[0]))
                efound = cache[ekey] = (str(comp), comp.positiontup)
        raw = self.__dict__.get("_whatif_raw")
        if raw is None:
            raw = self._whatif_raw = self.engine.raw_connection().driver_connection
        cur = raw.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(usql, [params[n] for n in upos])
            if cur.rowcount != 1:
                raise RuntimeError("conflict")
            if rows:
                cur.executemany(efound[0], [[r[n] for n in efound[1]] for r in rows])
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
    st.SqlStore.commit = commit


def _patch_no_path():
    import flowctl.store as st

    orig = st._dumps

    def dumps(v):
        if type(v) is dict and "path" in v:
            v = {k: x for k, x in v.items() if k != "path"}
        return orig(v)
    st._dumps = dumps


PATCHES = {"where": [_patch_where], "encoder": [_patch_encoder], "deepcopy": [_patch_deepcopy],
           "check_size": [_patch_check_size], "raw_text": [_patch_raw_text], "no_hash": [_patch_no_hash],
           "lean_events": [_patch_lean_events], "pyexpr": [_patch_pyexpr], "raw_sqlite": [_patch_raw_sqlite],
           "no_path": [_patch_no_path]}
PATCHES["micro"] = [_patch_where, _patch_encoder, _patch_deepcopy, _patch_check_size, _patch_raw_text]


def apply(variant: str) -> None:
    if variant == "baseline":
        return
    for part in variant.split("+"):
        for patch in PATCHES[part]:
            patch()


def child(variant: str, store: str, transitions: int) -> float:
    import flowctl
    from flowctl.store import open_store
    from loop_flow import expected_steps, make_project

    apply(variant)
    with tempfile.TemporaryDirectory(prefix="flowctl-whatif-") as tmp:
        project = flowctl.load_project(make_project(Path(tmp) / "p", transitions))
        st = open_store("memory" if store == "memory" else f"sqlite:///{tmp}/whatif.db")
        engine = flowctl.Engine(project, st, check=False)
        started = time.perf_counter()
        result = engine.run("loop", {})
        took = time.perf_counter() - started
        assert result.status == "succeeded" and result.steps == expected_steps(transitions), result
        st.close()
    return took / transitions * 1e6


def run(store: str = "memory", transitions: int = 6000, rounds: int = 9) -> dict:
    import os

    names = list(VARIANTS[store])
    samples: dict = {n: [] for n in names}
    before = [round(x, 2) for x in os.getloadavg()]
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            done = subprocess.run([sys.executable, __file__, "--child", name, store, "--transitions", str(transitions)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"variant {name} failed: {done.stderr[-2000:]}")
            samples[name].append(float(done.stdout.strip().splitlines()[-1]))
    base_med, base_min = statistics.median(samples["baseline"]), min(samples["baseline"])
    out = {"store": store, "transitions": transitions, "rounds": rounds, "loadavg_before": before,
           "loadavg_after": [round(x, 2) for x in os.getloadavg()], "variants": {}}
    for name in names:
        med, low = statistics.median(samples[name]), min(samples[name])
        out["variants"][name] = {"what": VARIANTS[store][name], "median_us": med, "min_us": low,
                                 "saving_median_pct": (base_med - med) / base_med * 100,
                                 "saving_min_pct": (base_min - low) / base_min * 100, "samples_us": samples[name]}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", choices=("memory", "sqlite"))
    parser.add_argument("--transitions", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--child", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.transitions or (6000 if args.store == "memory" else 1200)
    if args.child:
        print(child(args.child, args.store, n))
        sys.exit(0)
    result = run(args.store, n, args.rounds or (9 if args.store == "memory" else 5))
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"whatif_{args.store}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.store}, {n:,} transitions, {result['rounds']} rounds, load {result['loadavg_before']} -> "
          f"{result['loadavg_after']}")
    for name, v in result["variants"].items():
        print(f"{name:34s} median {v['median_us']:8.1f} µs/step ({v['saving_median_pct']:+5.1f}% saved)  "
              f"min {v['min_us']:8.1f} ({v['saving_min_pct']:+5.1f}%)  {v['what']}")
