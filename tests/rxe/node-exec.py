#!/usr/bin/env python3
"""node-exec.py: run commands on another guest of the two-node tier, over a
plain TCP connection on the emulated link (the guests have no ssh).

  node-exec.py serve PORT          on the servant node: run what is asked,
                                   until asked to exit
  node-exec.py run HOST PORT CMD.. run CMD (joined with spaces, then given
                                   to bash -c, as ssh does) on HOST; its
                                   output comes back, its exit status is
                                   this program's
  node-exec.py rsh HOST CMD..      the same on port 2222, with ssh's
                                   argument shape: Open MPI's launch agent
                                   (--mca plm_rsh_agent)
  node-exec.py exit HOST PORT      make the servant's serve return 0

Protocol: one line with the command (UTF-8, no newline inside), then the
servant streams the command's standard output and error and ends with a
trailer line "\\n@@node-exec rc=N@@\\n". A command of exactly "@@exit@@"
ends serve. Nothing else is understood; the servant listens only inside the
guest, on the link between the guests.

SPDX-License-Identifier: MIT
"""
import os
import socket
import subprocess
import sys
import threading

TRAILER = b"\n@@node-exec rc="
EXIT = "@@exit@@"
RSH_PORT = 2222


def serve(port):
    done = threading.Event()
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("0.0.0.0", port))
    lsock.listen(8)
    lsock.settimeout(1.0)
    print("node-exec: serving on port %d" % port, flush=True)

    def one(conn):
        with conn:
            f = conn.makefile("rb")
            line = f.readline().decode("utf-8", "replace").rstrip("\n")
            if line == EXIT:
                conn.sendall(TRAILER + b"0@@\n")
                done.set()
                return
            print("node-exec: running: %s" % line, flush=True)
            p = subprocess.Popen(["/bin/bash", "-c", line], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            while True:
                chunk = p.stdout.read1(65536)
                if not chunk:
                    break
                try:
                    conn.sendall(chunk)
                except OSError:
                    pass  # the asker went away; let the command finish
            rc = p.wait()
            print("node-exec: exit %d: %s" % (rc, line[:120]), flush=True)
            try:
                conn.sendall(TRAILER + b"%d@@\n" % rc)
            except OSError:
                pass

    while not done.is_set():
        try:
            conn, _ = lsock.accept()
        except socket.timeout:
            continue
        threading.Thread(target=one, args=(conn,), daemon=True).start()
    return 0


def run(host, port, words):
    cmd = " ".join(words)
    if "\n" in cmd:
        print("node-exec: a command cannot hold a newline", file=sys.stderr)
        return 2
    s = socket.create_connection((host, port))
    s.sendall(cmd.encode() + b"\n")
    out = sys.stdout.buffer
    pending = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        pending += chunk
        # Keep what could be the start of the trailer; print the rest.
        cut = pending.rfind(b"\n")
        if cut > 0 and TRAILER not in pending:
            out.write(pending[:cut])
            out.flush()
            pending = pending[cut:]
    i = pending.find(TRAILER)
    if i < 0:
        out.write(pending)
        out.flush()
        print("node-exec: %s:%d closed without an exit status" % (host, port),
              file=sys.stderr)
        return 255
    out.write(pending[:i])
    out.flush()
    return int(pending[i + len(TRAILER):].split(b"@@")[0])


def main(argv):
    if len(argv) == 3 and argv[1] == "serve":
        return serve(int(argv[2]))
    if len(argv) >= 5 and argv[1] == "run":
        return run(argv[2], int(argv[3]), argv[4:])
    if len(argv) >= 4 and argv[1] == "rsh":
        return run(argv[2], RSH_PORT, argv[3:])
    if len(argv) == 4 and argv[1] == "exit":
        return run(argv[2], int(argv[3]), [EXIT])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
