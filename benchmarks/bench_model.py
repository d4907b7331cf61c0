"""The overhead flowctl adds to a model step (issue 18): one ``llm`` state (render the prompt, the
request through the official openai SDK, read and validate the reply's JSON, the ``model_called``
record, the durable step on SQLite) against the same SDK call made directly, both to a local
Chat Completions server (tests/support/modelserver.py) that answers after ``--delay`` seconds.

Prints the median wall-clock ms of each over interleaved trials and the overhead as a fraction of
the model call (target: at most 5% of a 300 ms call); the overhead in ms is measured again against
a server that answers at once (less noise from the delay). A part of ``make bench`` (``model``);
writes benchmarks/results/model.json when run alone.

    python benchmarks/bench_model.py [--delay 0.3] [--trials 15] [--zero-trials 60]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

sys.path.insert(0, str(HERE))

from common import interleaved, loadavg, stats, write  # noqa: E402
from report import target  # noqa: E402
from support.modelserver import ModelServer  # noqa: E402

REPLY = {"intent": "refund", "confidence": 0.9}
FILES = {
    "models.yaml": "profiles:\n  default: {provider: openai, model: bench}\n",
    "prompts/classify.md": "Classify this ticket from {{ input.customer }}:\n{{ input.text }}\n",
    "states/classify.yaml": "id: classify\ntype: llm\nprompt: classify.md\noutput_schema:\n  type: object\n"
                            "  required: [intent, confidence]\n  properties:\n    intent: {enum: [refund, other]}\n"
                            "    confidence: {type: number}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/f.yaml": "flow: f\nstart: classify\ntransitions:\n  - {from: classify, to: done}\n",
}
INPUT = {"customer": "Ada", "text": "The jacket arrived torn. I want my money back."}


#: issue 18's target: flowctl's overhead at most this fraction of a 300 ms model call
LIMIT = 0.05


def _write_project(root: Path) -> None:
    for rel, text in FILES.items():
        (root / "orchestration" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "orchestration" / rel).write_text(text)


def measure(delay: float, trials: int, tmp: str) -> dict:
    """``{direct, flowctl}``: wall seconds of each trial, interleaved (order rotated each round),
    against a local server answering after ``delay`` seconds."""
    import flowctl
    import openai
    from flowctl.store.sql import open_store

    with ModelServer([{"json": REPLY}], delay_s=delay) as server:
        saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ.update(OPENAI_BASE_URL=server.openai_url, OPENAI_API_KEY="bench")
        try:
            root = Path(tmp) / f"p{int(delay * 1000)}"
            _write_project(root)
            engine = flowctl.Engine(flowctl.load_project(root), open_store(f"sqlite:///{root}/flowctl.db"))
            client = openai.OpenAI(max_retries=0)
            messages = [{"role": "system", "content": "Answer with only a JSON value."},
                        {"role": "user", "content": "Classify this ticket from Ada:\n" + INPUT["text"]}]

            def direct():
                t = time.perf_counter()
                r = client.chat.completions.create(model="bench", messages=messages, timeout=30)
                json.loads(r.choices[0].message.content)
                return time.perf_counter() - t

            def step():
                t = time.perf_counter()
                result = engine.run("f", INPUT)
                took = time.perf_counter() - t
                assert result.status == "succeeded", result.error
                return took

            direct(), step()  # warm: imports, connections, the compiled template and schema
            return interleaved({"direct": direct, "flowctl": step}, trials)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def run(delay: float = 0.3, trials: int = 15, zero_trials: int = 60) -> dict:
    """The part of ``make bench``: the overhead at ``delay`` (the target's ratio) and, measured
    more precisely with an instant server, in milliseconds. Results in ms (medians)."""
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-model-") as tmp:
        slow = {k: stats(v) for k, v in measure(delay, trials, tmp).items()}
        fast = {k: stats(v) for k, v in measure(0.0, zero_trials, tmp).items()}
    d, f = slow["direct"]["median_s"] * 1000, slow["flowctl"]["median_s"] * 1000
    d0, f0 = fast["direct"]["median_s"] * 1000, fast["flowctl"]["median_s"] * 1000
    fraction = (f - d) / d
    return {"delay_ms": delay * 1000, "trials": trials, "zero_trials": zero_trials,
            "direct_sdk_ms": round(d, 3), "flowctl_llm_run_ms": round(f, 3), "overhead_ms": round(f - d, 3),
            "overhead_fraction_of_call": round(fraction, 5),
            "instant_server": {"direct_sdk_ms": round(d0, 3), "flowctl_llm_run_ms": round(f0, 3),
                               "overhead_ms": round(f0 - d0, 3)},
            "results": {"slow": slow, "instant": fast},
            "loadavg_before": load_before, "loadavg_after": loadavg(),
            "targets": {f"18. model step overhead / a {delay * 1000:.0f} ms model call": target(
                fraction, LIMIT, ratios={"direct SDK ms": d, "flowctl llm run ms": f,
                                         "overhead ms (instant server)": f0 - d0},
                note="one llm state on SQLite: render, request, JSON read and schema check, model_called, the step")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=0.3)
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--zero-trials", type=int, default=60)
    args = ap.parse_args(argv)
    out = run(args.delay, args.trials, args.zero_trials)
    write("model", out)
    shown = {k: v for k, v in out.items() if k not in ("results", "targets")}
    print(json.dumps(shown, indent=2))
    print(f"overhead {out['overhead_fraction_of_call']:.2%} of a {out['delay_ms']:.0f} ms call (limit {LIMIT:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
