"""HTTP servers on 127.0.0.1 for the download and upload tests: they count what they are asked and
stop themselves (after `lifetime` seconds at most, or when the `with` block ends)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from typing import Callable, Iterator

HOST = "127.0.0.1"  # the only address a test server binds or a test connects to

# (method, path with query, request headers named in lower case) -> (status, headers, body);
# with `serving(..., with_body=True)`, the request's body (b"" for GET and HEAD) comes fourth.
Responder = Callable[..., tuple[int, dict, bytes]]


class Server:
  """A running server: its base URL and every request it answered, as (method, path)."""

  def __init__(self, httpd: http.server.ThreadingHTTPServer):
    self.httpd = httpd
    self.requests: list[tuple[str, str]] = []
    self.url = f"http://{HOST}:{httpd.server_address[1]}"


@contextlib.contextmanager
def serving(respond: Responder, lifetime: float = 120.0,
            with_body: bool = False) -> Iterator[Server]:
  holder: list[Server] = []

  class Handler(http.server.BaseHTTPRequestHandler):
    timeout = 30  # a stalled client cannot hold a handler thread

    def _answer(self, send_body: bool) -> None:
      holder[0].requests.append((self.command, self.path))
      headers = {k.lower(): v for k, v in self.headers.items()}
      sent = self.rfile.read(int(headers.get("content-length") or 0))
      status, headers, body = (respond(self.command, self.path, headers, sent) if with_body
                               else respond(self.command, self.path, headers))
      self.send_response(status)
      for name, value in headers.items():
        self.send_header(name, value)
      if "Content-Length" not in headers:
        self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      if send_body:
        self.wfile.write(body)

    def do_GET(self):
      self._answer(True)

    def do_HEAD(self):
      self._answer(False)

    def do_POST(self):
      self._answer(True)

    def do_PUT(self):
      self._answer(True)

    def log_message(self, *args):
      pass

  httpd = http.server.ThreadingHTTPServer((HOST, 0), Handler)
  httpd.daemon_threads = True
  server = Server(httpd)
  holder.append(server)
  thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                            daemon=True)
  thread.start()
  stop = threading.Timer(lifetime, httpd.shutdown)  # stops itself if a test never returns
  stop.daemon = True
  stop.start()
  try:
    yield server
  finally:
    stop.cancel()
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def files(content: dict[str, bytes]) -> Responder:
  """Serves `content` by URL path (a static mirror); 404 for anything else."""
  def respond(method: str, path: str, headers: dict) -> tuple[int, dict, bytes]:
    path = path.split("?", 1)[0]
    if path in content:
      return 200, {"Content-Type": "application/octet-stream"}, content[path]
    return 404, {}, b"not found"
  return respond
