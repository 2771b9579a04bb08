"""Native thread pool for parallel loops, generated as LLVM IR with llvmlite.

Compiled kernels call one function (the ABI is fixed, other modules rely on it)::

    void lw_parallel_for(void (*body)(i64 begin, i64 end, i8* closure),
                         i8* closure, i64 n)

It runs ``body`` over ``[0, n)`` with ``T = min(num_threads, n)`` threads
(the caller and ``T - 1`` workers) sharing the work dynamically: the range is
cut into ``P = min(n, T * PIECES_PER_THREAD)`` contiguous pieces whose sizes
differ by at most one, and every participant repeatedly claims the next
unclaimed piece and runs ``body(begin, end, closure)`` on it until none is
left, so a thread that is slow (descheduled by the host, say) leaves its
share to the others. The call returns when all pieces are done. ``n <= 0``
returns at once. ``T <= 1``, or a call made while another launch is running
(nested call from a body, or a second OS thread calling compiled code), runs
``body(0, n, closure)`` on the calling thread.
``lw_set_num_threads(i32)`` / ``lw_get_num_threads()`` are exported too.

Python side: ``install()`` compiles the pool once (MCJIT, host CPU name and
features) and registers these symbols with ``llvm.add_symbol``, so call it
before compiling modules that declare them; ``parallel_for_address()``,
``set_num_threads(n)`` and ``get_num_threads()`` (default: the CPUs in the
affinity mask) install it on demand.

Protocol
--------
All state is in module globals, each on its own 64-byte cache line:

``lock``
    try-lock of the pool, holds the pid of the launching process (0 = free).
``job``
    body, closure, and ``n / P``, ``n % P`` (the piece sizes) of the launch.
``claim``
    i64: ``P << 32 | next``; piece ``next`` is the next one to hand out.
``left`` / ``caller_sleeping``
    pieces not finished yet (the launcher's futex word).
``slots[i]`` (worker i = 1 .. MAX_THREADS-1)
    ``ticket`` (the worker's futex word) and ``sleeping``.
``num_workers`` / ``owner_pid``
    workers created so far, and the process that created them.
``caller_cpu``
    the CPU the launching thread ran on when it published the last job (a hint,
    monotonic): a woken worker that finds itself on that CPU moves to the others it may
    use (``sched_setaffinity``; see ``_leave_callers_cpu``), since a guest kernel
    does not wake threads onto a vCPU the host has taken away.

A launch (by the caller):

1. ``T = min(num_threads, n)``; if ``T <= 1`` or ``cmpxchg(lock, 0, pid)``
   fails, run serially. A lock value of another pid is stale (inherited
   through ``fork`` from a launch in progress) and is taken over.
2. If ``getpid() != owner_pid`` (a forked child: the workers do not exist
   here) forget the workers. Create the missing ones (``pthread_create``,
   lazily, all signals blocked in them); ``T`` shrinks if that fails.
3. Write ``job`` (plain stores) and ``left = P`` (monotonic), then
   ``claim = P << 32`` (release: a claim that reads it, or a later claim,
   sees the job), then for each worker ``i < T``: ``ticket[i] += 1``
   (seq_cst), and ``futex_wake(&ticket[i])`` if ``sleeping[i]``.
4. Claim and run pieces (below), counting them in a register; then
   ``left -= mine`` (acq_rel); while ``left != 0`` wait for it to change
   (acquire: the workers' writes are visible). Release the lock.

Claiming: ``old = fetch_add(claim, 1)`` (acquire); if ``low32(old) <
high32(old)`` piece ``low32(old)`` is ours (bounds from ``job``: the first
``n % P`` pieces get one extra iteration), else the launch has no pieces
left and the participant stops claiming. The counter only grows past ``P``
by one failed claim per participant, far from carrying into the high half.

A worker loops: wait until ``ticket != seen``; claim and run pieces, after
each ``left -= 1`` (seq_cst); the one that makes it 0 wakes the caller if
``caller_sleeping``. A worker reads ``job`` only while it holds an unfinished
piece, and the launch cannot end (so the next launch cannot rewrite ``job``)
before that piece is counted: when the caller returns no worker runs a piece
of its launch or reads its job. A late worker (woken for a launch that the
others have already finished) only makes a failed claim on the exhausted
counter, or, if its claim lands after the next launch published ``claim``,
takes part in that launch, which is equally correct: its claim acquired the
new job, and ``left`` counts its piece.

Waiting is spin, then yield, then sleep: poll the word with ``pause`` for
SPIN_NS (back-to-back launches never enter the kernel), calling
``sched_yield`` between polling rounds after the first, then set
``sleeping = 1`` (seq_cst), re-check the word (seq_cst) and
``futex_wait(word, expected)``. The notifier changes the word (seq_cst)
before it reads ``sleeping`` (seq_cst), so either it sees the sleeper and
wakes it, or the sleeper sees the new value (Dekker); ``futex_wait`` itself
returns at once if the word changed in between. A late or spurious wake is
harmless: every waiter re-checks its word. Each futex word has one waiter.
"""

