"""A grpc.health.v1 server on Python's h2 (Debian's python3-h2) for podvisor's gRPC probe tests.

Its HPACK encoder Huffman-codes values and indexes headers in the dynamic table, as grpc-go's
and Envoy's do, unlike grpcio's. Usage: h2_health.py PORT MODE, where MODE is one of
  serving        a SERVING message split over two DATA frames, then Huffman-coded trailers
                 that refer back to the response headers through the dynamic table
  not-serving    a NOT_SERVING message, then trailers
  unimplemented  a trailers-only answer: grpc-status 12, Huffman-coded
  malformed      a header block that is not HPACK
  oversized      a header block of 20 KiB over HEADERS and CONTINUATION frames
  bad-huffman    a header value whose Huffman code ends with padding that is not all ones
"""

import socket
import struct
import sys

import h2.config
import h2.connection
import h2.events
from hpack import Encoder

PORT = int(sys.argv[1])
MODE = sys.argv[2]


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def message(status):
    body = bytes([0x08, status])  # HealthCheckResponse.status
    return b"\x00" + struct.pack(">I", len(body)) + body


def literal(name, value):
    """A literal header without indexing, both strings raw."""
    assert len(name) < 127 and len(value) < 127
    return bytes([0x00, len(name)]) + name + bytes([len(value)]) + value


def respond(sock, conn, sid):
    if MODE in ("serving", "not-serving"):
        encoder = Encoder()
        headers = encoder.encode(
            [(":status", "200"), ("content-type", "application/grpc"), ("grpc-encoding", "identity")],
            huffman=True,
        )
        trailers = encoder.encode(
            [("grpc-status", "0"), ("grpc-encoding", "identity"), ("grpc-message", "all good")],
            huffman=True,
        )
        # The trailers name grpc-encoding: identity by its dynamic table index.
        assert len(trailers) < 40, trailers
        msg = message(1 if MODE == "serving" else 2)
        out = frame(1, 0x4, sid, headers)
        out += frame(0, 0, sid, msg[:3]) + frame(0, 0, sid, msg[3:])
        out += frame(1, 0x4 | 0x1, sid, trailers)
        sock.sendall(out)
    elif MODE == "unimplemented":
        block = Encoder().encode(
            [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "12")],
            huffman=True,
        )
        sock.sendall(frame(1, 0x4 | 0x1, sid, block))
    elif MODE == "malformed":
        sock.sendall(frame(1, 0x4 | 0x1, sid, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
    elif MODE == "oversized":
        block = literal(b":status", b"200") + b"".join(literal(b"x-filler", b"a" * 100) for _ in range(180))
        first, rest = block[:10000], block[10000:]
        out = frame(1, 0x1, sid, first)
        while rest:
            chunk, rest = rest[:10000], rest[10000:]
            out += frame(9, 0x4 if not rest else 0, sid, chunk)
        sock.sendall(out)
    elif MODE == "bad-huffman":
        # Name "abc" raw; value Huffman-flagged, one byte 0x00: "0" then padding 000.
        block = literal(b":status", b"200") + bytes([0x00, 0x03]) + b"abc" + bytes([0x81, 0x00])
        sock.sendall(frame(1, 0x4 | 0x1, sid, block))
    else:
        raise SystemExit(f"unknown mode {MODE}")


def serve(sock):
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    while True:
        data = sock.recv(65535)
        if not data:
            return
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.StreamEnded):
                sock.sendall(conn.data_to_send())
                # From here the answer is written by hand, frame by frame.
                respond(sock, conn, event.stream_id)
                # Close gracefully: unread input at close() would reset the connection
                # before the client has read the answer.
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                while sock.recv(65535):
                    pass
                return
        sock.sendall(conn.data_to_send())


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PORT))
    listener.listen(16)
    print(f"listening {PORT}", flush=True)
    while True:
        sock, _ = listener.accept()
        try:
            serve(sock)
        except Exception as e:  # a probe that gave up mid-call: serve the next one
            print(f"connection ended: {e}", flush=True)
        finally:
            sock.close()


main()
