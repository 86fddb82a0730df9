"""Capacity the hub has bound but the members have not reported yet, taken out of their
reported capacity so that two decisions never spend the same GPU.

Every pass needs this for every cluster, and a thousand bound, unreported Works would make
each pass parse and subtract a thousand shares. :class:`AssumedCapacity` keeps work from one
pass to the next: a Work's requests are parsed once per spec, and a cluster's view is carried
on from the last pass while its report is unchanged and the last pass's Works are a prefix of
this pass's (the cache keeps Works in arrival order, so new ones are appended).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.api import protocol
from fleet.hub.cache import Key, Snapshot
from fleet.hub.views import parse_time
from fleet.kinds import adapter_for
from propagation.fit import Domain
from propagation.resources import Resources
from propagation.spent import with_assumed, with_held_each
from propagation.views import ClusterView

Domains = tuple[Domain, ...]
# Per role of a share: its replicas' requests and the topology domains they keep to.
Batches = list[tuple[list[Resources], Domains]]
# ("<Work uid>/<generation>", domains, requests, the nodes its decision packed it onto)
Share = tuple[str, Domains, list[Resources], tuple[str, ...]]


def share_requests(work: Mapping[str, Any]) -> list[Resources]:
    """Per-replica requests of the share a Work carries."""
    return [request for requests, _ in share_batches(work) for request in requests]


def share_batches(work: Mapping[str, Any]) -> Batches:
    """Per role of the share a Work carries: its replicas' requests, and the domains they
    keep to (the role's own, else the share's)."""
    manifest = work["spec"]["manifests"][0]
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    demand = adapter.demand("", manifest)
    placement = work["spec"]["placement"]
    domains, own = protocol.share_domains(placement), dict(protocol.share_role_domains(placement))
    return [([role.request] * role.replicas, own.get(role.name, domains))
            for role in demand.roles]


@dataclass(frozen=True, slots=True)
class Tracked:
    """What the rule of :func:`unreported` reads of a live Work, parsed once per version
    of it (a member's Works were parsed again at each of its reports: a tenth of a pass)."""

    body: Mapping[str, Any]
    name: str
    bound: datetime | None  # when its member bound it
    resized: datetime | None  # when its share was resized, if it was
    made: tuple[str, str]  # creation time, name: the order shares are taken out in
    share: tuple[str, int]  # (uid, generation): what makes its share (uid-less: its name)

    @classmethod
    def of(cls, work: Mapping[str, Any]) -> Tracked:
        meta = work["metadata"]
        return cls(work, str(meta["name"]), parse_time(protocol.bound_time(work)),
                   parse_time((meta.get("annotations") or {}).get(protocol.RESIZED_AT)),
                   (str(meta.get("creationTimestamp") or ""), str(meta["name"])),
                   (str(meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}"),
                    int(meta.get("generation", 0))))


def unreported(cluster: Mapping[str, Any] | None, works: Iterable[Mapping[str, Any]]
               ) -> list[Mapping[str, Any]]:
    """The live ``works`` of one member whose pods its last capacity report (``cluster``)
    does not yet count: not bound when it was taken, and not among the Works it reserves
    nodes for, or resized since (what it reserved, or saw bound, was the old share). In the
    order they were made (then by name): each is taken out of the capacity in turn, and
    the order decides which nodes each is assumed on."""
    return [t.body for t in _unreported(cluster, [Tracked.of(w) for w in works if _live(w)])]


def _unreported(cluster: Mapping[str, Any] | None, works: Iterable[Tracked]) -> list[Tracked]:
    capacity = ((cluster or {}).get("status") or {}).get("capacity") or {}
    seen = parse_time(capacity.get("observedTime"))
    held = set(capacity.get("reservedFor") or [])
    out = []
    for work in works:
        bound, resized = work.bound, work.resized
        if resized is None or (seen is not None and seen >= resized):
            if work.name in held:
                continue
            if bound is not None and seen is not None and seen >= bound and (
                    resized is None or bound >= resized):  # a resized share: bound again
                continue
        out.append(work)
    return sorted(out, key=lambda work: work.made)


def unreported_works(snap: Snapshot) -> dict[str, list[Mapping[str, Any]]]:
    """Per cluster, its live Works whose pods its last capacity report does not yet count
    (:func:`unreported`)."""
    by_cluster: dict[str, list[Mapping[str, Any]]] = {}
    for work in snap.works.values():
        by_cluster.setdefault(work["spec"]["placement"]["cluster"], []).append(work)
    bodies = {b["metadata"]["name"]: b for b in snap.clusters.values()}
    out = {}
    for cluster, works in by_cluster.items():
        found = unreported(bodies.get(cluster), works)
        if found:
            out[cluster] = found
    return out


def _live(work: Mapping[str, Any]) -> bool:
    return protocol.work_state(work) not in ("Succeeded", "Failed") and \
        not work["metadata"].get("deletionTimestamp")


class AssumedCapacity:
    """Cluster views with unreported Works taken out, reusing the last pass's work: each
    member's unreported Works are found again only when its Works or its report changed."""

    def __init__(self) -> None:
        self._shares: dict[tuple[str, int], list[Share]] = {}  # by Work uid, generation
        self._views: dict[str, tuple[ClusterView, tuple[str, ...], ClusterView]] = {}
        # cluster -> (its view less its Works, the inflight requests taken, the view less both)
        self._inflight: dict[str, tuple[ClusterView, tuple[Resources, ...], ClusterView]] = {}
        self._works: dict[str, dict[Key, Tracked]] = {}  # cluster -> its live Works
        self._where: dict[Key, str] = {}  # Work -> its cluster
        self._unreported: dict[str, list[Tracked]] = {}
        self._dirty: set[str] | None = None  # None: everything

    def changed(self, snap: Snapshot, works: Iterable[Key], clusters: Iterable[str]) -> None:
        """These Works and members changed since the last pass."""
        if self._dirty is None:
            return
        for key in works:
            body = snap.works.get(key)
            cluster = body["spec"]["placement"]["cluster"] if body is not None else None
            before = self._where.get(key)
            if before is not None and before != cluster:
                self._works.get(before, {}).pop(key, None)
                self._dirty.add(before)
            if body is None or cluster is None or not _live(body):
                # (an ended or deleted Work is never assumed again: not walked again either)
                self._where.pop(key, None)
                if cluster is not None:
                    self._works.get(cluster, {}).pop(key, None)
                    self._dirty.add(cluster)
                continue
            self._works.setdefault(cluster, {})[key] = Tracked.of(body)  # (in place)
            self._where[key] = cluster
            self._dirty.add(cluster)
        self._dirty.update(clusters)

    def views(self, clusters: Sequence[ClusterView], snap: Snapshot,
              inflight: Mapping[str, Sequence[Resources]]) -> dict[str, ClusterView]:
        """Each cluster's view less its unreported Works and then its ``inflight`` requests
        (decided this or an earlier pass, Works not yet in the cache)."""
        refreshed = self._refresh(snap)
        out = {}
        for cluster in clusters:
            last = self._views.get(cluster.name)
            if last is not None and last[0] != cluster:
                last = None  # a new report: every unreported Work taken out of it afresh
            if last is not None and cluster.name not in refreshed:
                view = last[2]  # the same report, the same unreported Works: the same view
            else:
                view = self._with_shares(cluster, [
                    s for w in self._unreported.get(cluster.name, []) for s in self._share(w)],
                    last)
            out[cluster.name] = self._with_inflight(view, tuple(inflight.get(cluster.name, ())))
        self._views = {k: v for k, v in self._views.items() if k in out}
        self._inflight = {k: v for k, v in self._inflight.items() if k in out}
        return out

    def _with_inflight(self, view: ClusterView, requests: tuple[Resources, ...]) -> ClusterView:
        """``view`` less the ``requests`` of binds being written, carried on from the last
        pass while the view is the same and the last pass's requests lead this pass's (binds
        wait for writers for a second or more, a pass every few hundred milliseconds). The
        same view object also keeps the packings division made on it."""
        if not requests:
            self._inflight.pop(view.name, None)
            return view
        start, out = 0, view
        last = self._inflight.get(view.name)
        if last is not None and last[0] is view and requests[:len(last[1])] == last[1]:
            start, out = len(last[1]), last[2]
        out = with_assumed(out, requests[start:])
        self._inflight[view.name] = (view, requests, out)
        return out

    def _refresh(self, snap: Snapshot) -> set[str]:
        """Find the unreported Works again on the members whose Works or report changed;
        those members."""
        if self._dirty is None:  # the first pass: every Work
            self._works, self._where = {}, {}
            for key, work in snap.works.items():
                if not _live(work):
                    continue
                cluster = work["spec"]["placement"]["cluster"]
                self._works.setdefault(cluster, {})[key] = Tracked.of(work)
                self._where[key] = cluster
            self._dirty = set(self._works) | {b["metadata"]["name"]
                                              for b in snap.clusters.values()}
        if not self._dirty:
            return set()
        bodies = {b["metadata"]["name"]: b for b in snap.clusters.values()}
        for cluster in self._dirty:
            works = self._works.get(cluster, {})
            found = _unreported(bodies.get(cluster), works.values())
            # The shares of Works no longer unreported here are kept no more (looked for
            # among the refreshed members only: a walk of every member's Works took 5 % of
            # a pass under a stream of capacity reports)
            left = {w.share for w in self._unreported.get(cluster, ())} - {
                w.share for w in found}
            for share in left:
                self._shares.pop(share, None)
            if found:
                self._unreported[cluster] = found
            else:
                self._unreported.pop(cluster, None)
        refreshed, self._dirty = self._dirty, set()
        return refreshed

    def kept_shares(self) -> list[tuple[str, int]]:
        """The Works (uid, generation) whose parsed shares are kept."""
        return list(self._shares)

    def _share(self, work: Tracked) -> list[Share]:
        """A Work's share, a part per set of domains its roles keep to (one for most)."""
        known = self._shares.get(work.share)
        if known is None:  # (a generation's share and nodes never change: made once)
            uid = "/".join(map(str, work.share))  # a resized Work: new key
            nodes = tuple(str(n) for n in work.body["spec"]["placement"].get("nodes") or ())
            known = self._shares[work.share] = [(uid, domains, requests, nodes)
                                                for requests, domains in share_batches(work.body)]
        return known

    def _with_shares(self, cluster: ClusterView, shares: Sequence[Share],
                     last: tuple[ClusterView, tuple[str, ...], ClusterView] | None
                     ) -> ClusterView:
        """``cluster`` less ``shares``, carried on from ``last`` (made from the same report)
        while its shares lead these."""
        uids = tuple(uid for uid, _, _, _ in shares)  # a Work of several parts: as many
        start, view = 0, cluster
        if last is not None and uids[:len(last[1])] == last[1]:
            start, view = len(last[1]), last[2]
        # Each share on the nodes its decision packed it onto (a replica pinned to a node is
        # counted there), else within its domains; consecutive shares of either kind in one
        # go, as splitting and joining the groups is the cost.
        for pinned, batch in itertools.groupby(shares[start:], key=lambda share: bool(share[3])):
            run = list(batch)
            if pinned:
                view = with_held_each(view, [(requests, nodes) for _, _, requests, nodes in run])
                continue
            for domains, alike in itertools.groupby(run, key=lambda share: share[1]):
                view = with_assumed(view, [r for _, _, requests, _ in alike for r in requests],
                                    domains)
        self._views[cluster.name] = (cluster, uids, view)
        return view
