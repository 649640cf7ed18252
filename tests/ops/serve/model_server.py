"""A test stand-in for TF Serving's REST ``:predict`` (run in the trainer environment): loads a real SavedModel with
``tf.saved_model.load`` and answers ``POST /v1/models/<name>:predict`` in the documented row format
(tensorflow/serving g3doc/api_rest.md): ``{"signature_name"?, "instances": [...]}`` with binary values as
``{"b64": ...}`` (an instance may be the bare value when the signature has one input), answering
``{"predictions": [{output: value, ...}, ...]}`` or ``{"error": "..."}``.

    python model_server.py EXPORT_DIR MODEL_NAME      # prints "listening PORT", serves on 127.0.0.1
"""

from __future__ import annotations

import base64
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf


def main(export_dir: str, model_name: str) -> None:
    loaded = tf.saved_model.load(export_dir)
    signatures = dict(loaded.signatures)

    def predict(body: dict) -> dict:
        signature = signatures.get(body.get("signature_name") or "serving_default")
        if signature is None:
            raise ValueError(f"Serving signature name: \"{body.get('signature_name')}\" not found in signature def")
        inputs = list(signature.structured_input_signature[1])
        rows = body.get("instances")
        if not isinstance(rows, list) or not rows:
            raise ValueError("Missing 'instances' key")
        columns: dict[str, list] = {name: [] for name in inputs}
        for row in rows:
            if not isinstance(row, dict) or (len(inputs) == 1 and "b64" in row):
                row = {inputs[0]: row}
            for name in inputs:
                value = row[name]
                columns[name].append(base64.b64decode(value["b64"]) if isinstance(value, dict) else value)
        outputs = signature(**{name: tf.constant(values) for name, values in columns.items()})
        result = []
        for i in range(len(rows)):
            item = {}
            for name, tensor in outputs.items():
                value = tensor[i].numpy()
                if isinstance(value, bytes):
                    value = {"b64": base64.b64encode(value).decode()} if name.endswith("_bytes") else value.decode()
                else:
                    value = value.tolist()
                item[name] = value
            result.append(item)
        return {"predictions": result}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, payload):
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            if self.path != f"/v1/models/{model_name}:predict":
                return self._send(404, {"error": f"Servable not found for request: {self.path}"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self._send(200, predict(body))
            except Exception as exc:  # noqa: BLE001 - TF Serving answers any failure as {"error": ...}
                self._send(400, {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
