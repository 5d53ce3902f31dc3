"""Source discovery: walk roots, hash files, sniff their type and report unusable ones with a reason."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from rag_pipeline.atomic_file import write_atomically
from rag_pipeline.errors import ConfigError, InputError
from rag_pipeline.ingest.corpus_rules import CorpusRules, configured_rules, ignoring_pattern
from rag_pipeline.ingest.formats import Format, Head, enabled_extensions, extension_of, format_of_path
from rag_pipeline.ingest.sources import DEFAULT_SOURCE, SourceSpec
from rag_pipeline.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceFile:
    """A usable document file: its path (absolute, as found under its root), the SHA-256 of its bytes, the tags the
    corpus rules give its path and the source it was found in."""

    path: str
    root: str
    sha256: str
    size: int
    doc_type: str
    tags: tuple[str, ...] = ()
    source: str = DEFAULT_SOURCE

    @property
    def relative_path(self) -> str:
        return Path(self.path).relative_to(self.root).as_posix()


@dataclass(frozen=True)
class SourceError:
    """A file that cannot be ingested, and why."""

    path: str
    reason: str


@dataclass
class Manifest:
    """Everything discovered under the roots: usable files and refused ones."""

    files: list[SourceFile] = field(default_factory=list)
    errors: list[SourceError] = field(default_factory=list)  # refused: unusable, with the problem
    excluded: list[SourceError] = field(default_factory=list)  # left out by choice (ignore pattern, type)

    def documents(self) -> dict[str, list[SourceFile]]:
        """SHA -> every file with those bytes (identical files under several paths, or in several sources, are one
        document)."""
        by_sha: dict[str, list[SourceFile]] = {}
        for source in sorted(self.files, key=lambda f: (f.path, f.source)):
            by_sha.setdefault(source.sha256, []).append(source)
        return by_sha


def document_tags(sources: Iterable[SourceFile]) -> list[str]:
    """A document's tags: those of all its paths, sorted."""
    return sorted({tag for source in sources for tag in source.tags})


def document_paths(files: Iterable[SourceFile]) -> list[str]:
    """A document's paths, sorted, each once (a path two sources share is one path)."""
    return sorted({file.path for file in files})


def document_sources(files: Iterable[SourceFile]) -> list[str]:
    """The names of the sources that hold a document, sorted."""
    return sorted({file.source for file in files})


# Cache of (size, mtime_ns) -> sha per resolved path, so unchanged files are not re-hashed.
HashCache = dict[str, tuple[int, int, str]]
HASH_CACHE = "hash_cache.json"  # in the data dir


class RefusedFile(InputError):
    """Raised while inspecting a file that must not be ingested."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def sniff(path: Path, fmt: Format) -> None:
    """Refuse a file whose bytes do not belong to its extension's format."""
    reason = fmt.refusal(Head.read(path=path))
    if reason is not None:
        raise RefusedFile(reason)


def cached_sha(cache: HashCache, key: str, stat: os.stat_result) -> str | None:
    """The SHA-256 the hash cache holds for the file `key` while its size and mtime are still those it was hashed
    with; None when it is new or changed since."""
    cached = cache.get(key)
    return cached[2] if cached and (cached[0], cached[1]) == (stat.st_size, stat.st_mtime_ns) else None


def inspect(path: Path, root: Path, *, max_file_bytes: int, cache: HashCache | None = None) -> SourceFile:
    """Validate one candidate file (found by walking `root`, a resolved folder) and hash it; raise RefusedFile with
    a human reason."""
    fmt = format_of_path(path)
    assert fmt is not None  # walk() yields only files of an ingested type
    try:
        stat = os.lstat(path)
    except OSError as exc:
        raise RefusedFile(f"cannot read: {exc.strerror or exc}") from exc
    resolved = path  # discover() walks resolved roots without following folder symlinks: only a file symlink
    if S_ISLNK(stat.st_mode):  # needs resolving
        try:
            resolved = path.resolve(strict=True)
        except (FileNotFoundError, RuntimeError) as exc:
            raise RefusedFile(f"cannot read: broken or looping symlink ({exc.__class__.__name__})") from exc
        if not resolved.is_relative_to(root):
            raise RefusedFile(f"symlink points outside the root {root} (to {resolved})")
    try:
        if resolved is not path:
            stat = resolved.stat()
        if not S_ISREG(stat.st_mode):
            raise RefusedFile("not a regular file")
        if stat.st_size == 0:
            raise RefusedFile("empty file")
        if stat.st_size > max_file_bytes:
            raise RefusedFile(
                f"too large: {stat.st_size:,} bytes exceeds the limit of {max_file_bytes:,} bytes (RAG_MAX_FILE_BYTES)"
            )
        key = str(resolved)
        sha = cached_sha(cache, key, stat) if cache is not None else None
        if sha is None:
            sniff(resolved, fmt)
            sha = sha256_file(resolved)
            if cache is not None:
                cache[key] = (stat.st_size, stat.st_mtime_ns, sha)
    except OSError as exc:
        raise RefusedFile(f"cannot read: {exc.strerror or exc}") from exc
    return SourceFile(path=str(path), root=str(root), sha256=sha, size=stat.st_size, doc_type=fmt.doc_type)


