"""The script the sandbox's child runs, kept as text: it never runs in the trainer.

`mathrl.tasks.code.sandbox` starts `python -I -S -B` with `arguments()` (and
`hook` when the audit hook is one of the layers). In the child `HARNESS`
lists the interpreter's own extension modules (`native_modules`, the only native
code the hook lets load), installs the audit hook (`guard`) after removing the
unaudited ways out (`disarm`), then reads the request from stdin, all of it before any untrusted
code exists (so a sandbox started ahead of its call waits there, guarded),
points fds 0-2 at /dev/null (so stray writes fail), runs the completion, calls
the function once per input, and writes one JSON line to a private copy of the
original stdout. Kept as a string, not a module, because it must import
nothing but the standard library, and because nothing in it may run here.
"""

import functools
import marshal
import sys

HARNESS = r'''
import io, json, os, sys

BANNED = """ctypes _ctypes _ctypes_test _posixsubprocess _posixshmem _multiprocessing sqlite3
    _sqlite3 readline _curses _curses_panel _tkinter _lsprof _dbm _gdbm xxlimited xxlimited_35
    ossaudiodev nis""".split()


def native_modules():
    # The interpreter's own extension modules, but the banned ones: (name, path) as its import
    # system names them (a folder of sys.path, which -I -S leaves to the standard library's,
    # "/", the file), from the folders inside the interpreter's installation. Nothing else
    # may be loaded as native code (_imp.create_dynamic), whatever name it is given.
    import _imp
    prefix = sys.base_prefix.rstrip("/") + "/"  # the child's interpreter is a real path
    suffixes, found = frozenset(_imp.extension_suffixes()), set()
    for folder in sys.path:
        if not folder.startswith(prefix):
            continue
        try:
            files = os.listdir(folder)
        except OSError:  # the zip file that -I -S lists, which usually is not there
            continue
        for file in files:
            name, dot, rest = file.partition(".")  # math, ., cpython-311-x86_64-linux-gnu.so
            if dot + rest in suffixes and name.isidentifier() and not (
                    name in BANNED or name.startswith(("_test", "_xx"))):
                found.add((name, folder.rstrip("/") + "/" + file))
    return frozenset(found)


def guard(root, native):
    # The hook's state is its defaults, bound when it is made, all immutable (no
    # closure cell: from Python 3.13, PEP 667, writing a frame's f_locals writes through to
    # its cells, and a traceback hands out the hook's frame). A frame that has ended keeps
    # its own copy of the defaults, which no later call reads. The hook reads no global name
    # (a test holds it to that): `builtins.str = Liar` would otherwise make its type checks
    # pass whatever it is given. Its types are checked exactly (`type(x) is int`), never with
    # isinstance, which asks the object (`__class__`), and nothing of the code's runs in it: no
    # method of an argument is called, no signal handler or sys.monitoring callback can be set,
    # and from 3.13, where the collector runs (and calls the code's finalizers) at a function's
    # start, in its frame, it never runs by itself (`disarm`).
    top = str.encode(root, "utf-8", "surrogateescape")
    writes = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    # os.putenv: a variable steers native libraries the interpreter's own modules load (say,
    # OPENSSL_CONF, whose configuration names a library for _hashlib's OpenSSL to load).
    always = frozenset("""os.fork os.forkpty os.posix_spawn os.spawn os.exec os.system
        os.putenv os.unsetenv
        subprocess.Popen pty.spawn os.kill os.killpg os.chdir os.link os.symlink
        resource.setrlimit resource.prlimit sys.settrace sys.setprofile sys._current_frames
        sys._settraceallthreads sys._setprofileallthreads sys.addaudithook
        gc.get_objects gc.get_referrers gc.get_referents code.__new__ marshal.load marshal.loads
        cpython.PyInterpreterState_New socket.__new__ socket.bind socket.connect socket.sendto
        socket.sendmsg socket.getaddrinfo socket.gethostbyname socket.gethostbyaddr
        socket.getnameinfo socket.sethostname fcntl.ioctl sqlite3.connect
        sqlite3.enable_load_extension ctypes.dlopen ctypes.call_function ctypes.cdata""".split())
    table = (  # event, how many leading path arguments, where its dir_fd arguments start
        ("os.remove", 1, 1), ("os.rmdir", 1, 1), ("os.mkdir", 1, 2), ("os.chmod", 1, 2),
        ("os.chown", 1, 3), ("os.utime", 1, 3), ("os.rename", 2, 2), ("os.truncate", 1, 9),
        ("os.setxattr", 1, 9), ("os.removexattr", 1, 9))

    def hook(event, args, watched=always | {"import", "open", "fcntl.fcntl"} | {
                 row[0] for row in table}, kind=type, text=str, state=(
                 always, table, top, tuple(part for part in top.split(b"/") if part), writes,
                 native, frozenset(BANNED), PermissionError, int, bytes, tuple, len, os.stat,
                 os.readlink, str.encode, bytes.split, bytes.startswith, bytes.join, str.split,
                 str.startswith, str.isidentifier,
                 # F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY: ways to have the
                 # kernel signal another process (the trainer) when a descriptor is ready.
                 frozenset((8, 10, 15, 1024, 1026)))):
        # An event and its arguments are the interpreter's, but for those the code raises itself
        # (sys.audit), whose objects may be anything: each is checked for its exact type before
        # it is compared, hashed or used. (Positional defaults: every event calls the hook, and
        # a keyword-only one costs a dict lookup a call.)
        if kind(event) is not text or event not in watched:
            return
        (always, table, top, base, writes, native, modules, deny, whole, raw, tup, length, stat,
         link, encode, split, starts, join, parts_of, name_starts, identifier,
         owner_commands) = state
        if event in always:
            raise deny("sandbox: " + event + " is not allowed")
        if event == "fcntl.fcntl":
            if kind(args[1]) is whole and args[1] in owner_commands:
                raise deny("sandbox: fcntl command %d is not allowed" % args[1])
            return
        if event == "import":
            # A plain dotted name, of str itself: the C loader reads a name up to a NUL
            # ("_ctypes\0" is _ctypes), and a subclass could answer comparisons as it likes.
            if kind(args[0]) is not text:
                raise deny("sandbox: importing a module by that name is not allowed")
            for name in parts_of(args[0], "."):  # all: "x._ctypes" would load _ctypes too
                if not identifier(name):
                    raise deny("sandbox: importing a module by that name is not allowed")
                if name in modules or name_starts(name, ("_test", "_xx")):
                    raise deny("sandbox: importing " + name + " is not allowed")
            # Native code (_imp.create_dynamic, with the file it loads): only the
            # interpreter's own modules, by their own names and files.
            origin = args[1]
            if origin is not None and (
                    kind(origin) is not text or (args[0], origin) not in native):
                raise deny("sandbox: loading that extension module is not allowed")
            return
        if event == "open":
            if kind(args[0]) is whole:  # a descriptor it already has
                return
            folders_only = kind(args[2]) is whole and not args[2] & writes  # a folder's
            if folders_only and args[1] is not None:  # descriptor, as a dir_fd, would reach
                return  # outside; open() (whose mode is not None) refuses folders
            pairs, itself = ((args[0], -1),), True  # its folder itself: to read, or O_TMPFILE
        else:
            for name, count, at in table:
                if name == event:
                    break
            if event == "os.truncate" and kind(args[0]) is whole:  # open for writing
                return
            folders = args[at:] + (-1, -1)  # each path's dir_fd
            pairs = ((args[0], folders[0]), (args[count - 1], folders[count - 1]))[:count]
            folders_only = itself = False
        for path, folder in pairs:
            if kind(path) is text:
                path = encode(path, "utf-8", "surrogateescape")
            elif kind(path) is whole:
                raise deny("sandbox: " + event + " on a descriptor is not allowed")
            elif kind(path) is not raw:  # an object that says its own path (__fspath__)
                raise deny("sandbox: " + event + " of a path not a str or bytes is not allowed")
            if not starts(path, b"/"):  # relative to cwd, or to the folder dir_fd names
                if folder is None or (kind(folder) is whole and folder == -1):
                    where = top
                elif kind(folder) is whole:
                    where = encode(link("/proc/self/fd/%d" % folder), "utf-8",
                                   "surrogateescape")
                else:
                    raise deny("sandbox: " + event + " with that dir_fd is not allowed")
                path = join(b"/", (where, path))
            kept = []  # resolved as text: chdir and links are refused, so no symlink misleads
            for part in split(path, b"/"):
                if part == b"..":
                    kept[-1:] = []
                elif part and part != b".":
                    kept.append(part)
            if length(kept) > length(base) - itself and tup(kept[:length(base)]) == base:
                continue
            if folders_only and stat(path).st_mode & 0o170000 != 0o40000:
                continue
            raise deny("sandbox: " + event + " outside its folder is not allowed")

    return hook


def disarm():
    # Unaudited ways out go. Every builtin module is imported first, so that _imp.create_builtin,
    # which would hand out fresh copies of these modules, can go too.
    import _imp, _signal, posix
    for name in sys.builtin_module_names:
        __import__(name)
    if sys.version_info >= (3, 13):  # a frozen module's load is audited as marshal.loads, which
        for name in _imp._frozen_module_names():  # the hook refuses (3.11 and 3.12 load anyway)
            if not name.startswith("__"):  # (__hello__ and kin: the interpreter's own tests)
                __import__(name)
    for name in BANNED:  # a banned module built into the interpreter (Debian's _posixsubprocess)
        sys.modules.pop(name, None)  # must be imported again, which the hook sees and refuses
    names = """mkfifo mknod chroot pidfd_open setpriority nice sched_setscheduler sched_setparam
        setsid setpgid setpgrp"""
    gone = [module.__dict__.pop(name, None) for module in (posix, os) for name in names.split()]
    gone.append(_signal.__dict__.pop("pidfd_send_signal", None))
    for functions in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks):
        functions.difference_update(gone)
    del _imp.create_builtin
    # Nothing of the code's may run while the hook decides, where it could reach the hook's
    # frame and, from Python 3.13, rebind its locals (PEP 667): no handler of a signal (Python
    # runs it in whatever frame is running, the frame its second argument), and no callback of
    # sys.monitoring (3.12), which is not audited. The signal module still imports.
    _signal.signal = refuse_signals
    if "signal" in sys.modules:
        sys.modules["signal"].signal = refuse_signals
    sys.__dict__.pop("monitoring", None)
    # Nor a finalizer: from 3.12 the collector runs when a function starts, the hook among them,
    # and from 3.13 a finalizer could rebind the running hook's locals through its frame. So it
    # runs only when the code calls gc.collect(), where the hook's frame is not running.
    if sys.version_info >= (3, 13):
        import gc
        gc.disable()
        del gc.enable


def refuse_signals(signalnum, handler):
    raise PermissionError("sandbox: signal.signal is not allowed")


class Discard(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        return len(data)


def describe(exc):
    try:
        message = str(exc)
        return (type(exc).__name__ + (": " + message if message else ""))[:300]
    except BaseException:
        return "an exception that cannot be printed"


def main():
    if sys.argv[1:] == ["hook"]:  # first: a sandbox started ahead waits, guarded, for its call
        native = native_modules()
        disarm()
        sys.addaudithook(guard(os.getcwd(), native))
    # All of it, before untrusted code runs. Its length comes first: a copy of the pipe's write
    # end in another child of the trainer (a fork made while this waited) would hold off EOF.
    size = int(sys.stdin.buffer.readline())
    request = json.loads(sys.stdin.buffer.read(size))
    reply, null = os.dup(1), os.open(os.devnull, os.O_RDONLY)  # stray writes to 1 and 2 fail
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdout = sys.stderr = sys.__stdout__ = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(Discard()), write_through=True)
    sys.stdin = sys.__stdin__ = io.StringIO()
    sys.pycache_prefix = os.devnull + "/none"  # imports compile from source: marshal is refused
    inputs, budget = request["inputs"], request["budget"]
    status, detail, results = "ok", "", ["null"] * len(inputs)
    try:
        namespace = {"__name__": "__sandbox__", "__builtins__": __builtins__}
        exec(compile(request["source"], "<completion>", "exec"), namespace)
        function = namespace.get(request["function"])
        if not callable(function):
            raise LookupError("the code defines no function " + request["function"])
    except BaseException as exc:
        status, detail = "error", describe(exc)
    else:
        for i, args in enumerate(inputs):
            try:
                text = json.dumps(function(*args))
                if len(text) > budget:
                    raise ValueError(f"the result is over {budget} bytes as JSON")
                results[i] = text
            except BaseException as exc:
                detail = detail or f"input {i}: {describe(exc)}"
    line = '{"status": %s, "detail": %s, "results": [%s]}\n' % (
        json.dumps(status), json.dumps(detail), ", ".join(results))
    data = line.encode()
    while data:
        data = data[os.write(reply, data):]
    os._exit(0)  # no atexit handlers or finalizers of the completion's


main()
'''


BOOT = """import marshal, sys
tag, code, source = sys.argv[1:4]
del sys.argv[1:4]
exec(marshal.loads(bytes.fromhex(code)) if tag == sys.implementation.cache_tag else source)
"""
"""What `python -c` runs first: `HARNESS` as the trainer compiled it, where the child's
interpreter reads the trainer's bytecode (the same cache tag, as for a `.pyc`), else from its
source. Before the hook, so `marshal` is still allowed; compiling `HARNESS` would cost each
fresh child 3-4 ms on a 2-core machine, as much as the exec filter and the hidden mount tables
together."""


@functools.cache
def arguments() -> tuple[str, ...]:
    """The interpreter's arguments after `-I -S -B`: `-c BOOT`, the cache tag, `HARNESS`
    compiled (marshal's bytes, in hex: an argument holds no NUL) and its source."""
    code = compile(HARNESS, "<harness>", "exec", dont_inherit=True, optimize=0)
    tag = sys.implementation.cache_tag or ""  # None: no bytecode is ever read, so neither is this
    return ("-c", BOOT, tag, marshal.dumps(code).hex(), HARNESS)
