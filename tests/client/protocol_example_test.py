#!/usr/bin/python3
"""Checks proto/PROTOCOL.md's worked example against a live nielsd serving the shipped model:
sends the example's request bytes exactly as written and expects exactly the example's response
bytes back. Uses nothing but the socket module (as a client written from the document would).

    protocol_example_test.py PROTOCOL.md SOCKET
"""

import re
import socket
import sys


def hex_blocks(text):
    """The ```hex blocks of the document, in order, as bytes (comments after '#' ignored)."""
    blocks = []
    for body in re.findall(r"```hex\n(.*?)```", text, re.S):
        digits = "".join(line.split("#", 1)[0] for line in body.splitlines())
        blocks.append(bytes.fromhex(digits))
    return blocks


def read_frames(sock, count):
    data = b""
    frames = []
    while len(frames) < count:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("FAIL: nielsd closed the connection")
        data += chunk
        while True:
            length, shift, i = 0, 0, 0
            while i < len(data):
                length |= (data[i] & 0x7F) << shift
                shift += 7
                i += 1
                if not data[i - 1] & 0x80:
                    break
            else:
                break
            if len(data) < i + length:
                break
            frames.append(data[:i + length])
            data = data[i + length:]
    return frames


def main():
    doc, path = sys.argv[1], sys.argv[2]
    with open(doc, encoding="utf-8") as f:
        blocks = hex_blocks(f.read())
    if len(blocks) < 4 or len(blocks) % 2:
        raise SystemExit("FAIL: expected request/response pairs of ```hex blocks, found %d" % len(blocks))
    failed = 0
    for n in range(0, len(blocks), 2):
        request, expected = blocks[n], blocks[n + 1]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(request)
        got = read_frames(sock, 1)[0]
        sock.close()
        if got == expected:
            print("ok   example %d: %d request bytes -> %d response bytes" % (n // 2 + 1, len(request), len(got)))
        else:
            print("FAIL example %d:\n  expected %s\n  got      %s" % (n // 2 + 1, expected.hex(" "), got.hex(" ")))
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
