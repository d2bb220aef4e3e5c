"""The seccomp filter of every bwrap sandbox: the keyring system calls are refused with EPERM, for every
ABI a host's processes can use; everything else is allowed; an unexpected ABI is killed.

The program is checked by running it in a small classic-BPF interpreter written here (loads of
``seccomp_data`` words, ``jeq`` with both branches, ``ret``), against the system call numbers of the
kernel's tables (``arch/x86/entry/syscalls/syscall_64.tbl`` and ``syscall_32.tbl``, x32 = x86_64 number
+ 0x40000000, ``include/uapi/asm-generic/unistd.h`` for aarch64, ``arch/arm/tools/syscall.tbl``), and in
a real sandbox on this machine.
"""

from __future__ import annotations

import errno
import os
import struct

import pytest

from scaling_book.grading.sandbox import isolation_mode, run_function
from scaling_book.grading.sandbox.seccomp import seccomp_program

ALLOW, ERRNO, KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
# (add_key, request_key, keyctl) per ABI, from the kernel's syscall tables
KEYRING = {
    "x86_64": [248, 249, 250],
    "x32": [0x40000000 + 248, 0x40000000 + 249, 0x40000000 + 250],
    "i386": [286, 287, 288],
    "aarch64": [217, 218, 219],
    "arm": [309, 310, 311],
}


def run_bpf(program: bytes, nr: int, arch: int) -> int:
    data = struct.pack("=iI", nr, arch) + bytes(56)  # struct seccomp_data: nr, arch, ip, args
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x15:  # jeq #k, jt, jf
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected BPF instruction {code:#x}")


@pytest.mark.parametrize("host, abis", [("x86_64", {"x86_64": "x86_64", "x32": "x86_64", "i386": "i386"}),
                                        ("aarch64", {"aarch64": "aarch64", "arm": "arm"})])
def test_the_filter_refuses_the_keyring_calls_of_every_abi_and_nothing_else(host, abis):
    program = seccomp_program(host)
    assert program is not None
    for abi, arch in abis.items():
        for nr in KEYRING[abi]:
            assert run_bpf(program, nr, ARCH[arch]) == ERRNO | errno.EPERM, (abi, nr)
        others = {0, 1, 39, 57, 59, 231} | {n + 1 for n in KEYRING[abi]} | {KEYRING[abi][0] - 1}
        for nr in others - {n for ns in KEYRING.values() for n in ns}:
            assert run_bpf(program, nr, ARCH[arch]) == ALLOW, (abi, nr)
    assert run_bpf(program, 250, 0xDEADBEEF) == KILL_PROCESS
    other_host_arch = ARCH["aarch64" if host == "x86_64" else "x86_64"]
    assert run_bpf(program, 39, other_host_arch) == KILL_PROCESS


def test_an_unknown_host_gets_no_filter():
    assert seccomp_program("riscv64") is None


KEYRING_CALLS = (
    "import ctypes\n"
    "def f(nr, args):\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    r = libc.syscall(nr, *[a.encode() if isinstance(a, str) else a for a in args])\n"
    "    return [r, ctypes.get_errno()]\n"
)


@pytest.mark.skipif(isolation_mode() != "bwrap" or os.uname().machine not in ("x86_64", "aarch64"),
                    reason="bubblewrap not available, or no filter for this host")
@pytest.mark.parametrize("warm", ["1", "0"])
def test_a_sandboxed_submission_cannot_use_keyrings(warm, monkeypatch):
    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", warm)
    abi = os.uname().machine
    add_key, request_key, keyctl = KEYRING[abi]
    calls = [
        [add_key, ["user", "scaling-book", "v", 1, -3]],   # KEY_SPEC_SESSION_KEYRING
        [request_key, ["user", "scaling-book", None, 0]],
        [keyctl, [0, -3, 0]],                              # KEYCTL_GET_KEYRING_ID
    ]
    r = run_function(KEYRING_CALLS, "f", calls, 20, mode="bwrap")
    assert r.status == "ok", r.detail
    assert r.values == [[-1, errno.EPERM]] * 3
    getpid = {"x86_64": 39, "aarch64": 172}[abi]
    r = run_function(KEYRING_CALLS, "f", [[getpid, []]], 20, mode="bwrap")
    assert r.values[0][0] > 0   # other system calls are allowed

