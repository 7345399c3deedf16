#!/usr/bin/env python3
"""tools/check_manifests.py FILE.yaml...: the Kubernetes manifests of deploy/k8s checked against
the schema of their kind (tools/lint-deploy.sh runs it; yamllint checks the YAML itself).

MPIJob documents (kubeflow.org/v2beta1) are validated with python-jsonschema against the MPI
Operator's CRD schema vendored in deploy/schemas/mpijob-v2beta1.json (source and version in
deploy/schemas/README.md), made strict: every object schema that lists `properties` and says
nothing of other keys gets additionalProperties: false (kubeconform's -strict), so misspelt keys
fail. Then what the schema cannot say about these jobs:
  - slotsPerWorker equals each worker's nvidia.com/gpu limit (one rank per GPU);
  - the launcher runs the image's `launch <recipe>` with a recipe that exists in recipes/;
  - launcher and workers use the same image; the workers run sshd with the image's config.
Other kinds are refused: only MPIJobs live in deploy/k8s. Prints one line per document and
"N passed, N failed"; exit status 1 on any failure.
"""
import copy
import json
import os
import sys

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS = {("kubeflow.org/v2beta1", "MPIJob"): "deploy/schemas/mpijob-v2beta1.json"}


def strict(schema):
    """A copy where objects with properties admit no other keys (unless the schema says so)."""
    s = copy.deepcopy(schema)

    def walk(x):
        if isinstance(x, dict):
            if ("properties" in x and "additionalProperties" not in x
                    and not x.get("x-kubernetes-preserve-unknown-fields")):
                x["additionalProperties"] = False
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(s)
    return s


def load_schema(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return strict(json.load(f))


def check_mpijob(doc):
    errors = []
    spec = doc["spec"]
    slots = spec.get("slotsPerWorker", 1)
    reps = spec["mpiReplicaSpecs"]
    if set(reps) != {"Launcher", "Worker"}:
        errors.append(f"mpiReplicaSpecs has {sorted(reps)}, expected Launcher and Worker")
        return errors
    launcher = reps["Launcher"]["template"]["spec"]["containers"][0]
    worker = reps["Worker"]["template"]["spec"]["containers"][0]
    gpus = worker.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if str(gpus) != str(slots):
        errors.append(f"slotsPerWorker {slots} but the workers' nvidia.com/gpu limit is {gpus}")
    args = launcher.get("command", []) + launcher.get("args", [])
    if len(args) < 2 or args[0] != "launch":
        errors.append(f"the launcher should run the image's `launch <recipe> ...`, runs {args[:3]}")
    elif not os.path.isfile(os.path.join(ROOT, "recipes", args[1] + ".lua")):
        errors.append(f"the launcher runs recipe '{args[1]}', which is not in recipes/")
    if launcher["image"] != worker["image"]:
        errors.append(f"launcher image {launcher['image']} differs from the workers' {worker['image']}")
    if worker.get("command", [])[:1] != ["/usr/sbin/sshd"] or "/home/v100/.sshd_config" not in worker["command"]:
        errors.append("the workers should run /usr/sbin/sshd -De -f /home/v100/.sshd_config")
    if spec.get("sshAuthMountPath") != "/home/v100/.ssh":
        errors.append("sshAuthMountPath should be /home/v100/.ssh (the image's user and sshd_config)")
    return errors


def main():
    passed = failed = 0
    validators = {}
    for path in sys.argv[1:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for i, doc in enumerate(docs):
            where = f"{os.path.relpath(path, ROOT)}[{i}]"
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key not in SCHEMAS:
                print(f"FAIL {where}: no schema for {key[1]} {key[0]} (deploy/k8s holds MPIJobs)")
                failed += 1
                continue
            if key not in validators:
                schema = load_schema(SCHEMAS[key])
                jsonschema.Draft7Validator.check_schema(schema)
                validators[key] = jsonschema.Draft7Validator(schema)
            errs = [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                    for e in sorted(validators[key].iter_errors(doc), key=lambda e: list(e.absolute_path))]
            if not errs:
                errs = check_mpijob(doc)
            if errs:
                failed += 1
                for e in errs:
                    print(f"FAIL {where} {doc['metadata'].get('name')}: {e}")
            else:
                passed += 1
                print(f"ok   {where} {doc['metadata'].get('name')}: {key[1]} {key[0]}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