def rule_exclusion(rules: CorpusRules, path: Path, root: Path) -> str | None:
    """The corpus rules' reason to leave the file out (unreadable files are left to inspect(), which refuses)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    fmt = format_of_path(path)
    assert fmt is not None
    return rules.exclusion(path.relative_to(root).as_posix(), fmt.doc_type, size)


def dedupe_roots(roots: Iterable[Path | str]) -> list[Path]:
    """Absolute roots with duplicates and roots nested inside another root removed."""
    unique = sorted({Path(root).expanduser().resolve() for root in roots})
    kept: list[Path] = []
    for root in unique:
        if not any(root.is_relative_to(parent) for parent in kept):
            kept.append(root)
    return kept


def walk(root: Path, ignore: Sequence[str], extensions: Sequence[str] | None
         ) -> Iterator[tuple[Path, str | None, str | None]]:
    """Every file (and ignored folder) under root as (path, refusal, exclusion): a candidate has neither; a
    refusal is a problem (a symlink leaving the root); an exclusion is a choice (an ignore pattern, a type that is
    not ingested). Directory symlinks are not followed; ignored folders are not entered."""
    wanted = enabled_extensions(extensions)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        kept_dirs = []
        for name in sorted(dirnames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            pattern = ignoring_pattern(rel, ignore) or ignoring_pattern(rel + "/", ignore)
            if pattern:
                yield here / name, None, f"folder ignored by pattern {pattern!r} (RAG_IGNORE)"
                continue
            if (here / name).is_symlink():
                target = (here / name).resolve()
                if not target.is_relative_to(root):
                    yield here / name, f"symlink points outside the root {root} (to {target})", None
                continue
            kept_dirs.append(name)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            suffix = extension_of(name)
            pattern = ignoring_pattern(rel, ignore)
            if pattern:
                yield here / name, None, f"ignored by pattern {pattern!r} (RAG_IGNORE)"
            elif suffix not in wanted:
                yield here / name, None, f"type {'.' + suffix if suffix else '(no extension)'} is not ingested " \
                                         f"(RAG_EXTENSIONS: {', '.join(sorted(wanted))})"
            else:
                yield here / name, None, None


def discover(
    roots: Iterable[Path | str],
    *,
    ignore: Sequence[str] = (),
    extensions: Sequence[str] | None = None,
    max_file_bytes: int = 50 * 1024 * 1024,
    cache: HashCache | None = None,
    rules: CorpusRules | None = None,
    source: str = DEFAULT_SOURCE,
) -> Manifest:
    """Walk every root once and return the manifest of usable, refused and excluded files (`rules`: corpus
    rules that may exclude more and tag the files they keep; `source`: the name the files are found under)."""
    manifest = Manifest()
    seen: set[Path] = set()
    for root in dedupe_roots(roots):
        if not root.is_dir():
            manifest.errors.append(SourceError(str(root), "root is not a directory"))
            continue
        for path, refusal, exclusion in walk(root, ignore, extensions):
            if path in seen:
                continue
            seen.add(path)
            if refusal:
                manifest.errors.append(SourceError(str(path), refusal))
                continue
            if exclusion is None and rules is not None:
                exclusion = rule_exclusion(rules, path, root)
            if exclusion:
                manifest.excluded.append(SourceError(str(path), exclusion))
                continue
            try:
                found = inspect(path, root, max_file_bytes=max_file_bytes, cache=cache)
            except RefusedFile as exc:
                manifest.errors.append(SourceError(str(path), str(exc)))
                continue
            if rules is not None and rules.tags:
                found = replace(found, tags=rules.tags_for(found.relative_path))
            manifest.files.append(replace(found, source=source))
    return manifest


def discover_configured(settings: Settings, roots: Sequence[str | Path] | None = None, *,
                        save_cache: bool = True) -> Manifest:
    """Discover `roots` (default: the configured roots) as the source `default` would: under RAG_CORPUS_RULES.
    The CLI's manifest (a dry run, `save_cache=False`) calls this."""
    spec = SourceSpec(DEFAULT_SOURCE, tuple(Path(root) for root in (settings.roots if roots is None else roots)),
                      configured_rules(settings.corpus_rules))
    return discover_sources(settings, [spec], save_cache=save_cache, require_roots=False)[DEFAULT_SOURCE]


