"""The overhead flowctl adds to a model step (issue 18): one ``llm`` state (render the prompt, the
request through the official openai SDK, read and validate the reply's JSON, the ``model_called``
record, the durable step on SQLite) against the same SDK call made directly, both to a local
Chat Completions server (tests/support/modelserver.py) that answers after ``--delay`` seconds.

Prints the median wall-clock ms of each over interleaved trials and the overhead as a fraction of
the model call (target: at most 5% of a 300 ms call).

    python benchmarks/bench_model.py [--delay 0.3] [--trials 15]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=0.3)
    ap.add_argument("--trials", type=int, default=15)
    args = ap.parse_args()
    import flowctl
    import openai
    from flowctl.store.sql import open_store

    with ModelServer([{"json": REPLY}], delay_s=args.delay) as server, tempfile.TemporaryDirectory() as tmp:
        os.environ.update(OPENAI_BASE_URL=server.openai_url, OPENAI_API_KEY="bench")
        root = Path(tmp) / "p"
        for rel, text in FILES.items():
            (root / "orchestration" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "orchestration" / rel).write_text(text)
        engine = flowctl.Engine(flowctl.load_project(root), open_store(f"sqlite:///{tmp}/flowctl.db"))
        client = openai.OpenAI(max_retries=0)
        messages = [{"role": "system", "content": "Answer with only a JSON value."},
                    {"role": "user", "content": "Classify this ticket from Ada:\n" + INPUT["text"]}]

        def direct():
            r = client.chat.completions.create(model="bench", messages=messages, timeout=30)
            return json.loads(r.choices[0].message.content)

        def step():
            result = engine.run("f", INPUT)
            assert result.status == "succeeded", result.error

        direct(), step()  # warm: imports, connections, the compiled template and schema
        d_ms, f_ms = [], []
        for _ in range(args.trials):
            t = time.perf_counter(); direct(); d_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter(); step(); f_ms.append((time.perf_counter() - t) * 1000)
    d, f = statistics.median(d_ms), statistics.median(f_ms)
    print(json.dumps({"delay_ms": args.delay * 1000, "trials": args.trials, "direct_sdk_ms": round(d, 2),
                      "flowctl_llm_run_ms": round(f, 2), "overhead_ms": round(f - d, 2),
                      "overhead_fraction_of_call": round((f - d) / d, 4),
                      "target": "overhead <= 5% of a 300 ms model call"}, indent=2))


if __name__ == "__main__":
    main()
