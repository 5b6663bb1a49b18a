# gdb extension for iofiber: lists the live fibers of a process and shows
# the backtrace of a suspended one.
#
#   (gdb) source /usr/local/share/iofiber/gdb/iofiber.py
#   (gdb) info iofibers          # id, state, name, executor, what it awaits
#   (gdb) iofiber bt 3           # backtrace of fiber #3 (suspended)
#   (gdb) iofiber bt 3 full      # extra words are passed to bt
#
# It reads the registry that libiofiber keeps of launched fibers (the
# list iof__debug_shards and the types of sched/debug.c, which is always
# compiled with debug information). `iofiber bt` needs a live process: it
# loads the registers a suspended fiber saved when it switched away into
# the selected thread, runs `bt`, then puts the thread's registers back.
# x86-64 only (Boost.Context's fcontext layout for the SysV ABI).

import gdb

_STATES = {0: "created", 1: "running", 2: "suspended", 3: "done"}
# Callee-saved registers in the order jump_fcontext stores them below the
# return address: r12, r13, r14, r15, rbx, rbp, then rip.
_SAVED = ("r12", "r13", "r14", "r15", "rbx", "rbp")


def _u64(addr):
    data = gdb.selected_inferior().read_memory(addr, 8)
    return int.from_bytes(bytes(data), "little")


def _chains():
    try:
        shard = gdb.parse_and_eval("iof__debug_shards")
    except gdb.error:
        raise gdb.GdbError(
            "iofiber: no fiber registry in this program (not linked with "
            "iofiber, or its debug information was stripped)")
    # One list per launching thread (sched/debug.c); ids give launch order.
    chains = []
    while int(shard) != 0 and len(chains) < 1000000:
        c = shard["head"]
        while int(c) != 0 and len(chains) < 1000000:
            chains.append(c)
            c = c["dbg_next"]
        shard = shard["next"]
    chains.sort(key=lambda c: int(c["dbg_id"]))
    return chains


def _labels():
    """vtable address -> label, from the table sched/debug.c fills."""
    out = {}
    try:
        labels = gdb.parse_and_eval("'debug.c'::labels")
        n = int(gdb.parse_and_eval("'debug.c'::nlabels"))
    except gdb.error:
        return out
    lo, hi = labels.type.range()
    for i in range(min(n, hi - lo + 1)):
        e = labels[i]
        try:
            out[int(e["vt"])] = e["label"].string()
        except gdb.error:
            pass
    return out


def _env(chain):
    fiber = chain["fiber"]
    env = fiber["env"]
    return env if int(env) != 0 else chain["env"].address


def _fcontext_frame_size():
    """Bytes jump_fcontext reserves below its return address: 0x38 in
    Boost 1.74, 0x40 from 1.76 on (a slot for the stack protector). Read
    from its first instruction, lea -N(%rsp),%rsp."""
    for name in ("jump_fcontext",
                 "'_ZN5boost7context6detail13jump_fcontextEPvS2_'"):
        try:
            addr = int(gdb.parse_and_eval("(unsigned long)&" + name))
            code = bytes(gdb.selected_inferior().read_memory(addr, 5))
        except (gdb.error, gdb.MemoryError):
            continue
        if code[:4] == b"\x48\x8d\x64\x24":
            return 256 - code[4]
    return 0x40


class InfoIofibers(gdb.Command):
    """List the live iofiber fibers: info iofibers

Columns: id (launch order), state, name, executor kind and address, and
for a suspended fiber what it awaits."""

    def __init__(self):
        super().__init__("info iofibers", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        chains = _chains()
        labels = _labels()
        print("%-5s %-10s %-20s %-32s %s" %
              ("Id", "State", "Name", "Executor", "Waiting on"))
        for c in chains:
            f = c["fiber"]
            state = _STATES.get(int(f["state"]), "?")
            ex = _env(c)["executor"]
            kind = labels.get(int(ex["vt"]), "executor")
            waiting = ""
            vt = int(c["wait_vt"])
            if state == "suspended" and vt:
                waiting = "%s (%s)" % (labels.get(vt, "custom awaitable"),
                                       hex(int(c["wait_aw"])))
            print("%-5d %-10s %-20s %-32s %s" %
                  (int(c["dbg_id"]), state, f["name"].string(),
                   "%s@%s" % (kind, hex(int(ex["ex"]))), waiting))
        print("%d live fiber%s" % (len(chains), "" if len(chains) == 1 else "s"))


class IofiberPrefix(gdb.Command):
    """iofiber commands: iofiber bt ID [bt options]"""

    def __init__(self):
        super().__init__("iofiber", gdb.COMMAND_STACK, prefix=True)


class IofiberBt(gdb.Command):
    """Backtrace of a suspended fiber: iofiber bt ID [bt arguments]

ID is the number `info iofibers` shows. The selected thread's registers
are switched to the ones the fiber saved, `bt` runs, and they are
restored. A running fiber is on some thread: use `thread apply all bt`."""

    def __init__(self):
        super().__init__("iofiber bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        argv = gdb.string_to_argv(arg)
        if not argv:
            raise gdb.GdbError("usage: iofiber bt ID [bt arguments]")
        try:
            want = int(argv[0])
        except ValueError:
            raise gdb.GdbError("iofiber bt: ID must be a number")
        chain = next((c for c in _chains() if int(c["dbg_id"]) == want), None)
        if chain is None:
            raise gdb.GdbError("iofiber bt: no live fiber #%d" % want)
        f = chain["fiber"]
        state = _STATES.get(int(f["state"]), "?")
        if state == "running":
            raise gdb.GdbError("iofiber bt: fiber #%d is running on a thread; "
                               "use `thread apply all bt`" % want)
        if state != "suspended":
            raise gdb.GdbError("iofiber bt: fiber #%d has not started" % want)
        ctx = int(f["ctx"])
        n = _fcontext_frame_size()
        regs = {"rip": _u64(ctx + n), "rsp": ctx + n + 8}
        for i, r in enumerate(_SAVED):
            regs[r] = _u64(ctx + n - 0x30 + 8 * i)

        gdb.newest_frame().select()
        frame = gdb.selected_frame()
        saved = {r: int(frame.read_register(r)) for r in regs}
        try:
            for r, v in regs.items():
                gdb.execute("set $%s = %d" % (r, v), to_string=True)
            print("fiber #%d \"%s\" (suspended):" % (want, f["name"].string()))
            gdb.execute("bt " + " ".join(argv[1:]))
        finally:
            for r, v in saved.items():
                gdb.execute("set $%s = %d" % (r, v), to_string=True)
            gdb.newest_frame().select()


InfoIofibers()
IofiberPrefix()
IofiberBt()
