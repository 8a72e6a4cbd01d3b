"""The simplest alternative to Triton: one process, one request at a time, the same exported model.

What a team writes first: an HTTP endpoint that tokenises the text and runs the exported encoder
with its runtime, no batching and no queue. It answers the same KServe v2 JSON request that Triton
takes (``POST /v2/models/<name>/infer`` with a BYTES ``TEXT`` input) with the same ``EMBEDDING``
output, so one load generator drives both and the benchmark can say what Triton buys over it.

``python -m loadtest.baselines.minimal_server --model model_repository/minilm_onnx/1/model.onnx
--tokenizer model_repository/text_tokenizer/1/tokenizer.json --port 0`` prints the port it bound.
Connections are handled by threads; inference runs under one lock, one request at a time. The runtime
keeps its default thread pool (an intra-op thread per core, spinning between operators), its fastest
setting one request at a time and level with the others at 32 in flight (docs/measurements.md), so the
comparison does not handicap the alternative.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from loadtest.baselines.pipelines import ExportedEncoder
from tritonrepo.commands import command_parser

logger = logging.getLogger(__name__)

Encoder = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (ids [T] int64, lengths [B] int32) -> [B, H]


def load_encoder(path: Path, *, threads: int) -> Encoder:
    """The exported ragged sentence encoder at ``path`` (.onnx with onnxruntime, .pt with torch.jit),
    run as the served configuration runs it: in the local server's runtime code, as the in-process
    experiments run it."""
    runtime = "onnxruntime" if path.suffix == ".onnx" else "torchscript"
    return ExportedEncoder(
        path, runtime=runtime, threads=threads, optimized_execution=runtime == "onnxruntime"
    )


def make_server(
    *,
    encoder: Encoder,
    tokenizer: Tokenizer,
    model_name: str,
    port: int = 0,
    max_length: int = 256,
    reuse_port: bool = False,
) -> ThreadingHTTPServer:
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    lock = threading.Lock()
    path = f"/v2/models/{model_name}/infer"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as load generators and Triton use

        def setup(self) -> None:
            super().setup()
            # Headers and body leave in two writes; with Nagle's algorithm on, the second waits for the
            # client's delayed ACK (about 40 ms a request on a keep-alive connection).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            ready = self.path in ("/v2/health/ready", f"/v2/models/{model_name}/ready")
            self._reply(200 if ready else 404, {} if ready else {"error": f"unknown path {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != path:
                self._reply(404, {"error": f"unknown model path {self.path}; POST {path}"})
                return
            try:
                texts = _request_texts(body)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                self._reply(400, {"error": f"expected a KServe v2 JSON request with a TEXT input: {e}"})
                return
            encodings = tokenizer.encode_batch(texts)
            ids = np.array([t for e in encodings for t in e.ids], dtype=np.int64)
            lengths = np.array([len(e.ids) for e in encodings], dtype=np.int32)
            with lock:  # one request at a time: no batching, no queue
                embeddings = encoder(ids, lengths)
            output = {"name": "EMBEDDING", "datatype": "FP32", "shape": list(embeddings.shape)}
            self._reply(
                200, {"model_name": model_name, "outputs": [output | {"data": embeddings.ravel().tolist()}]}
            )

        def _reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:  # one line per request would cost more than the request
            pass

    return _bound_server(port, Handler, reuse_port=reuse_port)


def _request_texts(body: bytes) -> list[str]:
    """The TEXT input's strings of a KServe v2 JSON request."""
    data = json.loads(body)["inputs"][0]["data"]
    if not isinstance(data, list) or not data:
        raise TypeError("TEXT data must be a non-empty list of strings")
    return [str(t) for t in data]


def _bound_server(
    port: int, handler: type[BaseHTTPRequestHandler], *, reuse_port: bool
) -> ThreadingHTTPServer:
    """A listening server on 127.0.0.1:``port``; ``reuse_port`` lets several worker processes share it."""
    server = _Server(("127.0.0.1", port), handler, bind_and_activate=False)
    server.reuse_port = reuse_port
    try:
        server.server_bind()
        server.server_activate()
    except OSError:
        server.server_close()
        raise
    server.daemon_threads = True
    return server


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5. A load generator opens its 32 connections at once while
    # inference holds the GIL, the kernel drops the connections beyond the backlog, and TCP retries them
    # 1 s, 3 s... later: seconds-long stalls that would be charged to the alternative, not to its design.
    # Web servers listen with far more (uvicorn 2048).
    request_queue_size = 1024
    # Several worker processes on one port (--reuse-port): the kernel spreads new connections over them,
    # as a pre-fork web server (gunicorn, uvicorn --workers) deploys one process per core or per GPU.
    reuse_port = False

    def server_bind(self) -> None:
        if self.reuse_port:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def main(argv: list[str] | None = None) -> int:
    parser = command_parser(
        "python -m loadtest.baselines.minimal_server",
        __doc__,
        exit_codes="0 stopped by Ctrl-C, 1 the model or the port could not be used, 2 a usage error",
    )
    for option, what in (
        ("--model", "exported encoder, .onnx or .pt"),
        ("--tokenizer", "its tokenizer.json"),
    ):
        parser.add_argument(
            option, type=Path, required=True, default=argparse.SUPPRESS, help=f"{what} (required)"
        )
    parser.add_argument("--name", default="text_embedder", help="model name in the URL")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of the runtime")
    parser.add_argument("--reuse-port", action="store_true", help="share --port with other worker processes")
    args = parser.parse_args(argv)
    server = make_server(
        encoder=load_encoder(args.model, threads=args.threads),
        tokenizer=Tokenizer.from_file(str(args.tokenizer)),
        model_name=args.name,
        port=args.port,
        reuse_port=args.reuse_port,
    )
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
