#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes manifests (deploy/kubernetes/) checked without a cluster.

Usage: test_manifests.py VRAMD [MANIFEST_DIR]

Parses every manifest and checks what vramd needs of them and what ties
them together: the DaemonSet's hostPath /run/vramd holding the socket (and
so the state file beside it), hostPID, the GPUs (all of the node's, no
count fixed by a selector, a limit or the devices), the ConfigMap whose
vramd.json is valid JSON and passes `VRAMD --check-config`, mounted where
vramd reads it; readiness and liveness probes that exec `vramctl status`
on vramd's socket; a securityContext without root, capabilities or
privilege escalation; an engine pod that mounts the same socket folder,
whose uid and gids vramd's access lists and the socket's mode let in, and
that asks for no nvidia.com/gpu and sees every GPU; the metrics sidecar's port
behind the Service, and a PodMonitor that selects those pods and that
port; a NetworkPolicy that lets only the scraper (a namespace and a pod
selector, both required, set through the kustomization's patch) reach
vramd's pods, and only on the metrics port, as the file stands and as
kustomized; images without a registry host.

Then it breaks the manifests in memory, one way at a time, and checks that
each break is caught: the checks can fail. Exit status 0 when everything
holds. Needs python3-yaml.
"""
import copy
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:
    sys.exit("test_manifests: needs python3-yaml (sh scripts/deps.sh --test installs it)")

ROOT = Path(__file__).resolve().parents[2]  # the repository: its version
DEFAULT_SOCKET = "/run/vramd/vramd.sock"
DEFAULT_CONFIG = "/etc/vramd/vramd.json"
SOCKET_DIR = "/run/vramd"
GPU = "nvidia.com/gpu"
GPU_PRESENT = "nvidia.com/gpu.present"  # a GPU node, of any GPU count
EXAMPLE_ONLY = {"engine-pod.yaml"}  # applied on its own, not by kustomize


class Checks:
    def __init__(self, quiet=False):
        self.passed, self.failed, self.quiet = [], [], quiet

    def ok(self, cond, what):
        (self.passed if cond else self.failed).append(what)
        if not self.quiet:
            print(("ok   " if cond else "FAIL ") + what)
        return bool(cond)


def load(mdir):
    """{file name: [documents]} of every *.yaml in mdir."""
    files = {}
    for name in sorted(os.listdir(mdir)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(mdir, name), encoding="utf-8") as f:
                files[name] = [d for d in yaml.safe_load_all(f) if d is not None]
    return files


def objects(files, kind):
    return [d for docs in files.values() for d in docs
            if isinstance(d, dict) and d.get("kind") == kind]


def argv_of(c):
    return list(c.get("command") or []) + list(c.get("args") or [])


def prog(c):
    a = argv_of(c)
    return posixpath.basename(a[0]) if a else ""


def opt(argv, long, short=None, default=None):
    for i, a in enumerate(argv):
        if a in (long, short) and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(long + "="):
            return a.split("=", 1)[1]
    return default


def env_of(c):
    return {e.get("name"): e.get("value") for e in c.get("env") or []}


def shell_words(cmd):
    """The words of an exec command, and of a `sh -c '...'` inside it."""
    words = list(cmd)
    if len(cmd) >= 3 and posixpath.basename(cmd[0]) in ("sh", "bash") and cmd[1] == "-c":
        try:
            words += shlex.split(cmd[2])
        except ValueError:
            pass
    return words


def client_socket(argv, c):
    """The socket a vramctl, vram-replay or libvram engine uses."""
    return opt(argv, "--socket", "-s") or env_of(c).get("VRAM_SOCKET") or DEFAULT_SOCKET


def resolve(spec, c, path):
    """(volume, rest of the path inside it, mount) for path in container c."""
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[2].get("mountPath", "")):
                rest = path[len(mp):].lstrip("/")
                best = (m.get("name"), rest, m)
    if not best:
        return None, None, None
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    return vols.get(best[0]), best[1], best[2]


def host_path(spec, c, path):
    v, rest, m = resolve(spec, c, path)
    if not v or "hostPath" not in v:
        return None, v, m
    base = v["hostPath"].get("path", "")
    return (posixpath.join(base, rest) if rest else base), v, m


def configmap_key(spec, c, path):
    v, rest, m = resolve(spec, c, path)
    if not v or "configMap" not in v:
        return None, None
    key = rest
    for it in v["configMap"].get("items") or []:
        if it.get("path") == rest:
            key = it.get("key")
    return v["configMap"].get("name"), key


def ids_of(spec, c):
    """(uid, [gids]) a container's processes run with, from the pod's and
    the container's securityContext (None where the image would decide)."""
    ps, cs = spec.get("securityContext") or {}, c.get("securityContext") or {}
    uid = cs.get("runAsUser", ps.get("runAsUser"))
    gid = cs.get("runAsGroup", ps.get("runAsGroup"))
    gids = ([gid] if gid is not None else []) + list(ps.get("supplementalGroups") or [])
    return uid, gids


def sec(spec, c, key):
    cs, ps = c.get("securityContext") or {}, spec.get("securityContext") or {}
    return cs[key] if key in cs else ps.get(key)


def allowed(cfg, daemon_uid, uid, gids):
    """daemon/core/clients/access.c: may (uid, gids) connect?"""
    if uid == 0:
        return True
    acc = cfg.get("access") or {}
    if "allow" in acc:
        a = acc["allow"]
        return uid in (a.get("uids") or []) or any(g in (a.get("gids") or []) for g in gids)
    return uid == daemon_uid  # and group "vramd" by name, which a pod's gids are not


def may_open_socket(mode, owner, group, uid, gids):
    if uid == owner:
        return bool(mode & 0o200)
    if group in gids:
        return bool(mode & 0o020)
    return bool(mode & 0o002)


def labels_match(selector, labels):
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def image_host(image):
    """The registry host an image names, or None (docker's rule: the first
    path component is a host when it has a dot or a colon, or is localhost)."""
    if "/" not in image:
        return None
    first = image.split("/", 1)[0]
    return first if ("." in first or ":" in first or first == "localhost") else None


def pointer(doc, path):
    """(parent, key) of a JSON pointer (RFC 6901) in doc."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    if not parts:
        raise KeyError(f"{path}: an empty path")
    cur = doc
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    last = parts[-1]
    return cur, (int(last) if isinstance(cur, list) and last != "-" else last)


def apply_op(doc, op):
    """One RFC 6902 operation, of the kinds a kustomization's patch uses."""
    parent, key = pointer(doc, op["path"])
    kind = op.get("op")
    if kind == "replace":
        if isinstance(parent, list):
            parent[key]  # must exist
        elif key not in parent:
            raise KeyError(f"replace {op['path']}: nothing there")
        parent[key] = copy.deepcopy(op["value"])
    elif kind == "add":
        if isinstance(parent, list):
            parent.insert(len(parent) if key == "-" else key, copy.deepcopy(op["value"]))
        else:
            parent[key] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del parent[key]
    else:
        raise ValueError(f"op {kind!r}: not one this test applies")


def kustomized(files):
    """What kubectl apply -k applies: the kustomization's resources, copied,
    with its inline JSON patches applied ({file: [documents]}). A patch
    this cannot apply raises (so would kustomize)."""
    kust = objects(files, "Kustomization")[0]
    out = {r: copy.deepcopy(files[r]) for r in kust.get("resources") or [] if r in files}
    # images: what "kustomize edit set image" writes, applied as kustomize
    # does: to every container whose image has that name, tag or not.
    for im in kust.get("images") or []:
        for docs in out.values():
            for d in docs:
                for k in all_containers(pod_spec(d) or {}) if isinstance(d, dict) else []:
                    name = k.get("image", "").split("@")[0].rsplit(":", 1)[0] \
                        if ":" in k.get("image", "").split("/")[-1] else k.get("image", "")
                    if name != im.get("name"):
                        continue
                    k["image"] = (im.get("newName") or name) + \
                        (":" + str(im["newTag"]) if im.get("newTag") else "")
    for pt in kust.get("patches") or []:
        t = pt.get("target") or {}
        if "patch" not in pt or not t.get("kind"):
            raise ValueError(f"a patch this test does not apply: {pt}")
        ops = yaml.safe_load(pt["patch"])
        if not isinstance(ops, list):
            raise ValueError(f"a patch that is not a JSON patch: {pt['patch'][:60]!r}")
        hits = [d for docs in out.values() for d in docs if isinstance(d, dict)
                and d.get("kind") == t["kind"]
                and (not t.get("name") or d["metadata"].get("name") == t["name"])]
        if not hits:
            raise ValueError(f"a patch whose target {t} is no resource")
        for d in hits:
            for op in ops:
                apply_op(d, op)
    return out


def check_policy(np, pod_labels, mport, mname, c, what):
    """A NetworkPolicy that admits only a named scraper, and only to the
    metrics port of vramd's pods."""
    spec = np.get("spec") or {}
    c.ok(np.get("apiVersion") == "networking.k8s.io/v1", f"{what}: networking.k8s.io/v1")
    c.ok(labels_match((spec.get("podSelector") or {}).get("matchLabels"), pod_labels),
         f"{what}: selects vramd's pods")
    c.ok("Ingress" in (spec.get("policyTypes") or []),
         f"{what}: policyTypes has Ingress (vramd's pods refuse what it does not admit)")
    rules = spec.get("ingress") or []
    c.ok(rules, f"{what}: admits someone (the scraper)")
    for i, r in enumerate(rules):
        ports = r.get("ports") or []
        c.ok(ports and all(p.get("port") in (mport, mname) and p.get("protocol", "TCP") == "TCP"
                           for p in ports),
             f"{what}: rule {i} admits only the metrics port ({mport}, {mname}), TCP")
        peers = r.get("from") or []
        c.ok(peers, f"{what}: rule {i} names whom it admits (without 'from', everyone)")
        for j, peer in enumerate(peers):
            nsel, psel = peer.get("namespaceSelector") or {}, peer.get("podSelector") or {}
            ns, pods = nsel.get("matchLabels"), psel.get("matchLabels")
            c.ok(ns and pods and not nsel.get("matchExpressions")
                 and not psel.get("matchExpressions") and "ipBlock" not in peer,
                 f"{what}: rule {i} peer {j} is the scraper: namespace labels and pod "
                 f"labels, both (namespace {ns}, pods {pods})")


def check_scraper_set(files, c):
    """The operator sets the scraper in the kustomization: its patch reaches
    both selectors (values changed there come out in what it applies)."""
    probe = copy.deepcopy(files)
    changed = 0
    for pt in objects(probe, "Kustomization")[0].get("patches") or []:
        if (pt.get("target") or {}).get("kind") != "NetworkPolicy" or "patch" not in pt:
            continue
        ops = yaml.safe_load(pt["patch"])
        for op in ops if isinstance(ops, list) else []:
            path = op.get("path", "") if isinstance(op, dict) else ""
            if path.endswith(("namespaceSelector/matchLabels", "podSelector/matchLabels")):
                op["value"] = {"test.vramd/probe": path.split("/")[-2]}
                changed += 1
        pt["patch"] = yaml.safe_dump(ops)
    got = {}
    try:
        got = objects(kustomized(probe), "NetworkPolicy")[0]["spec"]["ingress"][0]["from"][0]
    except (KeyError, IndexError, ValueError, TypeError):
        pass
    c.ok(changed == 2
         and (got.get("namespaceSelector") or {}).get("matchLabels")
         == {"test.vramd/probe": "namespaceSelector"}
         and (got.get("podSelector") or {}).get("matchLabels")
         == {"test.vramd/probe": "podSelector"},
         "the kustomization sets the scraper: its patch replaces the NetworkPolicy's "
         "namespace and pod selectors")


def check_config_text(vramd, text, c, what):
    try:
        cfg = json.loads(text)
    except ValueError as e:
        c.ok(False, f"{what}: valid JSON ({e})")
        return None
    c.ok(isinstance(cfg, dict), f"{what}: valid JSON, an object")
    with tempfile.TemporaryDirectory(prefix="vram-k8s-") as d:
        p = os.path.join(d, "vramd.json")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([vramd, "--check-config", p], capture_output=True, text=True)
    c.ok(r.returncode == 0, f"{what}: passes vramd --check-config"
         + ("" if r.returncode == 0 else f" ({(r.stderr or r.stdout).strip()})"))
    return cfg if isinstance(cfg, dict) else None


def check(files, vramd, c):
    # Every manifest parses into objects with a kind and a name.
    for name, docs in files.items():
        c.ok(docs, f"{name}: has a document")
        for d in docs:
            c.ok(isinstance(d, dict) and d.get("apiVersion") and d.get("kind")
                 and (d.get("metadata") or {}).get("name") or d.get("kind") == "Kustomization",
                 f"{name}: apiVersion, kind and metadata.name")
    kust = objects(files, "Kustomization")
    if c.ok(len(kust) == 1, "one kustomization.yaml"):
        res = kust[0].get("resources") or []
        for r in res:
            c.ok(r in files, f"kustomization: resource {r} exists")
        for name in files:
            if name != "kustomization.yaml" and name not in EXAMPLE_ONLY:
                c.ok(name in res, f"kustomization: lists {name}")

    nss = objects(files, "Namespace")
    ns = nss[0]["metadata"]["name"] if nss else None
    c.ok(ns, "a Namespace")
    c.ok(nss and (nss[0]["metadata"].get("labels") or {}).get(
        "pod-security.kubernetes.io/enforce") == "privileged",
         "the Namespace admits hostPID and hostPath (Pod Security level privileged)")
    for d in (d for docs in files.values() for d in docs if isinstance(d, dict)):
        if d.get("kind") not in ("Namespace", "Kustomization", None):
            c.ok((d.get("metadata") or {}).get("namespace") == ns,
                 f"{d['kind']} {d['metadata'].get('name')}: in namespace {ns}")

    # Images: one placeholder everywhere, no registry host.
    images = set()
    for d in (d for docs in files.values() for d in docs if isinstance(d, dict)):
        spec = pod_spec(d)
        for k in all_containers(spec or {}):
            img = k.get("image", "")
            images.add(img)
            c.ok(img and not image_host(img),
                 f"{d['kind']} {d['metadata']['name']}/{k.get('name')}: image {img!r} "
                 "names no registry host")
    c.ok(len(images) == 1, f"one image for every container ({sorted(images)})")
    # ... this release's: what scripts/image.sh tags, named by the
    # kustomization's images entry too (the operator's knob).
    version = re.search(r"project\(vramd VERSION ([0-9.]+)",
                        (ROOT / "CMakeLists.txt").read_text()).group(1)
    c.ok(images == {f"vramd:{version}"},
         f"the manifests run vramd:{version}, the image scripts/image.sh builds ({sorted(images)})")
    kimgs = [i for i in (objects(files, "Kustomization") or [{}])[0].get("images") or []
             if i.get("name") == "vramd"]
    c.ok(len(kimgs) == 1 and str(kimgs[0].get("newTag")) == version,
         f"the kustomization's images entry for vramd sets tag {version} ({kimgs})")
    kimages = {k.get("image") for docs in kustomized(files).values() for d in docs
               if isinstance(d, dict) for k in all_containers(pod_spec(d) or {})}
    c.ok(kimages == {f"vramd:{version}"}, f"kustomized, every container runs vramd:{version} ({sorted(kimages)})")

    dss = objects(files, "DaemonSet")
    if not c.ok(len(dss) == 1 and dss[0].get("apiVersion") == "apps/v1", "one apps/v1 DaemonSet"):
        return
    ds = dss[0]
    spec = pod_spec(ds)
    pod_labels = ds["spec"]["template"]["metadata"].get("labels") or {}
    c.ok(labels_match(ds["spec"].get("selector", {}).get("matchLabels"), pod_labels),
         "DaemonSet: its selector matches its pods' labels")
    c.ok(spec.get("hostPID") is True, "DaemonSet: hostPID (vramd pins and watches "
         "engines' processes by their pids, SO_PEERCRED)")
    c.ok((spec.get("nodeSelector") or {}).get(GPU_PRESENT) == "true",
         f"DaemonSet: a node selector for GPU nodes ({GPU_PRESENT}: \"true\")")
    c.ok(any(t.get("key") == GPU for t in spec.get("tolerations") or []),
         f"DaemonSet: tolerates the {GPU} taint")
    daemons = [k for k in spec.get("containers") or [] if prog(k) == "vramd"]
    if not c.ok(len(daemons) == 1, "DaemonSet: one container runs vramd"):
        return
    vd = daemons[0]
    vargv = argv_of(vd)
    sock = opt(vargv, "--socket", "-s") or env_of(vd).get("VRAM_SOCKET") or DEFAULT_SOCKET
    c.ok(posixpath.dirname(sock) == SOCKET_DIR, f"vramd's socket {sock} is in {SOCKET_DIR}")
    hsock, hvol, hmount = host_path(spec, vd, sock)
    c.ok(hvol and hvol.get("hostPath", {}).get("path") == SOCKET_DIR,
         f"vramd's socket folder is the node's {SOCKET_DIR} (hostPath)")
    c.ok(hvol and hvol.get("hostPath", {}).get("type") in ("DirectoryOrCreate", "Directory"),
         "the socket's hostPath is a directory")
    c.ok(hmount and not hmount.get("readOnly"), "vramd's socket folder is writable to it")
    hstate, _, _ = host_path(spec, vd, sock + ".state")
    c.ok(hstate and hstate == hsock + ".state",
         "the state file beside the socket is on the node, so a restart resumes")
    uid, gids = ids_of(spec, vd)
    gid = gids[0] if gids else None
    preps = [k for k in spec.get("initContainers") or []
             if any(m.get("name") == hvol.get("name") for m in k.get("volumeMounts") or [])] \
        if hvol else []
    c.ok(any(f"{uid}:{gid}" in shell_words(argv_of(k)) for k in preps),
         f"an init container gives the socket folder to vramd's uid:gid {uid}:{gid}")

    # The configuration: where vramd reads it, valid, and checked by vramd.
    cpath = opt(vargv, "--config", "-c") or DEFAULT_CONFIG
    cmname, key = configmap_key(spec, vd, cpath)
    cms = {m["metadata"]["name"]: m for m in objects(files, "ConfigMap")}
    cfg = None
    if c.ok(cmname in cms and key in (cms[cmname].get("data") or {}),
            f"vramd's configuration {cpath} is ConfigMap {cmname} key {key}"):
        cfg = check_config_text(vramd, cms[cmname]["data"][key], c, f"ConfigMap {cmname} {key}")
    cfg = cfg or {}

    # The GPUs: every GPU of the node, counted by vramd, so that one
    # DaemonSet fits nodes of any GPU count.
    venv = env_of(vd)
    c.ok(venv.get("NVIDIA_VISIBLE_DEVICES") == "all",
         "vramd sees every GPU of its node (NVIDIA_VISIBLE_DEVICES=all)")
    for what, pspec in pod_specs(files):
        for k in all_containers(pspec):
            res = k.get("resources") or {}
            c.ok(not any(GPU in (res.get(r) or {}) for r in ("limits", "requests")),
                 f"{what}/{k.get('name')}: no {GPU} request or limit (it would fix a count)")
        c.ok(not count_terms(pspec),
             f"{what}: no node selector or affinity on a GPU count ({count_terms(pspec)})")
    c.ok(cfg.get("backend") == "host" or "devices" not in cfg,
         "the configuration lists no devices: vramd takes every GPU it sees")
    c.ok(spec.get("runtimeClassName"), "DaemonSet: a runtimeClassName (the NVIDIA runtime "
         "adds the device nodes and libcuda)")
    c.ok("compute" in (venv.get("NVIDIA_DRIVER_CAPABILITIES") or ""),
         "vramd: NVIDIA_DRIVER_CAPABILITIES has compute (libcuda)")
    for v in spec.get("volumes") or []:
        c.ok(not (v.get("hostPath", {}).get("path", "").startswith("/dev")),
             f"volume {v.get('name')}: no device node by hostPath (an unprivileged "
             "container's device cgroup refuses it)")

    # Probes: vramctl status on vramd's socket.
    for probe in ("readinessProbe", "livenessProbe"):
        cmd = ((vd.get(probe) or {}).get("exec") or {}).get("command") or []
        c.ok(cmd and posixpath.basename(cmd[0]) == "vramctl" and "status" in cmd
             and client_socket(cmd, vd) == sock,
             f"vramd's {probe} execs vramctl status on {sock}")

    # securityContext: as tight as vramd allows.
    c.ok(uid not in (None, 0) and gid is not None,
         f"vramd runs as a numeric non-root uid and gid ({uid}, {gid})")
    c.ok(sec(spec, vd, "runAsNonRoot") is True, "vramd: runAsNonRoot")
    c.ok(sec(spec, vd, "readOnlyRootFilesystem") is True, "vramd: readOnlyRootFilesystem")
    c.ok((sec(spec, vd, "seccompProfile") or {}).get("type") == "RuntimeDefault",
         "vramd: seccomp RuntimeDefault")
    caps = (vd.get("securityContext") or {}).get("capabilities") or {}
    c.ok("ALL" in (caps.get("drop") or []) and not caps.get("add"),
         "vramd: every capability dropped, none added")
    res = vd.get("resources") or {}
    c.ok((res.get("requests") or {}).get("cpu") and (res.get("requests") or {}).get("memory")
         and (res.get("limits") or {}).get("memory"),
         "vramd: CPU and memory requests, a memory limit")
    for k in all_containers(spec):
        kc = k.get("securityContext") or {}
        c.ok(kc.get("allowPrivilegeEscalation") is False and not kc.get("privileged")
             and "ALL" in ((kc.get("capabilities") or {}).get("drop") or []),
             f"DaemonSet/{k.get('name')}: unprivileged, no escalation, capabilities dropped")
        c.ok(set((kc.get("capabilities") or {}).get("add") or []) <= {"CHOWN", "FOWNER"},
             f"DaemonSet/{k.get('name')}: adds no capability beyond CHOWN, FOWNER")

    # Who may connect: the access lists and the socket's mode.
    acc = cfg.get("access") or {}
    for lst in ("allow", "admin"):
        who = acc.get(lst) or {}
        c.ok(not who.get("users") and not who.get("groups"),
             f"access.{lst}: numeric uids and gids only (names would be looked up in "
             "the container's /etc/passwd)")
    c.ok("socket_group" not in acc, "access.socket_group unset: the socket's group is "
         "vramd's gid, which clients are given")
    mode = int(acc.get("socket_mode", "0660"), 8)

    def can_connect(pspec, k, what):
        u, g = ids_of(pspec, k)
        c.ok(u is not None, f"{what}: a numeric uid")
        c.ok(allowed(cfg, uid, u, g), f"{what}: uid {u} gids {g} in vramd's access.allow")
        c.ok(may_open_socket(mode, uid, gid, u, g),
             f"{what}: uid {u} gids {g} may open the socket (mode {mode:04o}, "
             f"{uid}:{gid})")

    can_connect(spec, vd, "vramd's probes")

    # Metrics: the sidecar, the Service and the PodMonitor.
    mets = [k for k in spec.get("containers") or []
            if prog(k) == "vramctl" and "metrics" in argv_of(k)]
    mport = mname = None
    if c.ok(len(mets) == 1, "DaemonSet: a container runs vramctl metrics"):
        m = mets[0]
        listen = opt(argv_of(m), "--listen")
        c.ok(listen and ":" in listen, f"vramctl metrics --listen HOST:PORT ({listen})")
        if listen and ":" in listen:
            want = int(listen.rsplit(":", 1)[1])
            ports = [p for p in m.get("ports") or [] if p.get("containerPort") == want]
            if c.ok(ports and ports[0].get("name"),
                    f"the metrics container names its port {want}"):
                mport, mname = want, ports[0]["name"]
        c.ok(client_socket(argv_of(m), m) == sock and host_path(spec, m, sock)[0] == hsock,
             "vramctl metrics uses vramd's socket, through the same hostPath")
        can_connect(spec, m, "the metrics sidecar")
    svcs = objects(files, "Service")
    svc = None
    if c.ok(len(svcs) == 1, "a Service for the metrics"):
        svc = svcs[0]
        c.ok(labels_match(svc["spec"].get("selector"), pod_labels),
             "the Service selects vramd's pods")
        c.ok(any(p.get("port") == mport and p.get("targetPort") in (mport, mname)
                 for p in svc["spec"].get("ports") or []),
             f"the Service's port is the metrics container's ({mport}, {mname})")
    pms = objects(files, "PodMonitor")
    if c.ok(len(pms) == 1 and pms[0].get("apiVersion") == "monitoring.coreos.com/v1",
            "a monitoring.coreos.com/v1 PodMonitor"):
        pm = pms[0]
        sel = (pm["spec"].get("selector") or {}).get("matchLabels")
        c.ok(labels_match(sel, pod_labels), "the PodMonitor selects vramd's pods")
        c.ok(svc and labels_match(sel, svc["metadata"].get("labels")),
             "the PodMonitor's selector matches the Service's labels")
        eps = pm["spec"].get("podMetricsEndpoints") or []
        c.ok(eps and all(e.get("port") == mname and e.get("path", "/metrics") == "/metrics"
                         for e in eps),
             f"the PodMonitor scrapes port {mname} at /metrics")

    # The NetworkPolicy: only the scraper, only on the metrics port, as the
    # file stands and as the kustomization applies it (which sets who the
    # scraper is).
    nps = objects(files, "NetworkPolicy")
    if c.ok(len(nps) == 1, "one NetworkPolicy, for the metrics port"):
        name = nps[0]["metadata"]["name"]
        check_policy(nps[0], pod_labels, mport, mname, c, f"NetworkPolicy {name}")
        knps = []
        try:
            knps = objects(kustomized(files), "NetworkPolicy")
        except (KeyError, IndexError, ValueError, TypeError) as e:
            c.ok(False, f"the kustomization's patches apply ({type(e).__name__}: {e})")
        if c.ok(len(knps) == 1, "the kustomization applies the NetworkPolicy"):
            check_policy(knps[0], pod_labels, mport, mname, c,
                         f"NetworkPolicy {name}, kustomized")
        check_scraper_set(files, c)

    # The engine pod.
    engines = [(p, k) for p in objects(files, "Pod") for k in pod_spec(p).get("containers") or []
               if prog(k) in ("vram-replay", "vram-example-engine")]
    if not c.ok(engines, "an engine pod running vram-replay or the example engine"):
        return
    pod, eng = engines[0]
    espec = pod_spec(pod)
    esock = client_socket(argv_of(eng), eng)
    ehost, evol, _ = host_path(espec, eng, esock)
    c.ok(ehost == hsock, f"the engine's socket {esock} is vramd's on the node ({hsock})")
    c.ok(evol and evol["hostPath"].get("path") == SOCKET_DIR
         and evol["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"),
         f"the engine mounts the folder {SOCKET_DIR}, not the socket (a restarted vramd "
         "makes a new one)")
    eres = (eng.get("resources") or {})
    asks = [k for k in all_containers(espec)
            if GPU in ((k.get("resources") or {}).get("limits") or {})
            or GPU in ((k.get("resources") or {}).get("requests") or {})]
    eenv = env_of(eng)
    c.ok(not asks, f"the engine does not ask for {GPU}: it uses the GPUs vramd sees")
    c.ok(eenv.get("NVIDIA_VISIBLE_DEVICES") == "all",
         "the engine sees every GPU of the node (NVIDIA_VISIBLE_DEVICES=all), "
         "those vramd sees")
    c.ok(eenv.get("CUDA_DEVICE_ORDER") == venv.get("CUDA_DEVICE_ORDER") is not None,
         "the engine orders GPUs as vramd does (CUDA_DEVICE_ORDER)")
    c.ok("compute" in (eenv.get("NVIDIA_DRIVER_CAPABILITIES") or ""),
         "the engine: NVIDIA_DRIVER_CAPABILITIES has compute")
    c.ok(espec.get("runtimeClassName") == spec.get("runtimeClassName"),
         "the engine uses vramd's runtimeClassName")
    c.ok(all(espec.get("nodeSelector", {}).get(k) == v
             for k, v in (spec.get("nodeSelector") or {}).items()),
         "the engine is scheduled only where the DaemonSet runs (its node selector)")
    c.ok(eres.get("limits", {}).get("memory"), "the engine: a memory limit")
    for k in all_containers(espec):
        kc = k.get("securityContext") or {}
        c.ok(kc.get("allowPrivilegeEscalation") is False and not kc.get("privileged")
             and "ALL" in ((kc.get("capabilities") or {}).get("drop") or [])
             and not (kc.get("capabilities") or {}).get("add"),
             f"engine/{k.get('name')}: unprivileged, no escalation, no capability")
        if prog(k) in ("vramctl", "vram-replay", "vram-example-engine") or \
                "vramctl" in shell_words(argv_of(k)):
            can_connect(espec, k, f"engine/{k.get('name')}")
            c.ok(host_path(espec, k, client_socket(shell_words(argv_of(k)), k))[0] == hsock,
                 f"engine/{k.get('name')}: vramd's socket")
    c.ok(sec(espec, eng, "runAsNonRoot") is True, "the engine: runAsNonRoot")
    if prog(eng) == "vram-replay":
        scen = argv_of(eng)[-1]
        name, key = configmap_key(espec, eng, scen)
        c.ok(name in cms and key in (cms[name].get("data") or {})
             and "scenario" in json.loads(cms[name]["data"][key]),
             f"vram-replay's scenario {scen} is a ConfigMap key with a scenario")


def pod_spec(d):
    if not isinstance(d, dict):
        return None
    if d.get("kind") == "Pod":
        return d.get("spec") or {}
    if d.get("kind") in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        return ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def all_containers(spec):
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def pod_specs(files):
    """(kind/name, pod spec) of every workload in the manifests."""
    return [(f"{d['kind']}/{d['metadata']['name']}", pod_spec(d))
            for docs in files.values() for d in docs if pod_spec(d) is not None]


def count_terms(spec):
    """The node selector keys and affinity expressions of spec that pick
    nodes by their GPU count (GPU Feature Discovery's nvidia.com/gpu.count,
    or any other *gpu*count* label), as text."""
    def counting(key):
        k = str(key).lower()
        return "gpu" in k and "count" in k
    found = [f"nodeSelector {k}" for k in (spec.get("nodeSelector") or {}) if counting(k)]
    aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    terms = list(((aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
                  .get("nodeSelectorTerms") or []))
    terms += [p.get("preference") or {}
              for p in aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    for t in terms:
        for e in list(t.get("matchExpressions") or []) + list(t.get("matchFields") or []):
            if counting(e.get("key")):
                found.append(f"affinity {e.get('key')} {e.get('operator')}")
    return found


# Breaks, one at a time: each must make a check fail.
def _ds(f):
    return pod_spec(objects(f, "DaemonSet")[0])


def _vramd(f):
    return next(k for k in _ds(f)["containers"] if prog(k) == "vramd")


def _engine(f):
    return pod_spec(objects(f, "Pod")[0])


def _cm(f):
    return objects(f, "ConfigMap")[0]["data"]


def _kust(f):
    return objects(f, "Kustomization")[0]


def _np(f):
    return objects(f, "NetworkPolicy")[0]


def _np_rule(f):
    return _np(f)["spec"]["ingress"][0]


def _np_peer(f):
    return _np_rule(f)["from"][0]


def _np_patch(f, fn):
    pt = next(p for p in _kust(f)["patches"] if p["target"]["kind"] == "NetworkPolicy")
    ops = yaml.safe_load(pt["patch"])
    fn(ops)
    pt["patch"] = yaml.safe_dump(ops)


def _set_cfg(f, fn):
    cfg = json.loads(_cm(f)["vramd.json"])
    fn(cfg)
    _cm(f)["vramd.json"] = json.dumps(cfg)


BREAKS = [
    ("the socket's hostPath moved", lambda f: next(
        v for v in _ds(f)["volumes"] if "hostPath" in v)["hostPath"].update(path="/var/tmp/vramd")),
    ("the socket folder as an emptyDir", lambda f: _ds(f).update(volumes=[
        {"name": v["name"], "emptyDir": {}} if "hostPath" in v else v
        for v in _ds(f)["volumes"]])),
    ("no hostPID", lambda f: _ds(f).pop("hostPID")),
    ("a namespace at Pod Security baseline", lambda f: objects(f, "Namespace")[0][
        "metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "baseline"})),
    ("the GPUs not given", lambda f: _vramd(f).update(env=[
        e for e in _vramd(f)["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"])),
    ("vramd given a GPU count", lambda f: _vramd(f)["resources"]["limits"].update({GPU: 2})),
    ("the DaemonSet on nodes of one GPU count", lambda f: _ds(f)["nodeSelector"].update(
        {"nvidia.com/gpu.count": "2"})),
    ("the DaemonSet on any node", lambda f: _ds(f).pop("nodeSelector")),
    ("the engine on nodes of one GPU count, by affinity", lambda f: _engine(f).update(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.count", "operator": "In", "values": ["2"]}]}]}}})),
    ("the configuration fixing its devices", lambda f: _set_cfg(f, lambda c: c.update(
        devices=[{"id": i, "capacity": "16GiB"} for i in (0, 1)]))),
    ("a device node by hostPath", lambda f: _ds(f)["volumes"].append(
        {"name": "dev", "hostPath": {"path": "/dev/nvidiactl", "type": "CharDevice"}})),
    ("the configuration not JSON", lambda f: _cm(f).update(
        {"vramd.json": _cm(f)["vramd.json"].replace("{", "[", 1)})),
    ("a configuration vramd refuses", lambda f: _set_cfg(
        f, lambda c: c["stages"][0].update(device=7))),
    ("the configuration mounted elsewhere", lambda f: next(
        m for m in _vramd(f)["volumeMounts"] if m["name"] == "config").update(
            mountPath="/etc/vram")),
    ("engines left out of access.allow", lambda f: _set_cfg(
        f, lambda c: c["access"]["allow"].update(gids=[]))),
    ("access by group name", lambda f: _set_cfg(
        f, lambda c: c["access"]["allow"].update(groups=["vramd"]))),
    ("a readiness probe that is not vramctl status", lambda f: _vramd(f)[
        "readinessProbe"]["exec"].update(command=["true"])),
    ("a liveness probe on another socket", lambda f: _vramd(f)["livenessProbe"][
        "exec"].update(command=["vramctl", "--socket", "/tmp/x.sock", "status"])),
    ("vramd as root", lambda f: _ds(f)["securityContext"].update(runAsUser=0)),
    ("vramd privileged", lambda f: _vramd(f)["securityContext"].update(privileged=True)),
    ("vramd with a capability", lambda f: _vramd(f)["securityContext"][
        "capabilities"].update(add=["SYS_PTRACE"])),
    ("the engine's socket mount elsewhere", lambda f: _engine(f)["volumes"][0][
        "hostPath"].update(path="/run/other")),
    ("the engine mounts the socket file", lambda f: [_engine(f)["volumes"][0].update(
        hostPath={"path": "/run/vramd/vramd.sock", "type": "Socket"})] + [
        m.update(mountPath="/run/vramd/vramd.sock") for k in all_containers(_engine(f))
        for m in k["volumeMounts"] if m["name"] == "vramd-run"]),
    ("the engine without vramd's group", lambda f: _engine(f)["securityContext"].pop(
        "supplementalGroups")),
    ("the engine asks for the GPUs too", lambda f: _engine(f)["containers"][0][
        "resources"]["limits"].update({GPU: 1})),
    ("the Service on another port", lambda f: objects(f, "Service")[0]["spec"]["ports"][0]
        .update(port=9100, targetPort=9100)),
    ("the metrics sidecar on another port", lambda f: next(
        k for k in _ds(f)["containers"] if prog(k) == "vramctl")["ports"][0]
        .update(containerPort=9100)),
    ("a PodMonitor selecting other labels", lambda f: objects(f, "PodMonitor")[0][
        "spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "other"})),
    ("a PodMonitor on another port name", lambda f: objects(f, "PodMonitor")[0][
        "spec"]["podMetricsEndpoints"][0].update(port="http")),
    ("an image with a registry host", lambda f: _engine(f)["containers"][0].update(
        image="registry.example.org/vramd:VERSION")),
    ("no NetworkPolicy", lambda f: f.pop("networkpolicy.yaml")),
    ("the NetworkPolicy out of the kustomization", lambda f: _kust(f)["resources"].remove(
        "networkpolicy.yaml")),
    ("a NetworkPolicy admitting everyone", lambda f: _np_rule(f).pop("from")),
    ("a NetworkPolicy admitting every namespace", lambda f: _np_peer(f).pop(
        "namespaceSelector")),
    ("a NetworkPolicy admitting every pod of the namespace", lambda f: _np_peer(f)[
        "podSelector"].update(matchLabels={})),
    ("the scraper's selectors as two peers (either admits)", lambda f: _np_rule(f).update(
        {"from": [{"namespaceSelector": _np_peer(f)["namespaceSelector"]},
                  {"podSelector": _np_peer(f)["podSelector"]}]})),
    ("a NetworkPolicy admitting an ipBlock of everything", lambda f: _np_rule(f)[
        "from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})),
    ("a NetworkPolicy on another port", lambda f: _np_rule(f)["ports"][0].update(port=9100)),
    ("a NetworkPolicy admitting every port", lambda f: _np_rule(f).pop("ports")),
    ("a NetworkPolicy for other pods", lambda f: _np(f)["spec"]["podSelector"][
        "matchLabels"].update({"app.kubernetes.io/name": "other"})),
    ("a NetworkPolicy without Ingress", lambda f: _np(f)["spec"].update(
        policyTypes=["Egress"])),
    ("the kustomization sets an empty namespace selector", lambda f: _np_patch(
        f, lambda ops: ops[0].update(value={}))),
    ("the kustomization's patch on another path", lambda f: _np_patch(
        f, lambda ops: ops[0].update(path="/spec/ingress/1/from/0/namespaceSelector"))),
    ("the kustomization sets one selector only", lambda f: _np_patch(f, lambda ops: ops.pop())),
    ("the kustomization without its patch", lambda f: _kust(f).pop("patches")),
]


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    vramd = argv[1]
    mdir = argv[2] if len(argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "kubernetes")
    try:
        files = load(mdir)
    except yaml.YAMLError as e:
        print(f"FAIL the manifests in {mdir} parse: {e}")
        return 1
    c = Checks()
    c.ok(files, f"manifests in {mdir}")
    check(files, vramd, c)
    print(f"manifests: {len(c.passed)} passed, {len(c.failed)} failed")
    missed = []
    for what, brk in BREAKS:
        f = copy.deepcopy(files)
        brk(f)
        b = Checks(quiet=True)
        try:
            check(f, vramd, b)
        except Exception as e:  # a break that crashes the checks is caught too
            b.failed.append(f"{type(e).__name__}: {e}")
        if b.failed:
            print(f"ok   caught: {what} ({b.failed[0]})")
        else:
            print(f"FAIL not caught: {what}")
            missed.append(what)
    print(f"breaks: {len(BREAKS) - len(missed)} passed, {len(missed)} failed")
    return 1 if c.failed or missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