import ctypes
import hashlib
import os
import platform
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...target import host_target
from ..disk_cache import read_verified, writable_cache_dir, write_checksummed

__all__ = [
    "MAX_THREADS",
    "PIECES_PER_THREAD",
    "SPIN_NS",
    "get_num_threads",
    "install",
    "parallel_for_address",
    "set_num_threads",
]

MAX_THREADS = 1024
"""Most threads (caller included) a launch can use."""

PIECES_PER_THREAD = 4
"""Pieces per thread of a parallel launch (never more pieces than iterations).

One piece per thread makes a launch as slow as its slowest thread; more lets
the others take over the pieces a descheduled or busy thread has not claimed,
at the cost of one atomic claim per piece and smaller pieces. Measured on a
2-vCPU VM, 2 threads: empty-body launch (benchmarks.parallel_launch,
native loop) 0.13 / 0.27 / 0.40 / 0.59 / 1.37 us for 1 / 2 / 4 / 8 / 16; a
3.3 ms (single-thread) compute loop with the worker pinned to a CPU shared
with a busy process: median 3.33 / 3.2-3.3 / 2.9 / 2.95 / 2.9 ms, with no
loss when the CPUs are idle (1.66 ms for all). 4 is where the gain levels off,
and costs about what a launch did with static chunks (0.42-0.45 us)."""

SPIN_NS = 500_000
"""How long an idle waiter polls (then polls and yields) before it sleeps.

Measured on a 2-vCPU VM: a launch to spinning workers costs ~0.5 us, one
that must futex-wake a sleeping worker ~35-50 us in a micro-benchmark, but far
more inside a network, where the woken vCPU is often descheduled by the host:
ResNet-18 with 2 threads ran in 37 ms with a 50 us spin and 23 ms with 500 us
(onnxruntime, which spins too, 18 ms); 2 ms gained nothing more. Between the
kernels of a network, and between the loops of one kernel, the gap is usually
under 500 us, so the pool stays on the fast path there; an idle pool still stops
using CPU half a millisecond after its last launch."""

POLLS_PER_CLOCK_CHECK = 64
"""Polls of the watched word (with a pause each) between clock reads."""

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT_PRIVATE = 0 | 128
_FUTEX_WAKE_PRIVATE = 1 | 128
_CLOCK_MONOTONIC = 1
_SIG_SETMASK = 2
_SIGSET_WORDS = 16  # sizeof(sigset_t) == 128 on Linux
_CPU_SET_WORDS = 16  # sizeof(cpu_set_t) == 128 on Linux: CPUs 0..1023
_CACHE_LINE = 64

_VOID = ir.VoidType()
_I1 = ir.IntType(1)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()
BODY_TYPE = ir.FunctionType(_VOID, [_I64, _I64, _PTR])
"""``void body(i64 begin, i64 end, i8* closure)``."""
PARALLEL_FOR_TYPE = ir.FunctionType(_VOID, [BODY_TYPE.as_pointer(), _PTR, _I64])
"""Type of ``lw_parallel_for``; declare it with this type in kernels."""

_SLOT_TYPE = ir.LiteralStructType([_I32, _I32, ir.ArrayType(_I32, 14)])
_TICKET, _SLEEPING = 0, 1
_JOB_TYPE = ir.LiteralStructType([BODY_TYPE.as_pointer(), _PTR, _I64, _I64])
_BODY, _CLOSURE, _QUOTIENT, _REMAINDER = 0, 1, 2, 3


def _i32(value):
    return ir.Constant(_I32, value)


def _i64(value):
    return ir.Constant(_I64, value)


