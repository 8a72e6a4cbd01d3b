"""Answers first, returns later: the window in which a client holds an answer the statistics lack.

Triton's Python backend reports an execution's statistics when ``execute()`` returns; a response sent
through the response sender reaches the client before that. Holding ``execute()`` after sending widens
to HOLD_MS the window that is otherwise the microseconds between sending a response and counting it.
"""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests: list) -> None:
        hold_ms = 0
        for request in requests:
            held = pb_utils.get_input_tensor_by_name(request, "HOLD_MS").as_numpy()
            hold_ms = max(hold_ms, int(held[0]))
            sender = request.get_response_sender()
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", held)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        time.sleep(hold_ms / 1000)  # the statistics are counted only after this
        return None
