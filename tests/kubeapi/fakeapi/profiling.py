# SPDX-License-Identifier: MIT
"""--profile FILE: cProfile every thread that serves requests or runs the double's controllers,
and write the merged statistics (pstats format) when the double stops. For finding where the
double spends its time under load; off unless asked for."""
import cProfile
import pstats
import threading


class Profiles:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.done = []

    def run(self, fn, *args, **kw):
        """fn(*args, **kw) under a profiler of its own; its statistics kept for the dump."""
        p = cProfile.Profile()
        p.enable()
        try:
            return fn(*args, **kw)
        finally:
            p.disable()
            with self.lock:
                self.done.append(p)

    def dump(self):
        with self.lock:
            profs, self.done = self.done, []
        if not profs:
            return
        st = pstats.Stats(profs[0])
        for p in profs[1:]:
            st.add(p)
        st.dump_stats(self.path)
