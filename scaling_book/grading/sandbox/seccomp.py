"""The seccomp filter every bwrap sandbox loads (``bwrap --seccomp FD``): it refuses the kernel keyring
system calls (``add_key``, ``request_key``, ``keyctl``) with ``EPERM``.

Keys outlive the processes that made them: in a user's session keyring (which a sandboxed process
shares with the user who started the grader) or a uid's user keyring, a key written by one submission
can be read by the next, warm sandbox or not. No submission needs them (container runtimes refuse them
by default for the same reason).

The filter is a classic BPF program over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4),
with the system call numbers of ``arch/*/tools/syscall.tbl`` (and the x32 ones, which are the x86_64
numbers with ``__X32_SYSCALL_BIT``). It knows the hosts x86_64 (with i386 and x32 processes) and aarch64
(with 32-bit arm processes); a process of any other architecture on them is killed. On other hosts no
filter is loaded (``seccomp_program()`` is None).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# linux/audit.h: EM_* | __AUDIT_ARCH_64BIT (0x80000000) | __AUDIT_ARCH_LE (0x40000000)
AUDIT_ARCH_X86_64 = 62 | 0x80000000 | 0x40000000
AUDIT_ARCH_I386 = 3 | 0x40000000
AUDIT_ARCH_AARCH64 = 183 | 0x80000000 | 0x40000000
AUDIT_ARCH_ARM = 40 | 0x40000000
X32_SYSCALL_BIT = 0x40000000

#: arch -> the (add_key, request_key, keyctl) numbers of every ABI of that arch
KEYRING_SYSCALLS: dict[int, tuple[int, ...]] = {
    AUDIT_ARCH_X86_64: (248, 249, 250, X32_SYSCALL_BIT + 248, X32_SYSCALL_BIT + 249, X32_SYSCALL_BIT + 250),
    AUDIT_ARCH_I386: (286, 287, 288),
    AUDIT_ARCH_AARCH64: (217, 218, 219),
    AUDIT_ARCH_ARM: (309, 310, 311),
}
#: host machine (``platform.machine()``) -> the arches its processes can run as
HOST_ARCHES: dict[str, tuple[int, ...]] = {
    "x86_64": (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386),
    "aarch64": (AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM),
}

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The compiled filter (``struct sock_filter`` array, native byte order) for host ``machine``
    (default: this one), or None for a host it does not know."""
    arches = HOST_ARCHES.get(machine or platform.machine())
    if arches is None:
        return None
    # Per arch: "arch == A ? (nr in list ? EPERM : ALLOW) : next arch"; after the last: kill.
    blocks: list[list[tuple[int, int, int, int]]] = []
    for arch in arches:
        numbers = KEYRING_SYSCALLS[arch]
        n = len(numbers)
        block = [(_LD_W_ABS, 0, 0, 4)]
        body = [(_LD_W_ABS, 0, 0, 0)]
        for i, nr in enumerate(numbers):
            body.append((_JEQ_K, n - i, 0, nr))  # jump to the EPERM return after the ALLOW
        body += [(_RET_K, 0, 0, SECCOMP_RET_ALLOW), (_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]
        block.append((_JEQ_K, 0, len(body), arch))
        blocks.append(block + body)
    program = [insn for block in blocks for insn in block] + [(_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    return b"".join(_insn(*insn) for insn in program)


def seccomp_fd() -> int | None:
    """A fresh descriptor holding ``seccomp_program()`` at offset 0, for one bwrap to read (the caller
    closes it), or None when there is no filter for this host."""
    program = seccomp_program()
    if program is None:
        return None
    fd = os.memfd_create("scaling-book-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
