import subprocess
import sys

# In a child process: importing streamfit.worker_signals sets SIGINT aside for good.
CHILD = """
import sys
from multiprocessing import synchronize

import streamfit.worker_signals

orphan = synchronize.Lock.__new__(synchronize.Lock)
try:  # what a forkserver child does with a lock whose maker (the driver) exited: its name is gone
    orphan.__setstate__((0, synchronize.SEMAPHORE, 1, "/streamfit-test-no-such-semaphore"))
except Exception:
    sys.excepthook(*sys.exc_info())
print("after the semaphore", file=sys.stderr)
try:
    open("/streamfit-test-no-such-file")
except Exception:
    sys.excepthook(*sys.exc_info())
"""


def test_the_forkserver_s_hook_drops_only_a_semaphore_whose_maker_is_gone():
    """The hook that streamfit.worker_signals installs in the forkserver: a real FileNotFoundError
    from multiprocessing's SemLock.__setstate__ (a semaphore name that does not exist, as after
    the driver that made it exited) prints nothing; another FileNotFoundError still prints its
    traceback through the previous hook."""
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = done.stderr.split("after the semaphore\n")
    assert before == ""
    assert after.startswith("Traceback (most recent call last):")
    assert after.rstrip().endswith(
        "FileNotFoundError: [Errno 2] No such file or directory: '/streamfit-test-no-such-file'"
    )
