#!/usr/bin/env python3
"""Hostile clients against the example servers: garbage, half-open and
reset connections, slowloris, floods past RLIMIT_NOFILE (servers started
with a low descriptor limit), malformed HTTP requests and chat lines.
After each attack the server must still be alive and answer a
well-behaved client, and stop cleanly on SIGTERM.

    scripts/hostile-clients.py build/examples   (about a minute)"""
import os, random, resource, signal, socket, subprocess, sys, time

B = sys.argv[1] if len(sys.argv) > 1 else "build/examples"
random.seed(1)


def exe(name):
    """The example's path: installed names carry an iof- prefix."""
    p = os.path.join(B, "iof-" + name)
    return p if os.path.exists(p) else os.path.join(B, name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(args, nofile=None):
    def pre():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=pre)
    time.sleep(0.3)
    return p


def conn(port, timeout=3):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def alive(p, name):
    if p.poll() is not None:
        err = p.stderr.read().decode(errors="replace")[-2000:]
        print(f"FAIL {name}: server died rc={p.returncode}\n{err}")
        return False
    return True


def garbage(port, n=30):
    for i in range(n):
        try:
            s = conn(port)
            data = bytes(random.getrandbits(8) for _ in range(random.randint(1, 70000)))
            s.sendall(data)
            if i % 3 == 0:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            s.close()
        except OSError:
            pass


def half_open(port, n=30):
    socks = []
    for i in range(n):
        try:
            s = conn(port)
            if i % 2:
                s.shutdown(socket.SHUT_WR)
            else:
                s.sendall(b"partial")
                s.shutdown(socket.SHUT_WR)
            socks.append(s)
        except OSError:
            pass
    time.sleep(0.2)
    for s in socks:
        s.close()


def slowloris(port, n=100, dur=1.5):
    socks = []
    for _ in range(n):
        try:
            socks.append(conn(port))
        except OSError:
            break
    t0 = time.time()
    while time.time() - t0 < dur:
        for s in socks:
            try:
                s.send(b"G")
            except OSError:
                pass
        time.sleep(0.1)
    return socks


def flood(port, n=300):
    socks = []
    for _ in range(n):
        try:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            break
    time.sleep(0.5)
    return socks


def attack(name, args, probe, extra=(), nofile=None):
    port = free_port()
    args = [a.replace("PORT", str(port)) for a in args]
    p = start(args, nofile)
    ok = True
    try:
        for label, fn in [("garbage", garbage),
                          ("half-open", half_open),
                          ("slowloris", lambda pt: [s.close() for s in slowloris(pt)]),
                          ("flood", lambda pt: [s.close() for s in flood(pt)])] + list(extra):
            fn(port)
            time.sleep(0.3)
            if not alive(p, f"{name} after {label}"):
                ok = False
                break
            try:
                if not probe(port):
                    print(f"FAIL {name}: probe after {label} got a wrong answer")
                    ok = False
            except OSError as e:
                print(f"FAIL {name}: probe after {label}: {e}")
                ok = False
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                print(f"FAIL {name}: did not stop on SIGTERM")
                p.kill()
                ok = False
            if p.returncode not in (0, -15, None):
                print(f"FAIL {name}: exit status {p.returncode} on SIGTERM")
                ok = False
    print(("ok   " if ok else "BAD  ") + name + (f" (nofile {nofile})" if nofile else ""))
    return ok


def echo_probe(port):
    s = conn(port)
    s.sendall(b"hello\n")
    got = b""
    while len(got) < 6:
        d = s.recv(100)
        if not d:
            break
        got += d
    s.close()
    return got == b"hello\n"


def http_probe(port):
    s = conn(port)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
    s.close()
    return b"200" in got and b"Hello" in got


def http_nasty(port):
    reqs = [b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nabc",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * 100000 + b"\r\n\r\n",
            b"\r\n\r\n\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n" * 50,
            b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nabcdefg",
            b"GET / HTTP/1.1\r\n" + b"H: v\r\n" * 5000 + b"\r\n",
            b"\0" * 5000 + b"\r\n\r\n"]
    for r in reqs:
        try:
            s = conn(port, 2)
            s.sendall(r)
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
            s.close()
        except OSError:
            pass


