"""The start of a subprocess script that records streamfit's numba compilations: numba's
"numba:compile" event fires for a compilation, not for a load from the cache, and the script
appends each compiled function's qualified name to `compiled`."""

COUNTING = """
from numba.core import event
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
"""
