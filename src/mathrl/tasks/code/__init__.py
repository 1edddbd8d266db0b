"""The code-writing tasks, and the sandbox their rewards run model-written code in.

- `task`: `CodeAdapter`, write a small Python function `f`; the reward is the
  share of hidden tests it passes. `feedback`: `CodeFeedbackAdapter`, the same
  as an episode of two turns.
- `sandbox`: `call_function`, which runs untrusted code in a child process, and
  the sandboxes a worker pool starts ahead of their calls; `harness`, the script
  the child runs; `kernel`, the namespaces, Landlock and seccomp it enters.

This docstring is the sandbox's reference: what it defends against, which layer
stops what, when it refuses to run, what it leaves open, and what it costs. How
a call runs and how each layer is set up are in the modules' own docstrings:
`mathrl.tasks.code.sandbox` (a call, the limits, sandboxes started ahead),
`mathrl.tasks.code.harness` (the audit hook) and `mathrl.tasks.code.kernel`
(the kernel layers).

The threat model
----------------
A completion is untrusted input. A model may write code that loops forever,
allocates 10 GB, forks, floods its output, writes, reads or signals outside
itself, or forges its result. So it never runs in the trainer: each distinct
completion runs in a fresh child interpreter, which calls `f` on each test
input and sends back only the return values. The expected values never leave
the trainer, so a completion scores only by computing them: a reply it forges
holds only what it computed.

What the sandbox promises, whatever the code does: the call ends within its
limits with an outcome, and never raises into the trainer because of the code;
nothing outside the child's own folder changes; nothing of it outlives the call
or the trainer (a tree deeper than Python's recursion limit, folders it made
unreadable, a full folder, a process it started); and it reads nothing of the
trainer's user (its home, `.env` files) or of other users.

The layers, and what each stops
-------------------------------
Each layer is tested alone on the attacks it is meant for, and each test names
the layer and asserts its evidence (the hook's refusal, seccomp's EPERM,
Landlock's EACCES, the uid or pid the child sees): tests/test_sandbox.py, fresh
and in sandboxes started ahead, on the interpreter running the tests, Debian's
Python and pyenv's 3.13; tests/test_sandbox_layers.py as root and as an
unprivileged user, with Debian's 3.11 and a relocatable 3.13, and on machines
without a layer; tests/test_sandbox_seccomp.py, the filter run as a program on
any call number and its arguments.

- The limits (always; `sandbox.Limits`, the code task's values in
  `task.LIMITS`): CPU time, address space, file size, open files, processes,
  wall-clock time and output, and no core dump. They stop the endless loop, the
  idle wait, the allocation, the fork bomb and the flood: each ends the call
  with its status, within the wall clock.
- The audit hook, in the child's interpreter before the code runs: Python's own
  ways out, refused before the kernel sees them. It is a first layer, not a
  boundary: PEP 578 says an audit hook cannot hold code that runs in the same
  interpreter, and its path checks see neither `os.open`'s `dir_fd` nor a
  descriptor swapped under it by another thread. Every way out it refuses is
  held by a kernel layer too, which the tests show with the hook off:
  processes and exec (seccomp: no fork, no execveat, the exec filter), signals
  (seccomp: no kill or pidfd; the pid namespace; Landlock ABI 6), sockets
  (seccomp: no socket; the network namespace), rlimit changes (no
  capabilities: raising one needs CAP_SYS_RESOURCE), chdir and links
  (seccomp), the `fcntl` commands by which the kernel signals another process
  (seccomp's rules), writes, removals and changes of metadata outside its
  folder (Landlock for writes and removals; seccomp, which has no call for any
  change of metadata, for the rest), native code of its own (the noexec tmpfs:
  a library it writes cannot be mapped as code; seccomp: no memory made
  executable). What only the hook refuses keeps the hook itself whole, or keeps
  native code out, which the kernel layers hold without it: environment changes
  (a variable can steer a native library: OpenSSL's configuration),
  subinterpreters, tracing (`sys.settrace`, `setprofile` and their all-threads
  forms; `sys.monitoring`, which is not audited, is taken out, and so is
  `signal.signal`: Python runs a handler in whatever frame is running, the
  hook's among them), hand-made code objects (`marshal`, `code.__new__`), the
  collector's lists of objects, another audit hook. Imports: a name must be a
  plain dotted identifier (the C loader reads a name only up to a NUL, so
  `_ctypes` with a NUL after it was `_ctypes`), the modules of `harness.BANNED`
  (`ctypes`, `_posixsubprocess`, ...) are refused by any name, also where the
  interpreter has one built in (Debian's `python3` has `_posixsubprocess`), and
  `_imp.create_dynamic` loads only the interpreter's own extension modules, each
  by its own name and file (`harness.native_modules`), never a library the code
  wrote. The ways out it would not see (`os.mkfifo`, `os.mknod`, `os.chroot`,
  `os.setsid` and its kin, priorities, pidfd signals) are taken out of the
  modules. The hook itself: it checks every value's exact type (`type(x) is
  int`, never `isinstance`, which asks the object's `__class__`), so no method
  of the code's objects runs in it, not even for events the code raises itself
  (`sys.audit`); its state is its default arguments, bound when it is made,
  all immutable (a traceback hands out its frame, and from Python 3.13, PEP
  667, writing a frame's locals writes through to closure cells: its state was
  in cells, and an emptied set let `ctypes` load); it reads no global name; and
  no code of the code's runs while its frame does: no signal handler, no
  `sys.monitoring` callback, and from 3.13 no finalizer (the collector runs at
  a function's start, in its frame, and a finalizer rebound the hook's locals
  there: it runs only when the code calls `gc.collect()`).
- identity: never real root, so root's private files, root's devices (a raw
  disk, through which any user's files could be read) and other users' private
  files are out of reach, even where the interpreter lives in a folder others
  cannot enter (`/root/.pyenv`, say).
- The pid namespace: it sees only itself, in its own `/proc`; it cannot signal
  the trainer; a process it starts dies with it; and nothing is left for a
  trainer that is process 1 of a container to reap.
- The network namespace: a loopback of its own, so not the network, nor the
  trainer's loopback.
- The IPC namespace: shared memory and message queues it makes die with it.
- The mount namespace and its tmpfs: its folder is a private tmpfs over `/tmp`,
  1 MiB in all (not per file), mounted `noexec` (a library it writes there
  cannot be mapped as code, so it does not load); the host's `/tmp` is out of
  sight; its mount tables (`/proc/self/mountinfo` and kin) read empty, and
  the calls that list mounts (listmount, statmount) are refused by seccomp.
- No capabilities, and none to gain: it cannot raise its limits, nor pass over
  a file's mode.
- Landlock: writes only beneath its folder, and reads only there and in what
  Python needs, so not the home or `.env` files of the trainer's user, which
  its uid may read; no TCP (Landlock ABI 4, Linux 6.7) and no signals out
  (ABI 6, Linux 6.12): before those, the namespaces and seccomp keep it in.
- seccomp (x86-64), two filters. `seccomp.SECCOMP` is an allow-list: the
  system calls the interpreter needs to run the harness and honest code, in
  one table with the reason for each group (`seccomp.ALLOWED`, 80 calls,
  measured on Python 3.11, 3.12 and 3.13 by tests/bench/sandbox_syscalls.py),
  and EPERM for every other, among them every call the kernel gains after the
  table was written. So no fork (clone only makes a thread), no signals to any
  process, no sockets, mounts, namespaces, ptrace, io_uring, bpf, keys,
  memfd_create, personality, chdir, no change of a file's metadata (chmod,
  chown, utimes, xattrs, file_setattr: Landlock has no say over them), no
  watches (inotify, fanotify), no listing of mounts. Its argument rules: only
  the `fcntl` and `ioctl` commands listed (none by which the kernel signals
  another process, or sets a file's flags), and no memory that could hold code
  written at run time: no mapping both executable and writable, or executable
  and shared, no mprotect to executable, no mremap with old size 0 or
  MREMAP_DONTUNMAP (each leaves a second view of the same pages, which the
  review wrote through and ran from). `seccomp.EXEC_FILTER`: exactly one
  execve passes, the interpreter's own, let through by the call's first
  process, which refuses every later one, from Python or native code (EPERM).
  With the noexec tmpfs, native code the child gets (through `ctypes`, where the
  hook is off) can call only what the table allows: it cannot exec, fork, map a
  file of its own or make memory of its own executable.

It fails closed
---------------
A code task's `preflight()` (run by the command line before training, and by
`mathrl.testing.check_adapter`) sets up one child and checks that every layer
is there. If one is missing it raises `sandbox.SandboxUnavailable`, one line
naming what is missing and how to get it, and nothing trains. A layer that
fails later, during a run, stops that reward call with `sandbox.SandboxError`,
which ends the run. Both carry `allowed_by`: the option that would run anyway,
which the command line names in its one line, before a run or during one
(`rewards.TaskError.allowed_by`).
The line names the step that failed, not a guess: a refused `prctl` as
seccomp's (no filter can be installed without it), a `mount` refused in a mount
namespace that was made as mount's (not as user namespaces being off), an
interpreter under `/tmp` as hidden by the tmpfs (install it elsewhere).

What it needs: Linux 5.13 or later with Landlock enabled (`landlock` in the
`lsm=` boot parameter; Debian 12's and Ubuntu's kernels have it), an x86-64
machine (for the seccomp filters), root or unprivileged user namespaces, and an
interpreter outside `/tmp`. In a container, the container must allow `unshare`,
`mount` and `prctl` (Docker's default profile refuses the first two). The
allow-list was measured on CPython 3.11 (pyenv's and Debian's), 3.12 and 3.13
with glibc: another interpreter or C library may need a call it lacks, which
`python tests/bench/sandbox_syscalls.py PYTHON` names.

A task built with `allow_missing_layers=True` (as
`CodeAdapter(allow_missing_layers=True)`; `CodeFeedbackAdapter` alike) runs with
the layers the machine can set up instead, and its `preflight()` returns a
warning that names what is missing, e.g. `warning: sandbox without landlock
(missing layers allowed): uid 65534, pid+net+ipc+mount namespaces, tmpfs 1 MiB,
no capabilities, seccomp x86-64`. The option is the task's own: it holds for
every sandbox that task's calls use, fresh or started ahead, and for no other
task in the process. What each missing layer gives up:

- identity: a root trainer's child is root without capabilities, and reads
  root's files (without Landlock, writes them too);
- pid: it sees every process on the host with its command line and the host's
  mount table, and a process it starts may outlive it; and there is no first
  process to let the interpreter's exec through, so there is no exec filter
  either (seccomp is reported missing too): exec stays open to native code;
- net: only the hook and seccomp stand between it and the network;
- ipc: shared memory it makes could outlive it;
- tmpfs: the size cap is per file, not in total, its folder is in the
  system's temp folder, and a library it writes there maps as code (the hook
  still refuses to load it; without the hook, `ctypes` loads it). An
  interpreter under `/tmp`, which the tmpfs would hide, counts as the tmpfs
  missing, and names itself;
- Landlock: it reads whatever its uid may (a non-root trainer's own files among
  them), and only the audit hook holds its writes in, which a descriptor race
  gets past;
- seccomp (any machine but x86-64, or where prctl is refused): only the hook
  stands between the code and fork, exec, signals and raw sockets, and the hook
  holds Python's ways out only: native code, from a bug in CPython or a gap in
  the hook, gets past it (the namespaces, Landlock and the limits still hold).

What the preflight line says: every layer the child got, e.g. `sandbox: uid
65534, pid+net+ipc+mount namespaces, tmpfs 1 MiB, no capabilities, Landlock ABI
7, seccomp x86-64` (as an unprivileged user, `sandbox: user+pid+net+ipc+mount
namespaces, ...`). The command line prints it and keeps it in the run folder.

What it does not isolate
------------------------
- Reads of the system folders and the interpreter's installation, and what the
  kernel tells any process of the machine (its release, uptime, load and
  memory: uname, sysinfo, /proc): the code can return what it read as a
  result, or put it in an error message, so a caller compares results and
  never logs them or the outcome's detail raw.
- Honest code that needs more than the table allows fails (a PermissionError):
  `shutil.copy`, which copies a file's mode (`shutil.copyfile` works), an
  `os` function given a `pathlib.Path`, whose path the object says itself,
  `signal.signal`, `gc.enable` (from 3.13; `gc.collect()` still collects),
  sockets, threads beyond the limits.
- CPU cores and memory bandwidth, which it shares with the trainer.
- The kernel itself, whose bugs no sandbox can fix.
- Memory, for the length of a fresh call: its first process is a copy-on-write
  fork of the trainer, so a trainer that rewrites much of its memory meanwhile
  pays for the copies. A sandbox started ahead waits in a small interpreter of
  its own instead (`kernel.WAITER`).

What it costs
-------------
The code task keeps each distinct completion's outcome (`task.run`), so a
reward and its feedback run it once: at most 8,192 outcomes and 32 MiB of them
as `task.outcome_bytes` counts them (what Python holds for each, containers
included: 8,064 bytes of JSON can hold 1.16 MB as lists of empty dicts), least
recently used dropped first, however large a completion's results.

Starting a sandbox is most of a call's cost; the call itself is a few
milliseconds. So a call on a worker pool's thread takes a sandbox the pool
started while the loop waited on the service (`sandbox.Warm`, up to
`sandbox.WARM_SANDBOXES`, 32). Each waiting one holds about 8 MB: a fake run of
the code task at 32 x 8 peaked at 302 MB for its whole process tree, against 52
MB with none started ahead; and what the trainer writes meanwhile is not kept
twice (a 300 MB heap rewritten while 32 waited: 0 MB more, against 354 MB when
they waited as copies of the trainer). A pool that cannot start one, or whose
sandbox started ahead ends before its call, says so once, with the cause (one
line on stderr: the loader's error, the layer the set-up lacked, the signal
that killed it; `Warm.failure`), and starts none ahead any more: each call
starts its own. (A relocatable interpreter, whose libpython its loader finds
through $ORIGIN, left the pool starting sandboxes that exited 127, again and
again: its waiting process, outside the pid namespace, cannot read
/proc/self/exe. Its loader is told the folder now, and they serve.)

Milliseconds a call, a one-line `f` on 8 inputs, 40 calls
(`PYTHONPATH=tests python -c "import bench.bench_rewards as b;
print(b.sandbox_costs(2), b.warm_cost())"`), on two 2-core machines, idle: the
project's first / the slower one it runs on now (as uid 65534 there: Debian's
Python). Under a load average of 4-5 the first took up to 1.5 times as long.

    sandbox                                        alone            2 in flight
    a bare `python -I -S -B -c pass`, to compare   10 / 18          -
    the audit hook alone (no kernel layers)        31 / 49-56       16 / 25-28
    every layer, as root                           38-42 / 55-72    22 / 31-40
    every layer, as uid 65534 (a user namespace)   46-47 / 58-62    -
    a call in a sandbox started ahead              4.5-7 / 6.5-11.5 -

What the layers against native code and exec cost: the exec filter's hand-off
and the hidden mount tables about 1 ms each, the hook's list of native modules
0.4 ms; nothing for a call in a sandbox started ahead. They are paid for: the
child runs the harness as the trainer compiled it (`harness.BOOT`) instead of
compiling it (3-4 ms), and the exec filter is installed before the last steps
of the set-up, so the first process is already waiting when the interpreter's
exec comes. A call costs no more than it did without them: fresh alone 68.7
-> 68.9 ms, started ahead 8.2 -> 8.0 ms (`python tests/bench/sandbox_ab.py
BEFORE AFTER`, two checkouts' calls interleaved one by one in one process, the
medians of 150 and 256 calls, on the slower machine; the layers without what
pays for them: 73.8 ms fresh). The command above, run for each in turn, moves
by 10% from run to run; its medians of 8 runs: alone 67.5 -> 65.8, 2 in flight
35.5 -> 37.2, started ahead 9.1 -> 9.4.

The allow-list, the hook's exact checks and its state in defaults (issue 37) cost
nothing either: against the tree before them (fc37bdc), interleaved as above
under a load average of 8-10 (other work on the machine), fresh alone 38.94 ->
38.88 ms and started ahead 3.82 -> 3.80 ms (150 and 256 calls), and 34.21 ->
33.83 and 3.92 -> 3.91 (150 and 1,024). The kernel caches seccomp's verdict for
a call whose arguments it does not read (Linux 5.11), so the table's length
costs nothing after a call's first use. Two first tries cost more, and were
changed: the hook's state as keyword-only defaults (a dict lookup each on every
audit event: started ahead +18%), and a waiting process that held the call's
stderr open to its end (started ahead -25% to +18% from run to run).

Why built by hand, not bubblewrap or WebAssembly: the same start inside `bwrap
--unshare-all --die-with-parent --uid 65534 --gid 65534`, with read-only binds
of the system and the interpreter, `--proc`, `--dev` and a 1 MiB tmpfs, took
18 ms, so its namespaces cost about what these do. But run as root it maps the
child's uid 65534 to real uid 0 outside (the child read a root-only `0600` file
bound into it), so it is not "never real root" unless started as another user,
who then cannot reach an interpreter under `/root` either; it still needs the
seccomp filter and Landlock from us; and it is a system package that neither
this machine nor CI has by default. A WASI build of CPython under `wasmtime`
would isolate by construction, but none installs from PyPI, its standard
library must be mapped in, and it cannot run the host's C extension modules.
The kernel layers are under 500 lines (`kernel.py`), each step checked.
"""

from mathrl.tasks.code.task import CodeAdapter, CodeProblem

__all__ = ["CodeAdapter", "CodeProblem"]