def chat_probe(port):
    a = conn(port)
    b = conn(port)
    time.sleep(0.1)
    a.sendall(b"ping-from-a\n")
    t0 = time.time()
    got = b""
    b.settimeout(2)
    while b"ping-from-a" not in got and time.time() - t0 < 3:
        d = b.recv(4096)
        if not d:
            break
        got += d
    a.close()
    b.close()
    return b"ping-from-a" in got


def chat_nasty(port):
    lines = [b"/nick " + b"N" * 100000 + b"\n", b"/nick \n", b"/nick\n",
             b"/nick \0\0\0\n", b"/quit\n", b"\n" * 10000, b"x" * 200000,
             b"/nick a b c d\n" * 100, b"\r\n" * 100]
    for l in lines:
        try:
            s = conn(port, 2)
            s.sendall(l)
            s.close()
        except OSError:
            pass
    # a reader that never reads while others talk (slow consumer)
    slow = conn(port)
    talkers = [conn(port) for _ in range(3)]
    for _ in range(200):
        for t in talkers:
            try:
                t.send(b"x" * 1000 + b"\n")
            except OSError:
                pass
    time.sleep(1.5)
    for t in talkers:
        t.close()
    slow.close()


def offload_probe(port):
    s = conn(port)
    s.sendall(b"abc\n")
    got = b""
    while not got.endswith(b"\n"):
        d = s.recv(100)
        if not d:
            break
        got += d
    s.close()
    return len(got) == 17


def proxy_dead_target(port):
    for _ in range(20):
        try:
            s = conn(port, 2)
            s.sendall(b"data")
            try:
                s.recv(10)
            except OSError:
                pass
            s.close()
        except OSError:
            pass


ok = True
ok &= attack("echo-server", [exe("echo-server"), "PORT"], echo_probe)
ok &= attack("echo-server", [exe("echo-server"), "PORT"], echo_probe, nofile=48)
ok &= attack("echo-server --threads 2", [exe("echo-server"), "PORT", "--threads", "2"], echo_probe)
ok &= attack("http-hello", [exe("http-hello"), "PORT"], http_probe,
             [("nasty requests", http_nasty)])
ok &= attack("http-hello", [exe("http-hello"), "PORT"], http_probe, nofile=48)
ok &= attack("chat", [exe("chat"), "PORT", "--idle", "3000"], chat_probe,
             [("nasty lines", chat_nasty)])
ok &= attack("chat", [exe("chat"), "PORT"], chat_probe, nofile=48)
ok &= attack("offload", [exe("offload"), "PORT", "--threads", "2"], offload_probe)
ok &= attack("offload", [exe("offload"), "PORT"], offload_probe, nofile=48)
# proxy in front of an echo server, and in front of nothing
eport = free_port()
ep = start([exe("echo-server"), str(eport)])
ok &= attack("proxy", [exe("proxy"), "PORT", "127.0.0.1", str(eport)], echo_probe)
ok &= attack("proxy", [exe("proxy"), "PORT", "127.0.0.1", str(eport)], echo_probe, nofile=48)
ep.send_signal(signal.SIGTERM)
ep.wait(5)
ok &= attack("proxy to nowhere", [exe("proxy"), "PORT", "127.0.0.1", str(free_port())],
             lambda port: True, [("dead target", proxy_dead_target)])
ok &= attack("legacy-echo-fibers", [f"{B}/legacy-echo-fibers", "PORT"], echo_probe)
ok &= attack("legacy-echo-fibers", [f"{B}/legacy-echo-fibers", "PORT"], echo_probe, nofile=48)
# the unmodified thread-per-connection program under the preload hook
run = os.path.join(os.path.dirname(os.path.abspath(B)), "iofiber-run")
if os.path.exists(run):
    ok &= attack("iofiber-run legacy-echo-threads",
                 [run, f"{B}/legacy-echo-threads", "PORT"], echo_probe)
    ok &= attack("iofiber-run legacy-echo-threads",
                 [run, f"{B}/legacy-echo-threads", "PORT"], echo_probe, nofile=48)
print("ALL OK" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
