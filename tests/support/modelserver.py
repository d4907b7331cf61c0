"""A local model server for the tests: real HTTP on 127.0.0.1 (a free port), speaking the OpenAI
Chat Completions (``POST /v1/chat/completions``) and Anthropic Messages (``POST /v1/messages``)
wire formats, tool calls and usage included, so the official SDKs are driven as against a real
provider.

It answers from a script, one entry per request, in order (the last one repeats)::

    {"text": "…"}                                   a plain answer
    {"json": {...}}                                 the answer's text is this value as JSON
    {"tool_calls": [("get_order", {"id": "A1"})]}   the model asks for tools (text optional)
    {"status": 429}                                 an error status (429, 500, 529 …)
    {"usage": {"input_tokens": 10, "output_tokens": 5}}   with any of the above

``requests`` keeps every request body (decoded JSON) with its path, in arrival order.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ModelServer:
    """``with ModelServer(script) as server:`` — ``server.openai_url`` / ``server.anthropic_url``."""

    def __init__(self, script=None, delay_s: float = 0.0):
        self.script = list(script or [])
        #: seconds each answer waits (a model's latency, for the benchmark)
        self.delay_s = delay_s
        self.requests: list = []
        self._lock = threading.Lock()
        self._http = None
        self._thread = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = server._answer(self.path, body)
                if server.delay_s:
                    time.sleep(server.delay_s)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, name="modelserver", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)

    @property
    def port(self) -> int:
        return self._http.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, monkeypatch) -> None:
        """Point both SDKs at this server (their own environment variables)."""
        monkeypatch.setenv("OPENAI_BASE_URL", self.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", self.anthropic_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    # ------------------------------------------------------------------ answers
    def _answer(self, path, body):
        with self._lock:
            index = len(self.requests)
            self.requests.append({"path": path, "body": body})
            entry = self.script[min(index, len(self.script) - 1)] if self.script else {"text": ""}
        if callable(entry):
            entry = entry(body)
        anthropic = path.rstrip("/").endswith("/messages")
        status = entry.get("status", 200)
        if status != 200:
            if anthropic:
                return status, {"type": "error", "error": {"type": "rate_limit_error" if status == 429 else "api_error",
                                                           "message": f"scripted {status}"}}
            return status, {"error": {"message": f"scripted {status}", "type": "server_error", "code": None}}
        text = json.dumps(entry["json"]) if "json" in entry else entry.get("text", "")
        calls = [(f"call_{index}_{i}", name, args) for i, (name, args) in enumerate(entry.get("tool_calls") or ())]
        usage = dict({"input_tokens": 11, "output_tokens": 7}, **(entry.get("usage") or {}))
        model = body.get("model", "m")
        if anthropic:
            content = ([{"type": "text", "text": text}] if text else []) + [
                {"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
            return 200, {"id": f"msg_{index}", "type": "message", "role": "assistant", "model": model,
                         "content": content, "stop_reason": "tool_use" if calls else "end_turn",
                         "stop_sequence": None, "usage": usage}
        message = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}
                                     for cid, name, args in calls]
        return 200, {"id": f"chatcmpl-{index}", "object": "chat.completion", "created": 0, "model": model,
                     "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                     "usage": {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
                               "total_tokens": usage["input_tokens"] + usage["output_tokens"]}}

    def bodies(self) -> list:
        return [r["body"] for r in self.requests]
