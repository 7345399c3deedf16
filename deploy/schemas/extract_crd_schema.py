#!/usr/bin/env python3
"""deploy/schemas/extract_crd_schema.py CRD.yaml VERSION OUT.json: the openAPIV3Schema of one
version of a CustomResourceDefinition as a JSON file, with the human-readable `description`
strings dropped (they are 40% of the bytes and validate nothing). How
deploy/schemas/mpijob-v2beta1.json was made from the MPI Operator's CRD (README.md beside this)."""
import json
import sys

import yaml


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def main():
    crd_path, version, out = sys.argv[1:4]
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    with open(out, "w") as f:
        json.dump(strip(schema), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
