# SPDX-License-Identifier: MIT
"""An in-memory MVCC store in the manner of etcd behind the API server.

Every write takes the next value of one global counter as its resourceVersion and appends
an event to a log. The log is the watch history: a watch from resourceVersion R replays the
events after R. The log is bounded (history_limit events) and can be compacted on demand;
asking for anything older than the compacted revision is 410 Gone. Objects are never mutated
after they are stored (copy on write), so readers may hold them without the lock.
"""
import bisect
import threading


class Event:
    __slots__ = ("rv", "type", "skey", "ns", "name", "obj", "prev")

    def __init__(self, rv, type_, skey, ns, name, obj, prev):
        self.rv, self.type, self.skey, self.ns, self.name = rv, type_, skey, ns, name
        self.obj, self.prev = obj, prev


class Store:
    def __init__(self, history_limit=2000, start_rv=1000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = start_rv
        self.compacted = start_rv      # events with rv <= compacted are gone
        self.history_limit = history_limit
        self.objects = {}              # (skey, ns, name) -> object
        self.by_uid = {}               # uid -> (skey, ns, name)
        self.log = []                  # Event, ascending rv
        self._rvs = []                 # rv of each log entry, for bisect
        self.cut_epoch = 0             # bumped to end every open watch
        self.cut_mode = "close"        # how they end: "close" (clean end) or "reset" (TCP RST)
        self.bookmark_epoch = 0        # bumped to make every watch send a bookmark now
        # for the control-plane controllers, which look only at what changed since their last
        # pass: key -> uid of the object written, and owner uid -> keys of its dependents
        self.dirty = {}
        self.owned = {}

    # ---- writes (caller holds the lock)
    def next_rv(self):
        self.rv += 1
        return self.rv

    def commit(self, type_, skey, ns, name, obj, rv):
        """Record a change made at rv. obj is the new object (for DELETED, the object as it
        was deleted, with resourceVersion = rv)."""
        key = (skey, ns, name)
        prev = self.objects.get(key)
        self._index_owners(key, prev, None if type_ == "DELETED" else obj)
        self.dirty[key] = (obj.get("metadata") or {}).get("uid")
        if type_ == "DELETED":
            self.objects.pop(key, None)
            uid = (obj.get("metadata") or {}).get("uid")
            if uid:
                self.by_uid.pop(uid, None)
        else:
            self.objects[key] = obj
            uid = (obj.get("metadata") or {}).get("uid")
            if uid:
                self.by_uid[uid] = key
        self.log.append(Event(rv, type_, skey, ns, name, obj, prev))
        self._rvs.append(rv)
        if len(self.log) > self.history_limit:
            self._drop(len(self.log) - self.history_limit)
        self.changed.notify_all()

    def _index_owners(self, key, old, new):
        def uids(o):
            refs = ((o or {}).get("metadata") or {}).get("ownerReferences") or []
            return {r.get("uid") for r in refs if isinstance(r, dict) and r.get("uid")}
        before, after = uids(old), uids(new)
        for u in before - after:
            deps = self.owned.get(u)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self.owned[u]
        for u in after - before:
            self.owned.setdefault(u, set()).add(key)

    def take_dirty(self):
        """The keys written since the last call, with the uid each had (caller holds the lock)."""
        d, self.dirty = self.dirty, {}
        return d

    def dependents(self, uid):
        """Keys of the objects whose ownerReferences name uid (caller holds the lock)."""
        return list(self.owned.get(uid, ()))

    def _drop(self, n):
        self.compacted = self.log[n - 1].rv
        del self.log[:n]
        del self._rvs[:n]

    def compact(self, rv=None):
        """Forget history up to rv (default: everything so far). Returns the compacted rv."""
        with self.lock:
            rv = self.rv if rv is None else min(int(rv), self.rv)
            n = bisect.bisect_right(self._rvs, rv)
            if n:
                self._drop(n)
            self.compacted = max(self.compacted, rv)
            self.changed.notify_all()
            return self.compacted

    # ---- reads
    def get(self, skey, ns, name):
        return self.objects.get((skey, ns, name))

    def list(self, skey, ns=None):
        """Current objects of one storage key, sorted by (namespace, name)."""
        with self.lock:
            items = [(k, o) for k, o in self.objects.items() if k[0] == skey and (ns is None or k[1] == ns)]
        items.sort(key=lambda kv: (kv[0][1], kv[0][2]))
        return [o for _, o in items]

    def snapshot(self, skey, ns, rv):
        """Objects as they were at rv (compacted < rv <= current), sorted by key."""
        with self.lock:
            state = {k: o for k, o in self.objects.items() if k[0] == skey and (ns is None or k[1] == ns)}
            i = bisect.bisect_right(self._rvs, rv)
            for ev in reversed(self.log[i:]):
                if ev.skey != skey or (ns is not None and ev.ns != ns):
                    continue
                key = (ev.skey, ev.ns, ev.name)
                if ev.prev is None:
                    state.pop(key, None)
                else:
                    state[key] = ev.prev
        return [state[k] for k in sorted(state, key=lambda k: (k[1], k[2]))]

    def events_after(self, rv):
        """Events with rv > the given rv (caller checks rv >= compacted)."""
        with self.lock:
            i = bisect.bisect_right(self._rvs, rv)
            return self.log[i:]

    def namespace_keys(self, ns):
        with self.lock:
            return [k for k in self.objects if k[1] == ns]
