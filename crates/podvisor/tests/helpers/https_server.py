"""An HTTPS server for podvisor's https probe tests: python3's http.server over ssl with a
self-signed certificate (which the prober must accept, as the kubelet's does).

usage: https_server.py PORT CERT KEY LOG

GET /healthz answers 200, anything else 500; each request's path and User-Agent is appended
to LOG.
"""
import http.server
import ssl
import sys


def main():
    port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            with open(log, "a") as f:
                f.write(f"{self.path} {self.headers.get('User-Agent')}\n")
            code = 200 if self.path == "/healthz" else 500
            body = b"ok" if code == 200 else b"no"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("listening", port, flush=True)
    server.serve_forever()


main()
