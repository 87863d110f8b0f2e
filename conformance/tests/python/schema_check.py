"""Validates JSON instances against the vendored published schemas
(conformance/schemas/*.json) with the `jsonschema` package (draft 2020-12).

    python schema_check.py SCHEMA_DIR CASES_JSON

CASES_JSON is a list of {"label", "doc", "schema", "instance"}: `doc` names
a vendored file (openai, openresponses, anthropic), `schema` one of its
component schemas, or `*StreamingEvent` for the one schema of that suffix
whose `type` constant is the instance's (Open Responses names its event
union only inline); a case with `inline` (a JSON Schema) instead is checked
against that schema (tool arguments against the tool's parameters). A union schema (`anyOf`/`oneOf` of references, such as
a stream event union) is narrowed to the member whose `type` constant
matches the instance's `type`, so an error names the exact event schema.

Prints {"results": [{"label", "schema", "errors": [..]}], "nullable": {doc: n}}:
`nullable` counts the OpenAPI 3.0 `nullable: true` keywords translated to
a JSON Schema type union, so the translation cannot silently stop applying.
"""

import json
import pathlib
import sys

import jsonschema


def translate_nullable(node, counter):
    """`nullable: true` (OpenAPI 3.0) becomes a union with `null`."""
    if isinstance(node, list):
        return [translate_nullable(item, counter) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: translate_nullable(v, counter) for k, v in node.items()}
    if node.pop("nullable", False) is True:
        counter[0] += 1
        kind = node.get("type")
        if isinstance(kind, str):
            node["type"] = [kind, "null"]
            if "enum" in node and None not in node["enum"]:
                node["enum"] = node["enum"] + [None]
        elif isinstance(kind, list):
            if "null" not in kind:
                node["type"] = kind + ["null"]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    return node


def load(schema_dir, name, counts):
    counter = [0]
    doc = json.loads((schema_dir / f"{name}.json").read_text())
    doc = translate_nullable(doc, counter)
    counts[name] = counter[0]
    return doc


def member_for(doc, schema_name, instance):
    """The union member matching the instance's `type`, else the schema itself."""
    schemas = doc["components"]["schemas"]
    schema = schemas[schema_name]
    members = schema.get("anyOf") or schema.get("oneOf")
    if not members or not isinstance(instance, dict) or "type" not in instance:
        return schema_name, None
    for member in members:
        ref = member.get("$ref", "")
        if not ref.startswith("#/components/schemas/"):
            return schema_name, None
        name = ref.rsplit("/", 1)[1]
        kind = schemas[name].get("properties", {}).get("type", {})
        allowed = kind.get("enum") or ([kind["const"]] if "const" in kind else [])
        if instance["type"] in allowed:
            return name, None
    return schema_name, f"no member of {schema_name} has type {instance['type']!r}"


def by_suffix(doc, suffix, instance):
    """The schema named `...suffix` whose `type` constant is the instance's."""
    kind = instance.get("type") if isinstance(instance, dict) else None
    for name, schema in doc["components"]["schemas"].items():
        prop = schema.get("properties", {}).get("type", {})
        allowed = prop.get("enum") or ([prop["const"]] if "const" in prop else [])
        if name.endswith(suffix) and kind in allowed:
            return name
    return f"<no {suffix} schema for type {kind!r}>"


def main():
    schema_dir = pathlib.Path(sys.argv[1])
    cases = json.loads(pathlib.Path(sys.argv[2]).read_text())
    docs, counts, results = {}, {}, []
    for case in cases:
        if "inline" in case:
            validator = jsonschema.Draft202012Validator(case["inline"])
            errors = [e.message for e in validator.iter_errors(case["instance"])]
            results.append({"label": case["label"], "schema": "inline", "errors": errors})
            continue
        name = case["doc"]
        if name not in docs:
            docs[name] = load(schema_dir, name, counts)
        doc = docs[name]
        errors = []
        if case["schema"].startswith("*"):
            case["schema"] = by_suffix(doc, case["schema"][1:], case["instance"])
        if case["schema"] not in doc["components"]["schemas"]:
            errors.append(f"schema {case['schema']} is not in {name}.json")
            results.append({"label": case["label"], "schema": case["schema"], "errors": errors})
            continue
        schema_name, problem = member_for(doc, case["schema"], case["instance"])
        if problem:
            errors.append(problem)
        root = dict(doc)
        root["$ref"] = f"#/components/schemas/{schema_name}"
        validator = jsonschema.Draft202012Validator(root)
        for error in validator.iter_errors(case["instance"]):
            path = "/".join(str(p) for p in error.absolute_path)
            detail = error.message
            if error.context:
                best = jsonschema.exceptions.best_match(error.context)
                detail += f" (closest: {'/'.join(str(p) for p in best.absolute_path)}: {best.message})"
            errors.append(f"{path or '<root>'}: {detail}"[:600])
        results.append({"label": case["label"], "schema": schema_name, "errors": errors})
    print(json.dumps({"results": results, "nullable": counts}))


if __name__ == "__main__":
    main()
