"""The simplest alternative to Triton: one process, one request at a time, the same exported model.

What a team writes first: an HTTP endpoint that runs the served pipeline's steps in this process with the
same exported file and runtime, no batching and no queue. It answers the KServe v2 request that Triton
takes (``POST /v2/models/<name>/infer``), so one load generator drives both and the benchmark can say what
Triton buys over it:

- ``--pipeline text``: a JSON request with a BYTES ``TEXT`` input -> the ``EMBEDDING`` output;
- ``--pipeline image``: a request with a BYTES ``IMAGE_BYTES`` input in the binary-data extension (what
  ``tritonclient`` sends) -> image_preprocess's code, the exported classifier, softmax and top-5, as JSON
  ``CLASS_IDS``, ``SCORES`` and ``LABELS`` (image_postprocess's outputs and labels);
- ``--pipeline tensors``: a JSON request with the named inputs of one exported ONNX file (``--model``), fed
  to it as they are -> every output of the file, as JSON. A request naming an input the file does not
  take, leaving one out, or of another datatype or shape gets a 400 saying so.

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
import struct
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tritonclient.utils import np_to_triton_dtype

from loadtest.baselines.pipelines import ExportedEncoder, ImagePipeline
from tritonrepo.commands import command_parser
from tritonrepo.contract.onnx_file import triton_datatype
from tritonrepo.exported_runtime import OnnxRunner
from tritonrepo.paths import REPOSITORY
from tritonrepo.tensors import TensorSpec

logger = logging.getLogger(__name__)

Encoder = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (ids [T] int64, lengths [B] int32) -> [B, H]
# (request body, request headers lower-cased) -> the inference that makes the response's outputs: the
# request is parsed and prepared (tokenised, decoded) in the connection's thread, the inference runs under
# the lock.
Answer = Callable[[bytes, Mapping[str, str]], Callable[[], list[dict]]]
BINARY_HEADER = "inference-header-content-length"  # KServe v2's binary-data extension, lower-cased
TEXT_REQUEST = "a KServe v2 JSON request with a TEXT input"
IMAGE_REQUEST = "a KServe v2 request with a BYTES IMAGE_BYTES input as binary data"
TENSORS_REQUEST = "a KServe v2 JSON request with the inputs {}"
LABELS_FILE = REPOSITORY / "image_postprocess" / "1" / "imagenet_labels.txt"


def load_encoder(path: Path, *, threads: int) -> Encoder:
    """The exported ragged sentence encoder at ``path`` (.onnx with onnxruntime, .pt with torch.jit),
    run as the served configuration runs it: in the local server's runtime code, as the in-process
    experiments run it."""
    runtime = "onnxruntime" if path.suffix == ".onnx" else "torchscript"
    return ExportedEncoder(
        path, runtime=runtime, threads=threads, optimized_execution=runtime == "onnxruntime"
    )


def text_answer(encoder: Encoder, tokenizer: Tokenizer, *, max_length: int = 256) -> Answer:
    """Texts -> their embeddings, tokenised as text_tokenizer does."""
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)

    def answer(body: bytes, _: Mapping[str, str]) -> Callable[[], list[dict]]:
        encodings = tokenizer.encode_batch(_request_texts(body))
        ids = np.array([t for e in encodings for t in e.ids], dtype=np.int64)
        lengths = np.array([len(e.ids) for e in encodings], dtype=np.int32)
        return lambda: [_output("EMBEDDING", "FP32", encoder(ids, lengths))]

    return answer


def image_answer(pipeline: ImagePipeline, labels: list[str]) -> Answer:
    """Encoded images -> their top-k classes: ids, softmax probabilities and labels."""

    def answer(body: bytes, headers: Mapping[str, str]) -> Callable[[], list[dict]]:
        pixels = pipeline.preprocess(request_images(body, headers))
        return lambda: classified(pixels)

    def classified(pixels: np.ndarray) -> list[dict]:
        ids, probabilities = pipeline.classify(pixels)
        names = np.array([[labels[i] for i in row] for row in ids], dtype=object)
        return [
            _output("CLASS_IDS", "INT64", ids),
            _output("SCORES", "FP32", probabilities),
            _output("LABELS", "BYTES", names),
        ]

    return answer


def tensors_answer(runner: OnnxRunner) -> Answer:
    """The named inputs of a request, fed to the file as they are -> every output of the file."""
    inputs = graph_inputs(runner)
    outputs = [o.name for o in runner.session.get_outputs()]

    def answer(body: bytes, _: Mapping[str, str]) -> Callable[[], list[dict]]:
        feeds = request_tensors(body, inputs)
        return lambda: [
            _output(name, np_to_triton_dtype(array.dtype), array)
            for name, array in zip(outputs, runner.run(feeds), strict=True)
        ]

    return answer


def graph_inputs(runner: OnnxRunner) -> list[TensorSpec]:
    """The file's inputs: name, Triton datatype, dims after the batch axis (-1 where any size goes)."""
    return [
        TensorSpec(
            name=arg.name,
            datatype=triton_datatype(arg.type),
            dims=tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape[1:]),
        )
        for arg in runner.session.get_inputs()
    ]