class _PoolModuleBuilder:
    """Builds the LLVM module of the pool, one IR function per method."""

    def __init__(self, machine=None, triple=None):
        self.machine = (machine or platform.machine()).lower()
        if self.machine not in _SYS_FUTEX:
            raise RuntimeError(
                f"loopweave thread pool: unsupported machine {self.machine!r} "
                "(needs Linux x86_64 or aarch64 for futex)")
        self.module = ir.Module(name="loopweave_thread_pool")
        self.module.triple = triple or llvm.get_process_triple()
        self._declare_libc()
        self._define_globals()
        self.now_ns = self._define_now_ns()
        self.futex_wait = self._define_futex("lw_pool_futex_wait", _FUTEX_WAIT_PRIVATE)
        self.futex_wake = self._define_futex("lw_pool_futex_wake", _FUTEX_WAKE_PRIVATE)
        self.wait_change = self._define_wait_change()
        self.worker_main = self._define_worker_main()
        self.ensure_workers = self._define_ensure_workers()
        self.try_lock = self._define_try_lock()
        self._define_parallel_for()
        self._define_num_threads_accessors()

    # -- declarations -------------------------------------------------------

    def _declare(self, name, ret, args, var_arg=False):
        fnty = ir.FunctionType(ret, args, var_arg=var_arg)
        return ir.Function(self.module, fnty, name=name)

    def _declare_libc(self):
        start_routine = ir.FunctionType(_PTR, [_PTR]).as_pointer()
        self.syscall = self._declare("syscall", _I64, [_I64], var_arg=True)
        self.getpid = self._declare("getpid", _I32, [])
        self.sched_yield = self._declare("sched_yield", _I32, [])
        self.clock_gettime = self._declare("clock_gettime", _I32, [_I32, _PTR])
        self.pthread_create = self._declare(
            "pthread_create", _I32, [_I64.as_pointer(), _PTR, start_routine, _PTR])
        self.pthread_detach = self._declare("pthread_detach", _I32, [_I64])
        self.pthread_sigmask = self._declare("pthread_sigmask", _I32, [_I32, _PTR, _PTR])
        self.sigfillset = self._declare("sigfillset", _I32, [_PTR])
        self.sched_getcpu = self._declare("sched_getcpu", _I32, [])
        self.sched_getaffinity = self._declare("sched_getaffinity", _I32, [_I32, _I64, _PTR])
        self.sched_setaffinity = self._declare("sched_setaffinity", _I32, [_I32, _I64, _PTR])

    def _global(self, name, typ, initial=None):
        """A global on cache lines of its own. External linkage on purpose:
        it keeps GlobalOpt from splitting ``job`` into fields with smaller
        alignment that could share a line with another global."""
        var = ir.GlobalVariable(self.module, typ, name=name)
        var.align = _CACHE_LINE
        var.initializer = ir.Constant(typ, initial)
        return var

    def _define_globals(self):
        self.lock = self._global("lw_pool_lock", _I32, 0)
        self.num_threads = self._global("lw_pool_num_threads", _I32, 1)
        self.num_workers = self._global("lw_pool_num_workers", _I64, 0)
        self.owner_pid = self._global("lw_pool_owner_pid", _I32, 0)
        self.job = self._global("lw_pool_job", _JOB_TYPE)
        self.claim = self._global("lw_pool_claim", _I64, 0)
        self.left = self._global("lw_pool_left", _I32, 0)
        self.caller_sleeping = self._global("lw_pool_caller_sleeping", _I32, 0)
        self.caller_cpu = self._global("lw_pool_caller_cpu", _I32, -1)
        self.slots = self._global("lw_pool_slots", ir.ArrayType(_SLOT_TYPE, MAX_THREADS))

    def _function(self, name, ret, args, exported=False):
        fn = self._declare(name, ret, args)
        if not exported:
            fn.linkage = "internal"
        fn.attributes.add("nounwind")
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    # -- small emitters -----------------------------------------------------

    def _cpu_relax(self, b):
        """Spin-loop hint: ``pause`` on x86, ``yield`` on arm (intrinsics, so
        no inline-asm parser is needed)."""
        if self.machine in ("x86_64", "amd64"):
            b.call(self._intrinsic("llvm.x86.sse2.pause", []), [])
        else:
            b.call(self._intrinsic("llvm.aarch64.hint", [_I32]), [_i32(1)])

    def _intrinsic(self, name, args):
        if name in self.module.globals:
            return self.module.globals[name]
        return self._declare(name, _VOID, args)

    @staticmethod
    def _job_field(b, job, field):
        return b.gep(job, [_i32(0), _i32(field)], inbounds=True)

    def _slot_field(self, b, index, field):
        return b.gep(self.slots, [_i32(0), index, _i32(field)], inbounds=True)

    @staticmethod
    def _piece_bounds(b, quotient, remainder, index):
        """Piece ``index`` over [0, n), pieces of ``quotient = n / P``
        iterations, the first ``remainder = n % P`` of them one more."""
        gets_extra = b.icmp_unsigned("<", index, remainder)
        begin = b.add(b.mul(index, quotient), b.select(gets_extra, index, remainder))
        return begin, b.add(begin, b.add(quotient, b.zext(gets_extra, _I64)))

    def _claim_loop(self, fn, b, run_piece):
        """Emits ``while ((piece = claim()) != none) run_piece(b, piece);``
        (``run_piece`` may add blocks) and returns how many pieces it ran
        (i32), with ``b`` positioned after the loop."""
        before = b.block
        claim = fn.append_basic_block("claim")
        run = fn.append_basic_block("run_piece")
        exhausted = fn.append_basic_block("no_pieces_left")
        b.branch(claim)

        b.position_at_end(claim)
        ran = b.phi(_I32, "pieces_ran")
        ran.add_incoming(_i32(0), before)
        old = b.atomic_rmw("add", self.claim, _i64(1), "acquire")
        index = b.and_(old, _i64(0xFFFF_FFFF))
        pieces = b.lshr(old, _i64(32))
        b.cbranch(b.icmp_unsigned("<", index, pieces), run, exhausted)

        b.position_at_end(run)
        run_piece(b, index)
        ran.add_incoming(b.add(ran, _i32(1)), b.block)
        b.branch(claim)
        b.position_at_end(exhausted)
        return ran

    def _notify(self, b, word, sleeping):
        """After changing ``word`` (seq_cst): wake its waiter if it sleeps."""
        asleep = b.load_atomic(sleeping, "seq_cst", 4)
        with b.if_then(b.icmp_unsigned("!=", asleep, _i32(0)), likely=False):
            b.call(self.futex_wake, [word, _i32(1)])  # one waiter per word

    # -- functions ----------------------------------------------------------

    def _define_now_ns(self):
        fn, b = self._function("lw_pool_now_ns", _I64, [])
        timespec = b.alloca(ir.ArrayType(_I64, 2))
        b.call(self.clock_gettime, [_i32(_CLOCK_MONOTONIC), b.bitcast(timespec, _PTR)])
        seconds = b.load(b.gep(timespec, [_i32(0), _i32(0)]))
        nanoseconds = b.load(b.gep(timespec, [_i32(0), _i32(1)]))
        b.ret(b.add(b.mul(seconds, _i64(1_000_000_000)), nanoseconds))
        return fn

    def _define_futex(self, name, op):
        """``void name(i32* word, i32 value)``: ``futex(word, op, value, NULL)``
        (value: the expected word for WAIT, how many to wake for WAKE).
        Errors (EAGAIN, EINTR) are fine: callers re-check the word."""
        fn, b = self._function(name, _VOID, [_I32.as_pointer(), _I32])
        word, value = fn.args
        b.call(self.syscall, [_i64(_SYS_FUTEX[self.machine]), word, _i64(op),
                              b.zext(value, _I64), ir.Constant(_PTR, None)])
        b.ret_void()
        return fn

    def _define_wait_change(self):
        """``i32 wait_change(i32* word, i32 expected, i32* sleeping)``: returns
        the first value of ``word`` seen different from ``expected``
        (acquire); spins, then yields, then sleeps on the futex."""
        fn, b = self._function("lw_pool_wait_change", _I32,
                               [_I32.as_pointer(), _I32, _I32.as_pointer()])
        word, expected, sleeping = fn.args
        entry = b.block
        round_start = fn.append_basic_block("round")
        poll = fn.append_basic_block("poll")
        poll_next = fn.append_basic_block("poll_next")
        clock = fn.append_basic_block("clock")
        yield_cpu = fn.append_basic_block("yield")
        sleep = fn.append_basic_block("sleep")
        futex = fn.append_basic_block("futex")
        woke = fn.append_basic_block("woke")
        changed = fn.append_basic_block("changed")
        b.branch(round_start)

        b.position_at_end(round_start)
        deadline = b.phi(_I64, "deadline")  # 0 until the first clock read
        deadline.add_incoming(_i64(0), entry)
        b.branch(poll)

        b.position_at_end(poll)
        polls = b.phi(_I64, "polls")
        polls.add_incoming(_i64(0), round_start)
        value = b.load_atomic(word, "acquire", 4)
        b.cbranch(b.icmp_unsigned("!=", value, expected), changed, poll_next)

        b.position_at_end(poll_next)
        self._cpu_relax(b)
        polls_next = b.add(polls, _i64(1))
        polls.add_incoming(polls_next, poll_next)
        b.cbranch(b.icmp_unsigned("<", polls_next, _i64(POLLS_PER_CLOCK_CHECK)), poll, clock)

        b.position_at_end(clock)
        now = b.call(self.now_ns, [])
        first_round = b.icmp_unsigned("==", deadline, _i64(0))
        b.cbranch(b.and_(b.not_(first_round), b.icmp_signed(">=", now, deadline)),
                  sleep, yield_cpu)

        b.position_at_end(yield_cpu)
        with b.if_then(b.not_(first_round)):
            b.call(self.sched_yield, [])
        deadline.add_incoming(
            b.select(first_round, b.add(now, _i64(SPIN_NS)), deadline), b.block)
        b.branch(round_start)

        b.position_at_end(sleep)
        b.store_atomic(_i32(1), sleeping, "seq_cst", 4)
        recheck = b.load_atomic(word, "seq_cst", 4)
        b.cbranch(b.icmp_unsigned("!=", recheck, expected), woke, futex)

        b.position_at_end(futex)
        b.call(self.futex_wait, [word, expected])
        b.branch(sleep)

        b.position_at_end(woke)
        b.store_atomic(_i32(0), sleeping, "release", 4)
        b.ret(recheck)

        b.position_at_end(changed)
        b.ret(value)
        fn.attributes.add("noinline")
        return fn

    def _leave_callers_cpu(self, fn, b, allowed):
        """If this worker runs on the CPU of the launching thread, move it to the others it may
        use (``allowed``, its affinity at start): one ``sched_setaffinity``, only on a collision.

        Why: a guest kernel does not wake a thread onto an idle vCPU that the host has taken
        away (``vcpu_is_preempted``), so a worker woken after a pause often lands on the
        caller's CPU, and the two share it until the load balancer moves one, several
        milliseconds later. On the 2-vCPU VM, 108 calls of a 60 us 1x1 conv after a 0.3 s pause
        ran at one thread's speed (110 us) in 20-22 of 30 rounds, and in 1-3 of 30 with this."""
        mine = b.call(self.sched_getcpu, [])
        callers = b.load_atomic(self.caller_cpu, "monotonic", 4)
        valid = b.icmp_signed(">=", callers, _i32(0))
        in_range = b.icmp_signed("<", callers, _i32(_CPU_SET_WORDS * 64))
        collide = b.and_(b.and_(valid, in_range), b.icmp_signed("==", mine, callers))
        with b.if_then(collide, likely=False):
            others = b.alloca(ir.ArrayType(_I64, _CPU_SET_WORDS))
            word_index = b.zext(b.lshr(callers, _i32(6)), _I64)
            bit = b.shl(_i64(1), b.zext(b.and_(callers, _i32(63)), _I64))
            any_other = _i64(0)
            for k in range(_CPU_SET_WORDS):
                word = b.load(b.gep(allowed, [_i32(0), _i32(k)]))
                word = b.select(b.icmp_unsigned("==", word_index, _i64(k)), b.and_(word, b.not_(bit)), word)
                b.store(word, b.gep(others, [_i32(0), _i32(k)]))
                any_other = b.or_(any_other, word)
            with b.if_then(b.icmp_unsigned("!=", any_other, _i64(0))):
                b.call(self.sched_setaffinity, [_i32(0), _i64(_CPU_SET_WORDS * 8), b.bitcast(others, _PTR)])

    def _define_worker_main(self):
        """``i8* worker_main(i8* index)``: the loop of worker ``index``."""
        fn, b = self._function("lw_pool_worker_main", _PTR, [_PTR])
        index = b.ptrtoint(fn.args[0], _I64)
        ticket = self._slot_field(b, index, _TICKET)
        sleeping = self._slot_field(b, index, _SLEEPING)
        allowed = b.alloca(ir.ArrayType(_I64, _CPU_SET_WORDS))
        b.store(ir.Constant(ir.ArrayType(_I64, _CPU_SET_WORDS), None), allowed)
        b.call(self.sched_getaffinity, [_i32(0), _i64(_CPU_SET_WORDS * 8), b.bitcast(allowed, _PTR)])
        entry = b.block
        loop = fn.append_basic_block("loop")
        b.branch(loop)

        b.position_at_end(loop)
        seen = b.phi(_I32, "seen")
        seen.add_incoming(_i32(0), entry)
        new_ticket = b.call(self.wait_change, [ticket, seen, sleeping])
        self._leave_callers_cpu(fn, b, allowed)

        def run_piece(b, piece):
            # plain loads: this piece keeps the launch (and its job) alive
            body = b.load(self._job_field(b, self.job, _BODY))
            closure = b.load(self._job_field(b, self.job, _CLOSURE))
            quotient = b.load(self._job_field(b, self.job, _QUOTIENT))
            remainder = b.load(self._job_field(b, self.job, _REMAINDER))
            begin, end = self._piece_bounds(b, quotient, remainder, piece)
            b.call(body, [begin, end, closure])
            left_before = b.atomic_rmw("sub", self.left, _i32(1), "seq_cst")
            with b.if_then(b.icmp_unsigned("==", left_before, _i32(1))):
                self._notify(b, self.left, self.caller_sleeping)

        self._claim_loop(fn, b, run_piece)
        seen.add_incoming(new_ticket, b.block)
        b.branch(loop)
        return fn

    def _define_ensure_workers(self):
        """``i64 ensure_workers(i64 wanted, i32 pid)`` (lock held): forget the
        workers of another process, create workers 1..wanted that are missing,
        return how many exist (fewer if pthread_create fails)."""
        fn, b = self._function("lw_pool_ensure_workers", _I64, [_I64, _I32])
        wanted, pid = fn.args
        thread_id = b.alloca(_I64)
        all_signals = b.bitcast(b.alloca(ir.ArrayType(_I64, _SIGSET_WORDS)), _PTR)
        old_signals = b.bitcast(b.alloca(ir.ArrayType(_I64, _SIGSET_WORDS)), _PTR)
        with b.if_then(b.icmp_unsigned("!=", b.load(self.owner_pid), pid), likely=False):
            b.store(_i64(0), self.num_workers)
            b.store(pid, self.owner_pid)
        check = fn.append_basic_block("check")
        create = fn.append_basic_block("create")
        created = fn.append_basic_block("created")
        done = fn.append_basic_block("done")
        b.branch(check)

        b.position_at_end(check)
        count = b.load(self.num_workers)
        b.cbranch(b.icmp_unsigned(">=", count, wanted), done, create)

        b.position_at_end(create)
        index = b.add(count, _i64(1))  # the caller is participant 0
        b.store(_i32(0), self._slot_field(b, index, _TICKET))
        b.store(_i32(0), self._slot_field(b, index, _SLEEPING))
        b.call(self.sigfillset, [all_signals])
        b.call(self.pthread_sigmask, [_i32(_SIG_SETMASK), all_signals, old_signals])
        status = b.call(self.pthread_create, [
            thread_id, ir.Constant(_PTR, None), self.worker_main, b.inttoptr(index, _PTR)])
        b.call(self.pthread_sigmask, [_i32(_SIG_SETMASK), old_signals, ir.Constant(_PTR, None)])
        b.cbranch(b.icmp_unsigned("==", status, _i32(0)), created, done)

        b.position_at_end(created)
        b.call(self.pthread_detach, [b.load(thread_id)])
        b.store(index, self.num_workers)
        b.branch(check)

        b.position_at_end(done)
        b.ret(b.load(self.num_workers))
        return fn

    def _define_try_lock(self):
        """``i1 try_lock(i32 pid)``: take the free lock, or a stale one that a
        launch in another process held when this one was forked."""
        fn, b = self._function("lw_pool_try_lock", _I1, [_I32])
        (pid,) = fn.args
        first = b.cmpxchg(self.lock, _i32(0), pid, "acquire", "monotonic")
        with b.if_then(b.extract_value(first, 1), likely=True):
            b.ret(ir.Constant(_I1, 1))
        holder = b.extract_value(first, 0)
        with b.if_then(b.icmp_unsigned("==", holder, pid), likely=True):
            b.ret(ir.Constant(_I1, 0))  # busy in this process
        stolen = b.cmpxchg(self.lock, holder, pid, "acquire", "monotonic")
        b.ret(b.extract_value(stolen, 1))
        return fn

    def _define_parallel_for(self):
        fn, b = self._function("lw_parallel_for", _VOID,
                               list(PARALLEL_FOR_TYPE.args), exported=True)
        body, closure, n = fn.args
        serial = fn.append_basic_block("serial")
        unlock_then_serial = fn.append_basic_block("unlock_then_serial")
        with b.if_then(b.icmp_signed("<=", n, _i64(0))):
            b.ret_void()
        requested = b.sext(b.load_atomic(self.num_threads, "monotonic", 4), _I64)
        threads = b.select(b.icmp_signed("<", requested, n), requested, n)
        with b.if_then(b.icmp_signed("<=", threads, _i64(1))):
            b.branch(serial)
        pid = b.call(self.getpid, [])
        locked = fn.append_basic_block("locked")
        b.cbranch(b.call(self.try_lock, [pid]), locked, serial)

        b.position_at_end(locked)
        workers = b.call(self.ensure_workers, [b.sub(threads, _i64(1)), pid])
        available = b.add(workers, _i64(1))
        threads = b.select(b.icmp_signed("<", available, threads), available, threads)
        launch = fn.append_basic_block("launch")
        b.cbranch(b.icmp_signed("<=", threads, _i64(1)), unlock_then_serial, launch)

        b.position_at_end(launch)
        b.store_atomic(b.call(self.sched_getcpu, []), self.caller_cpu, "monotonic", 4)
        wanted = b.mul(threads, _i64(PIECES_PER_THREAD))
        pieces = b.select(b.icmp_signed("<", wanted, n), wanted, n)
        self._launch(fn, b, body, closure, n, threads, pieces)
        b.store_atomic(_i32(0), self.lock, "release", 4)
        b.ret_void()

        b.position_at_end(unlock_then_serial)
        b.store_atomic(_i32(0), self.lock, "release", 4)
        b.branch(serial)

        b.position_at_end(serial)
        b.call(body, [_i64(0), n, closure])
        b.ret_void()

    def _launch(self, fn, b, body, closure, n, threads, pieces):
        """Publish the job, signal workers 1..threads-1, run pieces, wait."""
        quotient = b.udiv(n, pieces)
        remainder = b.urem(n, pieces)
        b.store(body, self._job_field(b, self.job, _BODY))
        b.store(closure, self._job_field(b, self.job, _CLOSURE))
        b.store(quotient, self._job_field(b, self.job, _QUOTIENT))
        b.store(remainder, self._job_field(b, self.job, _REMAINDER))
        b.store_atomic(b.trunc(pieces, _I32), self.left, "monotonic", 4)
        b.store_atomic(b.shl(pieces, _i64(32)), self.claim, "release", 8)
        before = b.block
        signal = fn.append_basic_block("signal")
        signalled = fn.append_basic_block("signalled")
        b.branch(signal)

        b.position_at_end(signal)
        worker = b.phi(_I64, "worker")
        worker.add_incoming(_i64(1), before)
        ticket = self._slot_field(b, worker, _TICKET)
        b.atomic_rmw("add", ticket, _i32(1), "seq_cst")
        self._notify(b, ticket, self._slot_field(b, worker, _SLEEPING))
        next_worker = b.add(worker, _i64(1))
        worker.add_incoming(next_worker, b.block)
        b.cbranch(b.icmp_signed("<", next_worker, threads), signal, signalled)

        b.position_at_end(signalled)

        def run_piece(b, piece):
            begin, end = self._piece_bounds(b, quotient, remainder, piece)
            b.call(body, [begin, end, closure])

        # the caller counts its pieces in a register and subtracts them at once
        mine = self._claim_loop(fn, b, run_piece)
        left_before = b.atomic_rmw("sub", self.left, mine, "acq_rel")
        first_left = b.sub(left_before, mine)
        claimed = b.block
        wait = fn.append_basic_block("wait_workers")
        finished = fn.append_basic_block("finished")
        b.branch(wait)

        b.position_at_end(wait)
        left = b.phi(_I32, "left")
        left.add_incoming(first_left, claimed)
        all_done = b.icmp_unsigned("==", left, _i32(0))
        wait_more = fn.append_basic_block("wait_more")
        b.cbranch(all_done, finished, wait_more)

        b.position_at_end(wait_more)
        left.add_incoming(
            b.call(self.wait_change, [self.left, left, self.caller_sleeping]), wait_more)
        b.branch(wait)

        b.position_at_end(finished)

    def _define_num_threads_accessors(self):
        fn, b = self._function("lw_set_num_threads", _VOID, [_I32], exported=True)
        value = fn.args[0]
        value = b.select(b.icmp_signed("<", value, _i32(1)), _i32(1), value)
        value = b.select(b.icmp_signed(">", value, _i32(MAX_THREADS)), _i32(MAX_THREADS), value)
        b.store_atomic(value, self.num_threads, "monotonic", 4)
        b.ret_void()

        fn, b = self._function("lw_get_num_threads", _I32, [], exported=True)
        b.ret(b.load_atomic(self.num_threads, "monotonic", 4))


