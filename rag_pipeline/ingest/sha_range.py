"""A range of document SHAs: the part of its shards' documents a stage processes.

A shard holds the documents whose SHA-256 starts with its key, so a range of SHAs covers whole shards and, at
each end, part of one. Shard workers split the pending documents (ingest/plan.py, pending_work) into such ranges
of near-equal work, cut at a document rather than at a shard boundary (balanced_ranges here, defs/partitions.py
worker_ranges): two runs may then share a shard, each processing only its own side of the cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

SHA_LENGTH = 64
_BOUND = re.compile(f"[0-9a-f]{{0,{SHA_LENGTH}}}")


@dataclass(frozen=True)
class ShaRange:
    """The SHAs from `start` (included) up to `end` (excluded); "" leaves that side open. Bounds are lower-case hex
    prefixes, compared as strings, as SHA-256 hex digests order."""

    start: str = ""
    end: str = ""

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            bound = getattr(self, name)
            if not _BOUND.fullmatch(bound):
                raise ValueError(f"SHA range {name} {bound!r}: want up to {SHA_LENGTH} lower-case hex digits")
        if self.end and self.start.ljust(SHA_LENGTH, "0") >= self.end.ljust(SHA_LENGTH, "0"):  # "a".."a0": none
            raise ValueError(f"SHA range {self.start!r}..{self.end!r} is empty: its start must come before its end")

    def __contains__(self, sha: str) -> bool:
        return self.start <= sha and (not self.end or sha < self.end)

    @property
    def whole(self) -> bool:
        """Whether the range holds every SHA."""
        return not self.start and not self.end

    def meets_shard(self, shard: str) -> bool:
        """Whether some SHA of the shard (those starting with its key) lies in the range."""
        return shard.ljust(SHA_LENGTH, "f") >= self.start and (not self.end or shard.ljust(SHA_LENGTH, "0") < self.end)

    def select(self, shas: Iterable[str]) -> set[str]:
        """The SHAs that lie in the range."""
        return set(shas) if self.whole else {sha for sha in shas if sha in self}

    def to_text(self) -> str:
        """"start..end", as `parse` reads it back (a run tag)."""
        return f"{self.start}..{self.end}"

    @classmethod
    def parse(cls, text: str) -> ShaRange:
        """The range of a "start..end" text; ValueError saying what is wrong with it."""
        start, separator, end = text.partition("..")
        if not separator:
            raise ValueError(f"SHA range {text!r}: want start..end (hex, either side may be empty)")
        return cls(start, end)


ALL_DOCUMENTS = ShaRange()


def balanced_ranges(work: Mapping[str, float], parts: int) -> list[ShaRange]:
    """At most `parts` consecutive ranges that together hold every SHA, cut at documents of `work` (SHA -> its
    work, bytes say) so that each range holds a near-equal share of it: a cut falls before the document whose middle
    passes the next share. [ALL_DOCUMENTS] when there is no work to share."""
    total = sum(work.values())
    if parts < 2 or total <= 0:
        return [ALL_DOCUMENTS]
    cuts: list[str] = []
    done = 0.0  # work of the documents before this one
    for sha in sorted(work):
        weight = work[sha]
        if done and len(cuts) < parts - 1 and done + weight / 2 > total * (len(cuts) + 1) / parts:
            cuts.append(sha)
        done += weight
    return [ShaRange(start, end) for start, end in pairwise(["", *cuts, ""])]
