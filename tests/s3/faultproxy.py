#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small TCP fault proxy for the S3 tests: sits between a client and an HTTP/1.1 server on
127.0.0.1 and breaks chosen requests the way networks and servers do.

    faultproxy.py --upstream 127.0.0.1:PORT [--fault MODE] [--match REGEX] [--times N]
                  [--after BYTES] [--stall SECONDS] [--log FILE]

Prints "listening 127.0.0.1:PORT" once it accepts connections, then runs until killed.
Requests are parsed on the way in (request line, headers, a Content-Length body); answers
flow back unchanged. The first --times requests whose request line ("PUT /b/k?partNumber=2
...") matches --match get the fault:

  none      pass everything through (use --log to record the requests)
  reset     forward the head and --after body bytes, then reset the client's connection (RST);
            a request without a body is reset before anything is forwarded
  slowdown  answer 503 SlowDown without forwarding the request
  stall     forward the head and --after body bytes, then go silent for --stall seconds
  corrupt   flip one body byte at offset --after on its way to the server
  drop      forward the whole request, then reset the client's connection instead of giving
            it the answer (the server did the work; the client never hears of it)

--log FILE gets one line per request: "<fault or pass> <request line>".
Only loopback addresses are accepted for --upstream; the proxy listens on 127.0.0.1.
"""
import argparse
import re
import socket
import struct
import sys
import threading
import time

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class Faults:
    def __init__(self, args):
        self.mode = args.fault
        self.match = re.compile(args.match)
        self.left = args.times
        self.after = args.after
        self.stall = args.stall
        self.lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1) if args.log else None

    def decide(self, reqline):
        with self.lock:
            fault = "pass"
            if self.mode != "none" and self.left > 0 and self.match.search(reqline):
                self.left -= 1
                fault = self.mode
            if self.log:
                self.log.write(f"{fault} {reqline}\n")
            return fault


def pump(src, dst, conn):
    try:
        while True:
            d = src.recv(262144)
            if not d:
                break
            if conn.get("drop") and not d.startswith(b"HTTP/1.1 100"):
                # the handler thread is blocked reading the client: wake it, and let its
                # close() send the reset (a close() here would not, while it reads)
                dst.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                dst.shutdown(socket.SHUT_RD)
                return
            dst.sendall(d)
    except OSError:
        pass
    for s in (dst, src):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def rst(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def handle(client, upstream_addr, faults):
    try:
        upstream = socket.create_connection(upstream_addr, timeout=10)
        upstream.settimeout(None)
    except OSError:
        rst(client)
        return
    conn = {}
    back = threading.Thread(target=pump, args=(upstream, client, conn), daemon=True)
    back.start()
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = client.recv(262144)
                if not d:
                    return
                buf += d
            head, _, buf = buf.partition(b"\r\n\r\n")
            head += b"\r\n\r\n"
            reqline = head.split(b"\r\n", 1)[0].decode("latin-1")
            m = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I)
            length = int(m.group(1)) if m else 0
            fault = faults.decide(reqline)
            if fault in ("reset", "stall") and length == 0:
                if fault == "stall":
                    time.sleep(faults.stall)
                rst(client)
                return
            if fault == "slowdown":
                if not re.search(rb"\r\nexpect:\s*100-continue", head, re.I):
                    # read the body first, as a server would, so the client sees the answer
                    # rather than a reset
                    left = length - len(buf)
                    while left > 0:
                        d = client.recv(min(left, 262144))
                        if not d:
                            return
                        left -= len(d)
                client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                               % (len(SLOWDOWN), SLOWDOWN))
                client.shutdown(socket.SHUT_WR)
                return
            if fault == "drop":
                conn["drop"] = True
            upstream.sendall(head)
            sent = 0
            while sent < length:
                if not buf:
                    buf = client.recv(min(length - sent, 262144))
                    if not buf:
                        return
                chunk, buf = buf[:length - sent], buf[length - sent:]
                if fault in ("reset", "stall") and sent + len(chunk) >= faults.after:
                    upstream.sendall(chunk[:max(0, faults.after - sent)])
                    if fault == "reset":
                        rst(client)
                        return
                    time.sleep(faults.stall)
                    return
                if fault == "corrupt" and sent <= faults.after < sent + len(chunk):
                    i = faults.after - sent
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0x55]) + chunk[i + 1:]
                upstream.sendall(chunk)
                sent += len(chunk)
    except OSError:
        pass
    finally:
        for s in (client, upstream):
            try:
                s.close()
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the server (loopback)")
    ap.add_argument("--fault", default="none",
                    choices=["none", "reset", "slowdown", "stall", "corrupt", "drop"])
    ap.add_argument("--match", default=".", help="regex on the request line")
    ap.add_argument("--times", type=int, default=1)
    ap.add_argument("--after", type=int, default=0, help="body offset in bytes")
    ap.add_argument("--stall", type=float, default=30.0, help="seconds of silence")
    ap.add_argument("--log", help="file to append one line per request to")
    args = ap.parse_args()

    host, _, port = args.upstream.rpartition(":")
    if not host.startswith("127.") and host not in ("localhost", "[::1]", "::1"):
        sys.exit("faultproxy: --upstream must be a loopback address")
    faults = Faults(args)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    print(f"listening 127.0.0.1:{ls.getsockname()[1]}", flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=handle, args=(c, (host, int(port)), faults), daemon=True).start()


if __name__ == "__main__":
    main()
