"""A small HTTP proxy in front of an AWS endpoint (moto: S3 and DynamoDB on one port) that
injects faults, for the fault suite.

Standard library only. Listens on 127.0.0.1 (a free port), prints the port on stdout, and
serves until it is stopped (the test kills it by PID). Each injected fault is appended as one
line to LOG, so a test can insist that its faults were really met; every request (faulted or
not) is appended to LOG.requests as `METHOD PATH target=X-Amz-Target range=Range
if-match=If-Match consistent=C` (C: a Scan's `ConsistentRead`, `absent` when not sent, empty for
other requests), so a test can see retries, resumed reads and what a scan asked for.

Usage:
  faultproxy.py UPSTREAM LOG RULES_JSON

RULES_JSON is a list of rules; the first rule that matches a request and still has uses left
decides what happens to it (requests no rule takes are forwarded unchanged):
  {"method": "PUT",               request method, or "*"
   "path": "regex",               searched in the request path (with the query string)
   "target": "regex",             searched in the X-Amz-Target header (DynamoDB operations,
                                  `DynamoDB_20120810.Scan`); absent: any request
   "range": "regex",              searched in the Range header ("" when there is none, so
                                  "^$" takes only requests for a whole object); absent: any
   "action": ACTION,
   "skip": 0,                     let this many matching requests through first
   "times": 1,                    how many requests get the fault (-1: every one)
   "seconds": null}               or: every matching request during this many seconds from the
                                  first match
ACTION:
  "status:503"       answer with this HTTP status and an S3 error body, without forwarding
  "s3:503:SlowDown"  answer with this status and an S3 error body with this code
  "dynamodb:CODE"    answer HTTP 400 with a DynamoDB JSON error of this type
                     (`ProvisionedThroughputExceededException`, `ThrottlingException`)
  "reset-mid-body"   forward, then send the response's headers and half its body, then reset
  "drop-response"    forward (the upstream applies the request), then reset without answering
  "reset"            read the request, then reset without forwarding or answering
"""
import http.client
import http.server
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"}


class Rule:
    def __init__(self, spec):
        self.method = spec.get("method", "*")
        self.path = re.compile(spec.get("path", ""))
        self.target = re.compile(spec["target"]) if "target" in spec else None
        self.range = re.compile(spec["range"]) if "range" in spec else None
        self.action = spec["action"]
        self.skip = int(spec.get("skip", 0))
        self.times = int(spec.get("times", 1))
        self.seconds = spec.get("seconds")
        self.first = None

    def take(self, method, path, target, rng):
        """Whether this rule takes the request (and uses one of its turns)."""
        if self.method not in ("*", method) or not self.path.search(path):
            return False
        if self.target is not None and not self.target.search(target):
            return False
        if self.range is not None and not self.range.search(rng):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        if self.seconds is not None:
            now = time.monotonic()
            if self.first is None:
                self.first = now
            return now - self.first < float(self.seconds)
        if self.times == 0:
            return False
        if self.times > 0:
            self.times -= 1
        return True


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream, log, rules):
        super().__init__(("127.0.0.1", 0), Handler)
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port or 80)
        self.log_path = log
        self.rules = rules
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):
        # Resets are the point of this proxy; their broken pipes are not news.
        pass

    def decide(self, method, path, target, rng):
        with self.lock:
            for r in self.rules:
                if r.take(method, path, target, rng):
                    return r.action
        return None

    def seen(self, line):
        with self.lock, open(self.log_path + ".requests", "a") as f:
            f.write(line + "\n")

    def record(self, action, method, path):
        with self.lock, open(self.log_path, "a") as f:
            f.write(f"{action} {method} {path}\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reset(self):
        """Closes the connection with a TCP reset."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def forward(self, body):
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in HOP_BY_HOP:
                conn.putheader(k, v)
        conn.endheaders(body if body else None)
        r = conn.getresponse()
        data = r.read()
        headers = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP_BY_HOP | {"content-length"}]
        conn.close()
        return r.status, r.reason, headers, data

    def answer(self, status, content_type, text):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(text)

    def handle_any(self):
        body = self.body()
        target = self.headers.get("X-Amz-Target", "")
        consistent = ""
        if target.endswith(".Scan"):
            try:
                consistent = str(json.loads(body).get("ConsistentRead", "absent")).lower()
            except ValueError:
                consistent = "unreadable"
        self.server.seen(
            f"{self.command} {self.path} target={target} range={self.headers.get('Range', '')}"
            f" if-match={self.headers.get('If-Match', '')} consistent={consistent}"
        )
        action = self.server.decide(self.command, self.path, target, self.headers.get("Range", ""))
        if action is not None:
            self.server.record(action, self.command, f"{self.path} {target}".rstrip())
        if action == "reset":
            return self.reset()
        if action is not None and action.startswith(("status:", "s3:")):
            parts = action.split(":")
            status = int(parts[1])
            code = parts[2] if len(parts) > 2 else "InjectedFault"
            text = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected {status}</Message></Error>"
            ).encode()
            return self.answer(status, "application/xml", text)
        if action is not None and action.startswith("dynamodb:"):
            code = action.split(":", 1)[1]
            text = json.dumps(
                {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": f"injected {code}"}
            ).encode()
            return self.answer(400, "application/x-amz-json-1.0", text)
        status, reason, headers, data = self.forward(body)
        if action == "drop-response":
            return self.reset()
        self.send_response(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if action == "reset-mid-body":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            return self.reset()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    upstream, log, rules = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    server = Proxy(upstream, log, [Rule(r) for r in rules])
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
