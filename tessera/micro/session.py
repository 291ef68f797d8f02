"""A host-driven session with an emulated board: boot it with a model, copy tensors in, run,
read results and the instruction count of every call.

    with Session(lib, board="mps2-an386") as s:     # builds the firmware, boots QEMU
        s.set_input("input", x)
        counts = s.run()            # instructions executed by each call of the plan
        y = s.get_output(0)
        s.call(3)                   # one call (kernel) of the plan alone

Transport: two FIFOs in the session's folder that the firmware opens through semihosting
(QEMU runs with that folder as its working directory); the protocol is fixed-size binary
frames (firmware/session.c), every reply checked. Instruction counts come from a QEMU plugin
(firmware/insncount.c) that counts instructions between the firmware's markers around each
call: exact and the same on every run. What goes wrong is a MicroError that says what and what
to do: a board not started, a tensor of the wrong size or type, a kernel returning an error, a
fault of the core (with the exception, the pc and the plan's call), a board that stops
answering (timeout).
"""

from __future__ import annotations

import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tessera.micro import boards, toolchain
from tessera.runtime.ndarray import STORAGE

_MAGIC = 0x42525354
_STATUS = {1: "unknown command", 2: "index out of range", 3: "wrong payload size"}
_KERNEL_FAILED, _FAULT = 4, 5
_EXCEPTIONS = {
    2: "NMI",
    3: "HardFault",
    4: "MemManage fault",
    5: "BusFault",
    6: "UsageFault",
    7: "SecureFault",
    11: "SVCall",
    12: "DebugMonitor",
    14: "PendSV",
    15: "SysTick",
}


class MicroError(RuntimeError):
    """A session could not do what was asked (the message says why)."""