def inputs_text(inputs: list[TensorSpec]) -> str:
    """The inputs as a request must send them, e.g. ``FEATURES FP32 [batch, 9]``."""
    return ", ".join(f"{t.name} {t.datatype} {_shape_text(t)}" for t in inputs)


def _shape_text(spec: TensorSpec) -> str:
    return f"[batch, {', '.join(map(str, spec.dims))}]"


def request_tensors(body: bytes, inputs: list[TensorSpec]) -> dict[str, np.ndarray]:
    """The arrays of a KServe v2 JSON request, one for each of ``inputs``, checked against them: every
    input named once, none unknown, each of its datatype and dims (-1: any size) with as many values as
    its shape holds."""
    given = {tensor["name"]: tensor for tensor in json.loads(body)["inputs"]}
    names = [t.name for t in inputs]
    unknown, missing = sorted(set(given) - set(names)), [n for n in names if n not in given]
    if unknown:
        raise ValueError(f"unknown input(s) {unknown}; the model's inputs are {names}")
    if missing:
        raise ValueError(f"missing input(s) {missing}; send each of the model's inputs {names}")
    feeds = {}
    for spec in inputs:
        tensor = given[spec.name]
        shape = tuple(int(d) for d in tensor["shape"])
        if tensor["datatype"] != spec.datatype or not spec.matches(shape):
            raise ValueError(
                f"input {spec.name} is {tensor['datatype']} of shape {list(shape)}; the model takes "
                f"{spec.datatype} of shape {_shape_text(spec)} (-1: any size)"
            )
        values = np.asarray(tensor["data"], dtype=spec.numpy_dtype).ravel()
        if values.size != int(np.prod(shape)):
            raise ValueError(
                f"input {spec.name} has {values.size} values; its shape {list(shape)} holds "
                f"{int(np.prod(shape))}"
            )
        feeds[spec.name] = values.reshape(shape)
    return feeds


def make_server(
    *, answer: Answer, model_name: str, port: int = 0, reuse_port: bool = False, expects: str = TEXT_REQUEST
) -> ThreadingHTTPServer:
    """A server answering ``POST /v2/models/<model_name>/infer`` with ``answer``; a request it cannot read
    gets a 400 saying it expected ``expects``."""
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
                infer = answer(body, {k.lower(): v for k, v in self.headers.items()})
            except (ValueError, KeyError, IndexError, TypeError, struct.error) as e:
                self._reply(400, {"error": f"expected {expects}: {e}"})
                return
            with lock:  # one request at a time: no batching, no queue
                outputs = infer()
            self._reply(200, {"model_name": model_name, "outputs": outputs})

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


