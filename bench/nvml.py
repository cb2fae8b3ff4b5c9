"""The few NVML calls the benchmarks' GPU reader makes, through ctypes, on the library shoald
loads: libnvidia-ml.so.1, or $SHOAL_NVML_LIBRARY (tests/fake_nvml's stand-in, so the reader
runs on a machine without a GPU as shoald's does). No pynvml: the layouts are server/nvml_abi.h's
(nvmlProcessInfo_v2_t, which the _v3 and _v2 process queries both fill; nvmlUtilization_t), the
ones shoald reads a real driver with.
"""
import ctypes
import os
import time

from proc_reader import Periodic, descendants

SUCCESS, INSUFFICIENT_SIZE = 0, 7


class ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used_gpu_memory", ctypes.c_ulonglong),
                ("gpu_instance_id", ctypes.c_uint), ("compute_instance_id", ctypes.c_uint)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE: a process whose memory NVML cannot tell


class NvmlError(RuntimeError):
    pass


class Device:
    """One device of an initialised NVML; `close()` (or `with`) shuts NVML down again."""

    def __init__(self, index=0):
        path = os.environ.get("SHOAL_NVML_LIBRARY") or "libnvidia-ml.so.1"
        self._lib = ctypes.CDLL(path)
        self._check(self._lib.nvmlInit_v2(), "nvmlInit_v2")
        self._handle = ctypes.c_void_p()
        try:
            self._check(self._lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(index), ctypes.byref(self._handle)), "nvmlDeviceGetHandleByIndex_v2")
        except NvmlError:
            self._lib.nvmlShutdown()
            raise
        self._processes = getattr(self._lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self._lib.nvmlDeviceGetComputeRunningProcesses_v2

    @staticmethod
    def _check(ret, what):
        if ret != SUCCESS:
            raise NvmlError(f"{what} returned NVML error {ret}")

    def close(self):
        self._lib.nvmlShutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def processes(self):
        """{pid: bytes of GPU memory} of the device's compute processes; a process whose memory
        NVML cannot tell is left out (unknown, not 0)."""
        count = ctypes.c_uint(0)
        ret = self._processes(self._handle, ctypes.byref(count), None)
        while ret == INSUFFICIENT_SIZE:  # more may start between the two calls: ask again
            count = ctypes.c_uint(count.value + 8)
            infos = (ProcessInfo * count.value)()
            ret = self._processes(self._handle, ctypes.byref(count), infos)
            if ret == SUCCESS:
                return self._used(infos[:count.value])
        self._check(ret, "nvmlDeviceGetComputeRunningProcesses")
        return {}

    @staticmethod
    def _used(infos):
        used = {}
        for p in infos:
            if p.used_gpu_memory != NOT_AVAILABLE:
                used[p.pid] = used.get(p.pid, 0) + p.used_gpu_memory
        return used

    def utilisation(self):
        """The device's utilisation, percent (NVML's "gpu" rate: time a kernel ran)."""
        u = Utilization()
        self._check(self._lib.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(u)),
                    "nvmlDeviceGetUtilizationRates")
        return u.gpu


class GpuSampler(Periodic):
    """NVML on one device, every `every_ms`: the peak of the summed GPU memory of this process and
    its descendants (`peak`), each one's peak (`per_pid`), and the device's utilisation with the
    time it was read (`util`: [(unix time, percent)]) and the summed memory of the same read
    (`used`, bytes, parallel to `util`). NVML only (Device, above): it never touches
    CUDA, so a parent that forks CUDA workers afterwards may run it. `anyone`: every compute
    process on the device, not only this one's descendants (an outside reader of a run the device
    has alone)."""

    def __init__(self, every_ms, index=0, anyone=False):
        super().__init__(every_ms)
        self._anyone = anyone
        self._device = Device(index)
        self.peak, self.per_pid, self.util, self.used = 0, {}, [], []

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._device.close()

    def _tick(self):
        me = os.getpid()
        mine = {me, *descendants(me)}
        try:
            used = {pid: b for pid, b in self._device.processes().items()
                    if self._anyone or pid in mine}
            util = self._device.utilisation()
        except NvmlError:
            return  # a reading missed, not the run
        self.util.append((time.time(), util))
        self.used.append(sum(used.values()))
        self.peak = max(self.peak, self.used[-1])
        for pid, b in used.items():
            self.per_pid[pid] = max(self.per_pid.get(pid, 0), b)

    def utilisation(self, start, end):
        """(mean, peak) percent over the readings taken between start and end (unix times);
        (None, None) without one."""
        xs = [u for t, u in self.util if start <= t <= end]
        return (sum(xs) / len(xs), max(xs)) if xs else (None, None)
