"""A stand-in for the Fleetlens server on the device machine: accepts POST /api/v1/ingest
(gzip JSON batch), appends each batch as one JSON line to argv[2], answers like the server
(HTTP/1.1 with keep-alive)."""
import gzip, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, OUT = int(sys.argv[1]), sys.argv[2]


class H(BaseHTTPRequestHandler):
    # Keep-alive, as the real server (hyper) does: the agent reuses its connection.
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        batch = json.loads(body)
        with open(OUT, "a") as f:
            f.write(json.dumps(batch) + "\n")
        n = len(batch.get("samples", []))
        out = json.dumps({"received": n, "inserted": n, "duplicates": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