def load_hash_cache(settings: Settings) -> HashCache:
    """The data dir's hash cache as the last scan left it (empty before the first)."""
    cache_path = settings.data_dir / HASH_CACHE
    if not cache_path.is_file():
        return {}
    try:
        return {path: (int(size), int(mtime_ns), str(sha))
                for path, (size, mtime_ns, sha) in json.loads(cache_path.read_text()).items()}
    except (ValueError, TypeError, AttributeError) as error:  # a cache: rebuilt by this scan
        logger.warning("%s is unreadable (%s): every file is hashed again", cache_path, error)
        return {}


def files_since_scan(settings: Settings, roots: Iterable[Path | str]) -> Iterator[tuple[Path, Format, str | None]]:
    """A look that hashes nothing, before discovery: each file under `roots` that discovery would inspect, as (path,
    format, its SHA-256 as the last scan recorded it, or None when it is new or changed since). Corpus rules are
    not applied, and an unreadable hash cache counts every file as new."""
    try:
        cache = load_hash_cache(settings)
    except OSError:
        cache = {}
    for root in dedupe_roots(roots):
        for path, refusal, exclusion in walk(root, settings.ignore, settings.extensions):
            fmt = format_of_path(path)
            if refusal or exclusion or fmt is None:
                continue
            try:
                stat = path.stat()  # a file symlink's target, which the cache is keyed by
            except OSError:
                continue
            if not 0 < stat.st_size <= settings.max_file_bytes:
                continue  # refused by discovery
            yield path, fmt, cached_sha(cache, os.path.realpath(path), stat)


def discover_sources(settings: Settings, specs: Sequence[SourceSpec], *, save_cache: bool = True,
                     require_roots: bool = True) -> dict[str, Manifest]:
    """Each source's manifest: its roots under the configured ignore patterns, extensions and size limit and the
    source's rules, re-hashing only files whose size or mtime changed since the last scan (the hash cache in the
    data dir, updated unless `save_cache` is False: a dry run writes nothing). An upload area's folder is created
    when missing. With `require_roots`, a root that is not a folder (unmounted, moved) raises ConfigError before
    anything is synced: an empty scan of it would purge the source's documents."""
    cache_path = settings.data_dir / HASH_CACHE
    cache = load_hash_cache(settings)
    manifests = {}
    for spec in specs:
        if spec.uploads:
            for root in spec.roots:
                root.mkdir(parents=True, exist_ok=True)
        missing = [str(root) for root in spec.roots if not Path(root).is_dir()]
        if missing and require_roots:
            raise ConfigError(f"source {spec.name!r}: root(s) {', '.join(missing)} not a folder (unmounted or moved?); "
                              "nothing was synced, so its documents stay as they are")
        manifests[spec.name] = discover(spec.roots, ignore=settings.ignore, extensions=settings.extensions,
                                        max_file_bytes=settings.max_file_bytes, cache=cache, rules=spec.rules,
                                        source=spec.name)
    if save_cache:
        live = {os.path.realpath(f.path) if os.path.islink(f.path) else f.path
                for manifest in manifests.values() for f in manifest.files}
        walked = tuple(str(Path(root).resolve()).rstrip("/") + "/" for spec in specs for root in spec.roots)
        kept = {path: entry for path, entry in cache.items()  # other sources' entries stay
                if path in live or not path.startswith(walked)}
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(cache_path, json.dumps(kept))  # a kill mid-write leaves the previous cache, not half of one
    return manifests
