"""The dry-run report of a discovery: every file with included / refused / excluded and the reason (and the
tags the corpus rules give it), plus coverage (counts and bytes by type, by top folder and by tag, largest files,
empty files) and which text files the redaction would change, before anything is converted or embedded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_pipeline.ingest.corpus_rules import CorpusRules, configured_rules, ignoring_pattern
from rag_pipeline.ingest.discover import Manifest, discover_sources
from rag_pipeline.ingest.formats import format_of
from rag_pipeline.ingest.redaction_rules import redact
from rag_pipeline.ingest.sources import DEFAULT_SOURCE, SourceSpec
from rag_pipeline.settings import DEFAULT_ROLE_EMAIL_PREFIXES, Settings

LARGEST = 10


def top_folder(path: str, roots: Sequence[str]) -> str:
    """The first folder below the file's root ("(root)" for files directly in it)."""
    for root in sorted(roots, key=len, reverse=True):
        try:
            parts = Path(path).relative_to(root).parts
        except ValueError:
            continue
        return parts[0] if len(parts) > 1 else "(root)"
    return "(outside the roots)"


def _size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None


def manifest_report(manifest: Manifest, roots: Sequence[str], *, pii_policy: str = "redact",
                    role_email_prefixes: Sequence[str] = DEFAULT_ROLE_EMAIL_PREFIXES,
                    rules: CorpusRules | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict (`rules`: the corpus rules the manifest was discovered with, to report
    tag patterns that match no included file)."""
    roots = [str(Path(root).resolve()) for root in roots]
    files = [{"path": f.path, "status": "included", "reason": "", "type": f.doc_type, "bytes": f.size,
              "tags": list(f.tags)} for f in manifest.files]
    files += [{"path": e.path, "status": "refused", "reason": e.reason, "type": Path(e.path).suffix.lstrip("."),
               "bytes": _size(e.path), "tags": []} for e in manifest.errors]
    files += [{"path": e.path, "status": "excluded", "reason": e.reason, "type": Path(e.path).suffix.lstrip("."),
               "bytes": _size(e.path), "tags": []} for e in manifest.excluded]
    included = [source.relative_path for source in manifest.files]
    unmatched = [pattern for pattern, _ in (rules.tags if rules else ())
                 if not any(ignoring_pattern(path, [pattern]) for path in included)]
    files.sort(key=lambda row: row["path"])
    by_type: dict[str, dict[str, int]] = {}
    by_folder: dict[str, dict[str, int]] = {}
    by_tag: dict[str, dict[str, int]] = {}
    for source in manifest.files:
        keys = [(by_type, source.doc_type), (by_folder, top_folder(source.path, roots))]
        keys += [(by_tag, tag) for tag in source.tags]
        for table, key in keys:
            entry = table.setdefault(key, {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += source.size
    redactions = []
    for source in manifest.files:
        if format_of(source.doc_type).is_text:
            text = Path(source.path).read_text(encoding="utf-8", errors="replace")
            counts = redact(text, pii_policy=pii_policy, role_email_prefixes=role_email_prefixes).counts
            if counts:
                redactions.append({"path": source.path, "findings": dict(sorted(counts.items()))})
    largest = sorted(manifest.files, key=lambda f: -f.size)[:LARGEST]
    return {
        "roots": roots,
        "summary": {"included": len(manifest.files), "documents": len(manifest.documents()),
                    "included_bytes": sum(f.size for f in manifest.files), "refused": len(manifest.errors),
                    "excluded": len(manifest.excluded), "would_redact": len(redactions)},
        "by_type": dict(sorted(by_type.items())),
        "by_folder": dict(sorted(by_folder.items())),
        "by_tag": dict(sorted(by_tag.items())),
        "untagged": sum(1 for f in manifest.files if not f.tags),
        "tag_patterns": len(rules.tags) if rules else 0,
        "unmatched_tag_patterns": unmatched,
        "largest": [{"path": f.path, "bytes": f.size} for f in largest],
        "empty": [e.path for e in manifest.errors if e.reason == "empty file"],
        "redactions": redactions,
        "redaction_note": "text files (md, txt, html) are scanned as they are; pdf, docx and pptx are scanned "
                          "after conversion, during ingest",
        "files": files,
    }


def configured_report(settings: Settings, roots: Sequence[str | Path] | None = None, *,
                      save_cache: bool = True, specs: Sequence[SourceSpec] | None = None) -> dict[str, Any]:
    """The report of `roots` (as the source `default`, under RAG_CORPUS_RULES; default: RAG_ROOTS) or of the
    sources `specs`, under the configured redaction policy; `save_cache=False` for a dry run that writes nothing
    (the hash cache is still read)."""
    if specs is None:
        specs = [SourceSpec(DEFAULT_SOURCE, tuple(Path(root) for root in (settings.roots if roots is None else roots)),
                            configured_rules(settings.corpus_rules))]
    manifests = discover_sources(settings, specs, save_cache=save_cache, require_roots=False)
    merged = Manifest()
    for manifest in manifests.values():
        merged.files += manifest.files
        merged.errors += manifest.errors
        merged.excluded += manifest.excluded
    rules = [spec.rules for spec in specs if spec.rules is not None]
    combined = CorpusRules(tags=tuple(pair for rule in rules for pair in rule.tags)) if rules else None
    return manifest_report(merged, [str(root) for spec in specs for root in spec.roots],
                           pii_policy=settings.pii_policy, role_email_prefixes=settings.role_email_prefixes,
                           rules=combined)


def coverage_lines(coverage: dict[str, dict[str, int]], width: int) -> list[str]:
    """One line per key of a coverage table: files and bytes."""
    return [f"  {name:{width}} {v['files']:>6} files {v['bytes']:>14,} bytes" for name, v in coverage.items()]


def format_report(report: dict[str, Any]) -> str:
    """The report as readable text: summary, coverage tables, then every file not included with its reason."""
    summary = report["summary"]
    lines = [f"{summary['included']} files included ({summary['documents']} distinct documents, "
             f"{summary['included_bytes']:,} bytes), {summary['refused']} refused, {summary['excluded']} excluded, "
             f"{summary['would_redact']} text files would be redacted", "", "by type:"]
    lines += coverage_lines(report["by_type"], 12) + ["by top folder:"] + coverage_lines(report["by_folder"], 24)
    if report["by_tag"]:
        lines += [f"by tag ({report['untagged']} files untagged):"] + coverage_lines(report["by_tag"], 24)
    if report["unmatched_tag_patterns"]:
        lines += ["tag patterns that match no included file: " + ", ".join(report["unmatched_tag_patterns"])]
    lines += ["largest:"] + [f"  {row['bytes']:>14,}  {row['path']}" for row in report["largest"]]
    if report["redactions"]:
        lines += ["would be redacted:"]
        lines += [f"  {row['path']}: " + ", ".join(f"{kind} {n}" for kind, n in row["findings"].items())
                  for row in report["redactions"]]
    left_out = [row for row in report["files"] if row["status"] != "included"]
    if left_out:
        lines += ["not included:"] + [f"  {row['status']:8} {row['path']}: {row['reason']}" for row in left_out]
    return "\n".join(lines)