def build_module(machine=None, triple=None):
    """The pool's LLVM module (``llvmlite.ir.Module``), not compiled; for this machine, or for
    ``machine`` (``"x86_64"`` / ``"aarch64"``: its futex call number and spin hint) and ``triple``."""
    return _PoolModuleBuilder(machine, triple).module


def host_target_machine(opt=3):
    """A target machine for the host CPU, with the host feature string (the
    CPU name alone may imply features, e.g. AVX-512, that a VM hides)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=host_target().cpu,
        features=host_target().features,
        opt=opt,
        codemodel="jitdefault",
    )


def _optimize(module_ref, target_machine):
    tuning = llvm.PipelineTuningOptions(speed_level=2)
    builder = llvm.create_pass_builder(target_machine, tuning)
    builder.getModulePassManager().run(module_ref, builder)


def _cached_object_path(ir_text: str):
    key = hashlib.sha256("\0".join([ir_text, host_target().cpu, host_target().features,
                                      "pool-v2"]).encode()).hexdigest()[:32]
    folder = writable_cache_dir()
    return None if folder is None else folder / f"pool-{key}.o"


class _CompiledPool:
    """The JIT engine holding the pool's code, and ctypes views of it."""

    EXPORTED = ("lw_parallel_for", "lw_set_num_threads", "lw_get_num_threads")

    def __init__(self):
        target_machine = host_target_machine()
        ir_text = str(build_module())
        cached = _cached_object_path(ir_text)
        # verified before LLVM sees a byte: a damaged entry is deleted, reported and rebuilt
        cached_object = None if cached is None else read_verified(cached)
        module_ref = llvm.parse_assembly(ir_text)
        if cached_object is None:
            module_ref.verify()
            _optimize(module_ref, target_machine)
        self.engine = llvm.create_mcjit_compiler(module_ref, target_machine)
        # the object code is cached on disk like every kernel's: a new process skips codegen
        if cached is not None:
            self.engine.set_object_cache(lambda _module, buffer: write_checksummed(cached, buffer),
                                         lambda _module: cached_object)
        self.engine.finalize_object()
        self.addresses = {name: self.engine.get_function_address(name)
                          for name in self.EXPORTED}
        self.set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int32)(
            self.addresses["lw_set_num_threads"])
        self.get_threads = ctypes.CFUNCTYPE(ctypes.c_int32)(
            self.addresses["lw_get_num_threads"])

    def register_symbols(self):
        for name, address in self.addresses.items():
            llvm.add_symbol(name, address)


