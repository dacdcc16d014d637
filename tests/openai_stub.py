"""A small OpenAI-compatible HTTP server on 127.0.0.1 for driving the real `openai` client.

- /v1/embeddings: a deterministic hash-seeded vector per input, answered in reverse order.
- /v1/chat/completions: the reply text comes from `chat(body) -> str` (default: an echo of
  the last message), with `usage` filled (whitespace-separated words as tokens).  `chat` may
  return a `Fault` instead of text, to fail chosen requests deterministically; if it raises,
  the request gets a 500 and the exception is kept in `errors`.
- Faults: `stub.faults = ["429", "500", "hang", "garbage", "empty"]` is a queue consumed one
  per request, in order, before normal answers.  "hang" waits `hang_seconds` (capped at 5 s,
  cut short when the server stops), longer than a test client's timeout; "garbage" is a 200
  with a non-JSON body; "empty" is a 200 with no choices (no data for embeddings); "html" is
  a 200 text/html page; "400" is a bad request (not retryable).
- Every request is recorded (path, headers, parsed body); `max_in_flight` is the largest
  number of requests being handled at once (a hung request counts until its wait ends, so
  do not mix "hang" with a concurrency measurement).  `delay` adds a pause to every normal
  answer so that concurrent requests overlap.
"""

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULT_KINDS = ("429", "500", "hang", "garbage", "empty", "400", "html")
MAX_HANG_SECONDS = 5.0


def fake_vector(text: str, dims: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255.0 for b in digest[:dims]]


@dataclass(frozen=True)
class Fault:
    kind: str

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; valid faults: {', '.join(FAULT_KINDS)}")


def echo_chat(body: dict) -> str:
    messages = body.get("messages") or [{}]
    return f"echo: {messages[-1].get('content', '')}"


def _tokens(text: str) -> int:
    return len(str(text).split())


class OpenAIStub:
    def __init__(self, dims: int = 8, chat=echo_chat, hang_seconds: float = 2.0, delay: float = 0.0,
                 served_model: str | None = None):
        self.dims = dims
        self.served_model = served_model  # the model chat replies report (a gateway routing an alias), else the one sent
        self.chat = chat
        self.hang_seconds = min(float(hang_seconds), MAX_HANG_SECONDS)
        self.delay = delay
        self.requests: list[dict] = []
        self.answered: list[str] = []  # per request: "ok" or the fault kind served
        self.errors: list[BaseException] = []  # exceptions raised by the `chat` handler
        self.in_flight = 0
        self.max_in_flight = 0
        self._faults: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            _counted = False  # this request is counted in `in_flight`

            def log_message(self, *args):
                pass

            def do_POST(self):
                with stub._lock:
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                self._counted = True
                try:
                    self._handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer
                finally:
                    self._done()

            def _done(self):
                """The request stops counting as in flight once its answer starts going out: the
                client may send its next request the moment it reads it, before this handler's
                thread gets back here (which measured 3 in flight under a limit of 2)."""
                if self._counted:
                    self._counted = False
                    with stub._lock:
                        stub.in_flight -= 1

            def _send(self, status: int, raw: bytes, content_type: str = "application/json"):
                self._done()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _json(self, status: int, payload: dict):
                self._send(status, json.dumps(payload).encode())

            def _fault(self, kind: str, is_chat: bool) -> None:
                if kind == "429":
                    self._json(429, {"error": {"message": "rate limited (stub)", "type": "rate_limit"}})
                elif kind == "500":
                    self._json(500, {"error": {"message": "internal error (stub)", "type": "server_error"}})
                elif kind == "400":
                    self._json(400, {"error": {"message": "bad request (stub)", "type": "invalid_request_error"}})
                elif kind == "hang":
                    stub._stopping.wait(stub.hang_seconds)
                    self._json(500, {"error": {"message": "answered after hanging (stub)"}})
                elif kind == "garbage":
                    self._send(200, b"<html>this is not json {", "application/json")
                elif kind == "html":  # a proxy's error page: not even labelled as JSON
                    self._send(200, b"<html><body>502 upstream</body></html>", "text/html")
                elif kind == "empty":
                    self._json(200, {"id": "stub", "object": "chat.completion", "created": 0, "model": "stub",
                                     "choices": []} if is_chat else {"object": "list", "data": [], "model": "stub"})
                else:  # appended to `faults` without the setter's check
                    self._json(400, {"error": {"message": f"unknown stub fault {kind!r}"}})

            def _handle(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                is_chat = self.path.endswith("/chat/completions")
                with stub._lock:
                    stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    fault = stub._faults.pop(0) if stub._faults else None
                if fault is None and is_chat:
                    try:
                        reply = stub.chat(body)
                    except Exception as exc:  # a broken test handler: say so instead of hanging up
                        stub.errors.append(exc)
                        self._json(500, {"error": {"message": f"stub chat handler raised {exc!r}"}})
                        return
                    if isinstance(reply, Fault):
                        fault = reply.kind
                with stub._lock:
                    stub.answered.append(fault or "ok")
                if fault is not None:
                    self._fault(fault, is_chat)
                    return
                if stub.delay:
                    stub._stopping.wait(min(stub.delay, MAX_HANG_SECONDS))
                if self.path.endswith("/embeddings"):
                    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, stub.dims)}
                            for i, t in enumerate(inputs)]
                    # answered in reverse order: the client must sort by index
                    self._json(200, {"object": "list", "data": data[::-1], "model": body["model"],
                                     "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})
                elif is_chat:
                    prompt_tokens = sum(_tokens(m.get("content", "")) for m in body.get("messages", []))
                    completion_tokens = _tokens(reply)
                    self._json(200, {
                        "id": f"chatcmpl-stub-{len(stub.requests)}", "object": "chat.completion", "created": 0,
                        "model": stub.served_model or body.get("model", "stub"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply}}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": prompt_tokens + completion_tokens},
                    })
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True  # a hung handler never holds up shutdown
        # a short poll interval: shutdown() waits up to one interval, once per stub
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def faults(self) -> list[str]:
        return self._faults

    @faults.setter
    def faults(self, kinds) -> None:
        kinds = list(kinds)
        for kind in kinds:
            Fault(kind)  # validates
        with self._lock:
            self._faults = kinds

    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stopping.set()  # wakes hung and delayed handlers
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