def _output(name: str, datatype: str, array: np.ndarray) -> dict:
    data = array.ravel().tolist()
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


def _request_texts(body: bytes) -> list[str]:
    """The TEXT input's strings of a KServe v2 JSON request."""
    data = json.loads(body)["inputs"][0]["data"]
    if not isinstance(data, list) or not data:
        raise TypeError("TEXT data must be a non-empty list of strings")
    return [str(t) for t in data]


def request_images(body: bytes, headers: Mapping[str, str]) -> list[bytes]:
    """The encoded images of a KServe v2 request whose one BYTES input travels in the binary-data
    extension: a JSON header of ``Inference-Header-Content-Length`` bytes (``headers`` lower-cased), then
    each element as a 4-byte little-endian length and its bytes."""
    if BINARY_HEADER not in headers:
        raise ValueError(f"no {BINARY_HEADER} header: send IMAGE_BYTES as binary data (tritonclient does)")
    split = int(headers[BINARY_HEADER])
    (tensor,) = json.loads(body[:split])["inputs"]
    count, raw, images, offset = int(np.prod(tensor["shape"])), body[split:], [], 0
    for _ in range(count):
        (size,) = struct.unpack_from("<I", raw, offset)
        images.append(raw[offset + 4 : offset + 4 + size])
        offset += 4 + size
    if offset != len(raw) or not images:
        raise ValueError(f"{len(raw)} bytes of binary data do not hold the {count} images its shape names")
    return images


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
    args = _parser().parse_args(argv)
    answer, expects = _answer(args)
    server = make_server(
        answer=answer, model_name=args.name, port=args.port, reuse_port=args.reuse_port, expects=expects
    )
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _answer(args: argparse.Namespace) -> tuple[Answer, str]:
    """The pipeline's answer and the request it expects."""
    if args.pipeline == "image":
        pipeline = ImagePipeline(
            args.repository, classifier_model=args.classifier, runtime="onnxruntime", threads=args.threads
        )
        return image_answer(pipeline, LABELS_FILE.read_text().splitlines()), IMAGE_REQUEST
    if args.pipeline == "tensors":
        if args.model is None or args.model.suffix != ".onnx":
            raise SystemExit(f"--pipeline tensors needs --model, an exported .onnx file; got {args.model}")
        runner = OnnxRunner(args.model, threads=args.threads)
        return tensors_answer(runner), TENSORS_REQUEST.format(inputs_text(graph_inputs(runner)))
    if args.model is None or args.tokenizer is None:
        raise SystemExit(
            "--pipeline text needs --model (the exported encoder) and --tokenizer (tokenizer.json)"
        )
    encoder = load_encoder(args.model, threads=args.threads)
    return text_answer(encoder, Tokenizer.from_file(str(args.tokenizer))), TEXT_REQUEST


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.baselines.minimal_server",
        __doc__,
        exit_codes="0 stopped by Ctrl-C, 1 the model or the port could not be used, 2 a usage error",
    )
    parser.add_argument(
        "--pipeline", choices=("text", "image", "tensors"), default="text", help="what it serves"
    )
    parser.add_argument(
        "--model", type=Path, help="text: the exported encoder, .onnx or .pt; tensors: the .onnx file it runs"
    )
    parser.add_argument("--tokenizer", type=Path, help="text: its tokenizer.json")
    parser.add_argument(
        "--repository", type=Path, default=REPOSITORY, help="image: the repository of image_preprocess"
    )
    parser.add_argument(
        "--classifier", default="efficientnet_lite0_onnx", help="image: the ONNX classifier model it runs"
    )
    parser.add_argument("--name", default="text_embedder", help="model name in the URL")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of the runtime")
    parser.add_argument("--reuse-port", action="store_true", help="share --port with other worker processes")
    return parser


if __name__ == "__main__":
    sys.exit(main())