_install_lock = threading.Lock()
_pool = None  # the _CompiledPool once installed; lives as long as the process


def default_num_threads():
    """CPUs this process may run on (its affinity mask), capped at MAX_THREADS."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    return max(1, min(count, MAX_THREADS))


def install():
    """Compile the pool (once, thread-safe) and register ``lw_parallel_for``,
    ``lw_set_num_threads`` and ``lw_get_num_threads`` with LLVM so that JIT
    modules which only declare them resolve them."""
    global _pool
    if _pool is not None:
        return
    with _install_lock:
        if _pool is not None:
            return
        pool = _CompiledPool()
        pool.set_threads(default_num_threads())
        pool.register_symbols()
        # Never free the engine, not even at interpreter shutdown: detached
        # workers may still be spinning in (or wake up into) its code.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(pool))
        _pool = pool


def _installed_pool():
    install()
    return _pool


def parallel_for_address():
    """Address of ``lw_parallel_for`` (installs the pool)."""
    return _installed_pool().addresses["lw_parallel_for"]


def set_num_threads(n):
    """Threads (the caller included) that later launches use; int in
    [1, MAX_THREADS]. Workers are created lazily by the next launch."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(
            f"set_num_threads: expected an int >= 1, got {n!r} ({type(n).__name__})")
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(
            f"set_num_threads: number of threads must be in [1, {MAX_THREADS}], got {n}")
    _installed_pool().set_threads(n)


def get_num_threads():
    """Threads (the caller included) that launches use."""
    return int(_installed_pool().get_threads())