class Session:
    """One emulated board running one compiled model (module docstring)."""

    def __init__(self, module=None, board: str = "mps2-an386", timeout: float = 60.0):
        self.board = boards.get_board(board)
        self.module = module
        self.timeout = timeout
        self.last_counts: list[int] | None = None
        self._proc = None
        self._folder: Path | None = None
        self._to_board = self._from_board = None
        self._regions_read = 0
        self._counts_file: Path | None = None  # the instruction counter's output

    # -- lifetime -------------------------------------------------------------------------

    def start(self) -> Session:
        """Build the firmware (model, weights, server), boot the board and say hello."""
        if self._proc is not None:
            raise MicroError(f"the session on {self.board.name} is already started")
        self._check_tools()
        plan = self._check_module()
        try:
            elf = boards.build_firmware(self.module.c_sources(), self.board)
        except toolchain.ToolchainError as err:  # e.g. a model larger than the board's memory
            raise MicroError(f"the firmware for {self.board.name} did not build: {err}") from None
        self._folder = Path(tempfile.mkdtemp(prefix="tessera-session-"))
        self._regions_read, self._counts_file = 0, None  # (a session may be started again)
        for name in ("to_board", "from_board"):
            os.mkfifo(self._folder / name)
        cmd = self.board.qemu_command(elf, self._plugin_args(elf))
        log = open(self._folder / "qemu.log", "wb")  # noqa: SIM115 (closed with the process)
        self._proc = subprocess.Popen(
            cmd, cwd=self._folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        log.close()
        try:
            self._connect()
            self._hello(plan)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop the board (a quit request, then the process) and remove the session's files."""
        if self._proc is not None and self._proc.poll() is None and self._to_board is not None:
            try:
                self._send(ord("Q"))
                self._reply("quit", timeout=5)
            except (MicroError, OSError):
                pass
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for fd in (self._to_board, self._from_board):
            if fd is not None:
                os.close(fd)
        self._to_board = self._from_board = self._proc = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_proc", None) is not None:
            self.close()

    # -- tensors and calls ------------------------------------------------------------------

    def set_input(self, key, value) -> None:
        """Copy `value` into input `key` (its name or index) on the board."""
        plan = self._plan()
        index = self._index(key, plan["inputs"], "input")
        spec = plan["inputs"][index]
        array = np.ascontiguousarray(value)
        storage = np.dtype(STORAGE[spec["dtype"]])
        if tuple(array.shape) != tuple(spec["shape"]) or array.dtype != storage:
            raise MicroError(
                f"input {spec['name']!r} is {spec['dtype']}{list(spec['shape'])}, "
                f"got {array.dtype}{list(array.shape)}"
            )
        self._request(ord("I"), index, array.tobytes(), what=f"set input {spec['name']!r}")

    def run(self) -> list[int] | None:
        """Run every call of the model; the instructions each call executed (None without the
        counting plugin)."""
        self._request(ord("R"), what="run")
        self.last_counts = self._new_counts(len(self._plan()["calls"]))
        return self.last_counts

    def call(self, k: int) -> int | None:
        """Run call k of the plan alone (on the arena as the previous calls left it); its
        instruction count."""
        calls = self._plan()["calls"]
        if not 0 <= k < len(calls):
            raise MicroError(f"call {k} is out of range: the model has {len(calls)} calls")
        self._request(ord("C"), k, what=f"call {k} ({calls[k]['kernel']})")
        counts = self._new_counts(1)
        return counts[0] if counts else None

    def get_output(self, key) -> np.ndarray:
        plan = self._plan()
        index = self._index(key, plan["outputs"], "output")
        spec = plan["outputs"][index]
        data = self._request(ord("O"), index, what=f"get output {spec['name']!r}")
        storage = np.dtype(STORAGE[spec["dtype"]])
        return np.frombuffer(data, storage).reshape(spec["shape"]).copy()

    # -- checks ---------------------------------------------------------------------------

    def _check_tools(self) -> None:
        if not toolchain.available() or not boards.qemu_available():
            raise MicroError(
                "a session needs arm-none-eabi-gcc and qemu-system-arm: install them with "
                "scripts/setup.d/40-micro.sh (Debian: gcc-arm-none-eabi "
                "libnewlib-arm-none-eabi qemu-system-arm)"
            )

    def _check_module(self) -> dict:
        if self.module is None or not hasattr(self.module, "c_sources"):
            raise MicroError(
                "Session needs a model compiled for a microcontroller: "
                'tessera.build(mod, target="c -device=micro -mcpu=...", params=params)'
            )
        mcpu = self.module.mcpu
        if mcpu is not None and mcpu != self.board.mcpu:
            raise MicroError(
                f"the model is compiled for -mcpu={mcpu}, board {self.board.name} is a "
                f"{self.board.mcpu}: build it for that CPU"
            )
        return self.module.plan

    def _plan(self) -> dict:
        if self._proc is None:
            raise MicroError(
                f"the session on {self.board.name} is not started: call start() first, or use "
                "`with Session(...) as s:`"
            )
        return self.module.plan

    def _index(self, key, specs: list[dict], kind: str) -> int:
        names = [s["name"] for s in specs]
        if isinstance(key, str):
            if key not in names:
                raise MicroError(f"the model has no {kind} {key!r} ({kind}s: {names})")
            return names.index(key)
        if not isinstance(key, int) or not 0 <= key < len(specs):
            raise MicroError(f"{kind} {key!r} is out of range: the model has {len(specs)}")
        return key

    # -- the protocol ---------------------------------------------------------------------

    def _plugin_args(self, elf: Path) -> str | None:
        plugin = boards.insncount_plugin()
        if plugin is None:
            return None
        marks = boards.symbol_addresses(elf, ("tessera_mark_begin", "tessera_mark_end"))
        begin, end = marks["tessera_mark_begin"], marks["tessera_mark_end"]
        self._counts_file = self._folder / "counts.txt"
        return f"{plugin},begin={begin:#x},end={end:#x},out={self._counts_file}"

    def _connect(self) -> None:
        """Open the FIFOs in the order the firmware does (to_board first), without blocking
        on a board that never boots."""
        deadline = time.monotonic() + self.timeout
        fd = None
        while fd is None:
            try:  # ENXIO until the firmware opens its end
                fd = os.open(self._folder / "to_board", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                self._check_alive("booting")
                if time.monotonic() > deadline:
                    raise MicroError(
                        f"{self.board.name} did not boot in {self.timeout} s"
                    ) from None
                time.sleep(0.002)
        os.set_blocking(fd, True)
        self._to_board = fd
        self._from_board = os.open(self._folder / "from_board", os.O_RDONLY | os.O_NONBLOCK)

    def _hello(self, plan: dict) -> None:
        data = self._request(ord("H"), what="hello")
        n_in, n_out, n_calls = struct.unpack_from("<3I", data)
        sizes = list(struct.unpack_from(f"<{n_in + n_out}I", data, 12))
        want = [int(np.prod(s["shape"])) * np.dtype(STORAGE[s["dtype"]]).itemsize
                for s in plan["inputs"] + plan["outputs"]]  # fmt: skip
        got = (n_in, n_out, n_calls, sizes)
        if got != (len(plan["inputs"]), len(plan["outputs"]), len(plan["calls"]), want):
            raise MicroError(f"the board runs another model: it reports {got}")

    def _send(self, command: int, index: int = 0, payload: bytes = b"") -> None:
        frame = struct.pack("<3I", command, index, len(payload)) + payload
        view = memoryview(frame)
        while view:
            try:
                written = os.write(self._to_board, view)
            except BrokenPipeError:
                raise self._dead("while receiving a request") from None
            view = view[written:]

    def _request(self, command: int, index: int = 0, payload: bytes = b"", what: str = ""):
        self._plan()
        self._send(command, index, payload)
        return self._reply(what)

    def _reply(self, what: str, timeout: float | None = None) -> bytes:
        magic, status, n = struct.unpack("<3I", self._read(12, what, timeout))
        if magic != _MAGIC:
            raise MicroError(f"{what}: the board's reply is garbled (magic {magic:#x})")
        data = self._read(n, what, timeout) if n else b""
        if status == 0:
            return data
        if status == _KERNEL_FAILED:
            k, code = struct.unpack("<Ii", data)
            raise MicroError(f"{what}: {self._describe_call(k)} returned error code {code}")
        if status == _FAULT:
            exc, k, pc = struct.unpack("<3I", data)
            self._proc.wait(timeout=5)
            where = self._describe_call(k) if k != 0xFFFFFFFF else "the session server"
            name = _EXCEPTIONS.get(exc, f"exception {exc}")
            self.close()
            raise MicroError(
                f"{what}: the core took a {name} at pc {pc:#010x} in {where}; the board "
                "stopped (start a new session)"
            )
        raise MicroError(f"{what}: the board answered: {_STATUS.get(status, status)}")

    def _describe_call(self, k: int) -> str:
        call = self.module.plan["calls"][k]
        nodes = f" (nodes {', '.join(call['nodes'])})" if call.get("nodes") else ""
        return f"call {k} of the plan, kernel {call['kernel']}{nodes}"

    def _read(self, n: int, what: str, timeout: float | None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:  # a kernel that never ends, or a board that hangs: stop it
                self._proc.kill()
                self.close()
                raise MicroError(
                    f"{what}: the board did not answer in {timeout or self.timeout} s "
                    "(it was stopped; start a new session)"
                )
            ready, _, _ = select.select([self._from_board], [], [], min(left, 0.05))
            data = os.read(self._from_board, n - got) if ready else b""
            if not data:  # nothing yet, or no writer (not opened yet, or the board stopped)
                if self._proc.poll() is not None:
                    raise self._dead(what)
                if ready:  # end of file while no writer: wait for the firmware to open it
                    time.sleep(0.001)
                continue
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def _check_alive(self, what: str) -> None:
        if self._proc.poll() is not None:
            raise self._dead(what)

    def _dead(self, what: str) -> MicroError:
        code = self._proc.poll()
        log = (self._folder / "qemu.log").read_text(errors="replace").strip()[-2000:]
        return MicroError(
            f"{what}: the board ({self.board.name}) stopped with exit code {code}"
            + (f"; QEMU said:\n{log}" if log else "")
        )

    def _new_counts(self, n: int) -> list[int] | None:
        path = self._counts_file
        if path is None or not path.exists():
            return None
        lines = [x for x in path.read_text().splitlines() if x.startswith("region")]
        new = lines[self._regions_read :]  # (a failed run leaves a few more: the last n count)
        self._regions_read = len(lines)
        if len(new) < n:
            raise MicroError(f"the instruction counter saw {len(new)} calls, expected {n}")
        return [int(x.split()[-1]) for x in new[len(new) - n :]]
