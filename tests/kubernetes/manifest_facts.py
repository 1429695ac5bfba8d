#!/usr/bin/python3
"""manifest_facts.py: facts of rendered manifests (kubectl kustomize's
output on stdin), one "name=value" line each, for the specs to assert
(tests/spec/kubernetes_manifests_spec.lua), and the podman flags that
reproduce the sbxd container's securityContext (--podman-flags, for
tests/e2e/image_spec.lua).  Debian's python3-yaml."""
import sys
import yaml

# securityContext settings and the podman flags that give a container the
# same; a setting not listed here fails, so the podman test cannot drift
# from the manifests silently.
def podman_flags(pod, ctr):
    flags = []
    psc, csc = pod.get("securityContext", {}), ctr.get("securityContext", {})
    for k in psc:
        if k not in ("runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup"):
            sys.exit("podman_flags: pod securityContext.%s has no podman mapping" % k)
    user = csc.get("runAsUser", psc.get("runAsUser"))
    group = csc.get("runAsGroup", psc.get("runAsGroup", user))
    if user is not None:
        flags += ["--user", "%d:%d" % (user, group)]
    if psc.get("runAsNonRoot") and not user:
        sys.exit("podman_flags: runAsNonRoot with uid 0")
    for k, v in csc.items():
        if k == "capabilities":
            for c in v.get("drop") or []:
                flags += ["--cap-drop", c]
            for c in v.get("add") or []:
                flags += ["--cap-add", c]
        elif k == "allowPrivilegeEscalation":
            if not v:
                flags += ["--security-opt", "no-new-privileges"]
        elif k == "seccompProfile":
            if v["type"] == "Unconfined":
                flags += ["--security-opt", "seccomp=unconfined"]
            elif v["type"] != "RuntimeDefault":
                sys.exit("podman_flags: seccompProfile %s" % v["type"])
        elif k == "appArmorProfile":
            if v["type"] == "Unconfined":
                flags += ["--security-opt", "apparmor=unconfined"]
            elif v["type"] != "RuntimeDefault":
                sys.exit("podman_flags: appArmorProfile %s" % v["type"])
        elif k == "procMount":
            if v == "Unmasked":
                flags += ["--security-opt", "unmask=ALL"]
        elif k == "readOnlyRootFilesystem":
            if v:
                flags += ["--read-only"]
        elif k == "privileged":
            if v:
                flags += ["--privileged"]
        elif k in ("runAsUser", "runAsGroup", "runAsNonRoot"):
            pass
        else:
            sys.exit("podman_flags: container securityContext.%s has no podman mapping" % k)
    # emptyDir volumes as tmpfs, where the container mounts them.
    empty = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    for m in ctr.get("volumeMounts", []):
        if m["name"] in empty:
            flags += ["--tmpfs", m["mountPath"]]
    return flags


def main():
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]["spec"]
    ctr = [c for c in pod["containers"] if c["name"] == "sbxd"][0]
    if "--podman-flags" in sys.argv:
        print("\n".join(podman_flags(pod, ctr)))
        return
    facts = {}
    facts["kinds"] = ",".join(sorted(d["kind"] for d in docs))
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    headless = services.get(sts["spec"]["serviceName"], {})
    facts["headless"] = headless.get("spec", {}).get("clusterIP") == "None"
    facts["client_service"] = any(s["spec"].get("clusterIP") != "None" for s in services.values())
    sel = sts["spec"]["selector"]["matchLabels"]
    facts["selector_matches"] = bool(sel) and all(
        s["spec"].get("selector") == sel for s in services.values()) and all(
        p["spec"]["selector"]["matchLabels"] == sel for p in by_kind.get("PodDisruptionBudget", []))
    facts["readiness"] = ctr["readinessProbe"]["httpGet"]["path"]
    facts["liveness"] = ctr["livenessProbe"]["httpGet"]["path"]
    facts["prestop"] = " ".join(ctr["lifecycle"]["preStop"]["exec"]["command"])
    facts["args"] = " ".join(ctr["args"])
    ann = sts["spec"]["template"]["metadata"].get("annotations", {})
    facts["prometheus"] = "%s:%s%s" % (ann.get("prometheus.io/scrape"), ann.get("prometheus.io/port"),
                                       ann.get("prometheus.io/path"))
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: vols[m["name"]] for m in ctr["volumeMounts"]}
    facts["tokens_secret"] = mounts["/etc/sbx/tokens"].get("secret", {}).get("secretName")
    cm = mounts["/etc/sbx/policy"].get("configMap", {}).get("name")
    facts["policy_configmap"] = cm
    facts["policy_key"] = ",".join(sorted(k for c in by_kind.get("ConfigMap", [])
                                          if c["metadata"]["name"] == cm for k in c["data"]))
    facts["limits"] = ",".join("%s=%s" % kv for kv in sorted(ctr["resources"].get("limits", {}).items()))
    facts["runtime_class"] = pod.get("runtimeClassName")
    facts["podman"] = " ".join(podman_flags(pod, ctr))
    for k, v in facts.items():
        print("%s=%s" % (k, v))


if __name__ == "__main__":
    main()
