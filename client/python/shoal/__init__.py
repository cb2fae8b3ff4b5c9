"""Shoal from Python: a client of shoald (docs/python.md).

    import shoal
    c = shoal.Client()
    run = c.submit(workers=4, start="forkserver", batches=50)
    for s in run.watch():
        print(s.pss_sum_gib, s.samples_per_sec)
    sw = c.sweep(workers=[1, 2, 4], start=["fork", "spawn"], repeats=3, wait=True)
    sw.results().groupby(["start", "workers"]).samples_per_sec.median()
"""
# In a source tree the generated shoal.v1 lives in the build's python folder (build/python),
# another `shoal` folder on sys.path: looked for there too. An installed package has its own.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)  # noqa: F821

from shoal._client import (  # noqa: E402
    Client, Event, Experiment, Sample, StateChange, Sweep, __version__)
from shoal._errors import ShoalError  # noqa: E402

__all__ = ["Client", "Event", "Experiment", "Sample", "ShoalError", "StateChange", "Sweep",
           "__version__"]
