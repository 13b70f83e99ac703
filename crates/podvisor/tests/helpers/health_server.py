"""A grpc.health.v1 server for podvisor's grpc probe tests, on Debian's python3-grpcio.

(Not named grpc_*.py: grpcio imports optional modules by such names, and this script's
directory comes first on sys.path.)

usage: health_server.py PORT STATUS_FILE [--no-health]

Check answers with the status written in STATUS_FILE (SERVING, NOT_SERVING or UNKNOWN;
SERVING when the file is missing). With --no-health the health service is not registered,
so calls end with UNIMPLEMENTED. The messages are encoded by hand: HealthCheckResponse is one
varint field, so no generated code is needed.
"""
import sys
import time
from concurrent import futures

import grpc

CODES = {"UNKNOWN": 0, "SERVING": 1, "NOT_SERVING": 2}


def main():
    port, status_file = int(sys.argv[1]), sys.argv[2]

    def check(_request, _context):
        try:
            with open(status_file) as f:
                status = f.read().strip()
        except FileNotFoundError:
            status = "SERVING"
        code = CODES[status]
        return bytes([0x08, code]) if code else b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    if "--no-health" not in sys.argv:
        handler = grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health",
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    check,
                    request_deserializer=lambda b: b,
                    response_serializer=lambda b: b,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("listening", port, flush=True)
    while True:
        time.sleep(3600)


main()
