#!/usr/bin/env python3
"""deploy/ checked against the real binaries: the compose file and Kubernetes manifests parse and
have the structure they need; every vaultd/vaultctl flag they, the Dockerfile, the entrypoint and
the systemd unit use exists in the binaries' --help; the entrypoint's init step runs for real
(compose style and Kubernetes style, on loopback in a temp dir) and its configs pass
`vaultd --check-config`; the vault it makes serves and answers `vaultctl health` (the image's
HEALTHCHECK and the probes); the systemd unit parses, keeps the hardening the sandbox allows, and
vaultd sends READY=1 / STOPPING=1 to $NOTIFY_SOCKET as Type=notify expects.

Environment (set by ctest): VAULTD, VAULTCTL, SOURCE_DIR.
"""

import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import yaml
except ImportError:  # python3-yaml
    yaml = None

VAULTD = os.environ.get("VAULTD", "")
VAULTCTL = os.environ.get("VAULTCTL", "")
SOURCE_DIR = os.environ.get("SOURCE_DIR", "")
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
ENTRYPOINT = os.path.join(DEPLOY, "docker", "entrypoint.sh")
MAKE_SECRETS = os.path.join(DEPLOY, "k8s", "make-secrets.sh")
UNIT = os.path.join(DEPLOY, "systemd", "vaultd.service")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, env=None, check=True, timeout=120):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("%s: exit %d\nstdout:\n%s\nstderr:\n%s" %
                             (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def yaml_files():
    out = []
    for sub in ("compose", "k8s"):
        for ext in ("yml", "yaml"):
            out += glob.glob(os.path.join(DEPLOY, sub, "**", "*." + ext), recursive=True)
    return sorted(out)


def k8s_objects():
    objs = []
    for path in glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml")):
        objs += [(path, d) for d in load_yaml_docs(path)]
    return objs


def statefulset():
    (sts,) = [d for _, d in k8s_objects() if d.get("kind") == "StatefulSet"]
    return sts


def compose():
    (doc,) = load_yaml_docs(os.path.join(DEPLOY, "compose", "docker-compose.yml"))
    return doc


def vault_services(doc):
    return {n: s for n, s in doc["services"].items() if "VAULT_NAME" in s.get("environment", {})}


def env_list_to_dict(env, pod_name):
    """A container's env as a dict, with $(VAR) references expanded as the kubelet does."""
    out = {"POD_NAME": pod_name}
    for e in env:
        if "value" in e:
            out[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)),
                                    e["value"])
    return out


class Vaultd:
    """A vaultd started by the test, stopped with SIGTERM."""

    def __init__(self, args, env=None, log=None):
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=self.log)

    def wait_ready(self, ready_file, timeout=60):
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready_file):
            if self.proc.poll() is not None:
                raise AssertionError("vaultd exited %d before serving" % self.proc.returncode)
            if time.monotonic() > deadline:
                raise AssertionError("vaultd did not write %s" % ready_file)
            time.sleep(0.05)
        with open(ready_file) as f:
            return json.load(f)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class YamlStructureTest(unittest.TestCase):
    def test_every_yaml_file_parses(self):
        files = yaml_files()
        self.assertGreaterEqual(len(files), 4, files)
        for path in files:
            with self.subTest(path=path):
                self.assertTrue(load_yaml_docs(path), path)

    def test_compose_has_three_vaults_each_a_member_of_the_others(self):
        doc = compose()
        vaults = vault_services(doc)
        self.assertEqual(sorted(vaults), ["vault-a", "vault-b", "vault-c"])
        for name, svc in vaults.items():
            env = svc["environment"]
            self.assertEqual(env["VAULT_NAME"], name)
            self.assertEqual(sorted(env["VAULT_PEERS"].split()), sorted(set(vaults) - {name}))
            self.assertEqual(env["VAULT_ADVERTISE"], name + ":7701")
            self.assertEqual(svc["hostname"], name)
            self.assertEqual(env["VAULT_CA_DIR"], env["VAULT_FEDERATION_DIR"] + "/ca")
            mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
            self.assertEqual(mounts["/var/lib/vault"], name)
            self.assertEqual(mounts[env["VAULT_FEDERATION_DIR"]], "federation")
            self.assertEqual(svc["depends_on"]["federation-ca"]["condition"],
                             "service_completed_successfully")
            for volume in mounts.values():
                self.assertIn(volume, doc["volumes"])
        ca = doc["services"]["federation-ca"]
        self.assertIn("federation create-ca --dir " + vaults["vault-a"]["environment"]["VAULT_CA_DIR"],
                      " ".join(ca["command"]))
        host_ports = [p.split(":")[1] for s in vaults.values() for p in s["ports"]]
        self.assertEqual(len(set(host_ports)), 3)

    def test_statefulset_has_probes_volumes_and_declared_secrets(self):
        objs = k8s_objects()
        sts = statefulset()
        spec = sts["spec"]
        services = {d["metadata"]["name"]: d for _, d in objs if d.get("kind") == "Service"}
        self.assertIn(spec["serviceName"], services)
        self.assertEqual(services[spec["serviceName"]]["spec"]["clusterIP"], "None")
        self.assertEqual(services[spec["serviceName"]]["spec"]["selector"],
                         spec["selector"]["matchLabels"])
        self.assertEqual(spec["template"]["metadata"]["labels"], spec["selector"]["matchLabels"])
        self.assertEqual(spec["replicas"], 3)
        pod = spec["template"]["spec"]
        (main,) = pod["containers"]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            self.assertIn("exec", main[probe], probe)
        claims = [c["metadata"]["name"] for c in spec["volumeClaimTemplates"]]
        self.assertEqual(claims, ["data"])
        self.assertEqual(spec["volumeClaimTemplates"][0]["spec"]["accessModes"], ["ReadWriteOnce"])
        (init,) = pod["initContainers"]
        self.assertEqual(init["args"], ["init"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in (main, init):
            for m in c["volumeMounts"]:
                self.assertTrue(m["name"] in volumes or m["name"] in claims, m)
        self.assertNotIn("keys", [m["name"] for m in main["volumeMounts"]])
        mounted_secrets = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
        self.assertEqual(mounted_secrets, {"vault-keys", "vault-tls"})
        config_maps = {e["valueFrom"]["configMapKeyRef"]["name"]
                       for e in init["env"] if "configMapKeyRef" in e.get("valueFrom", {})}
        self.assertEqual(config_maps, {"vault-members"})
        declared = {(d["kind"], d["metadata"]["name"]) for _, d in objs if "metadata" in d}
        for s in mounted_secrets:
            self.assertIn(("Secret", s), declared)
        for c in config_maps:
            self.assertIn(("ConfigMap", c), declared)
        # The unprivileged sandbox refuses supplementary groups other than the primary one.
        sc = pod["securityContext"]
        self.assertEqual(sc["fsGroup"], sc["runAsGroup"])
        self.assertTrue(sc["runAsNonRoot"])


def logical_lines(text):
    """Lines with backslash continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", text)
    return [ln for ln in text.split("\n") if not ln.lstrip().startswith("#")]


def commands_in_yaml(node):
    """Every list of strings in a YAML document that calls vaultd or vaultctl, as one line."""
    out = []
    if isinstance(node, dict):
        for v in node.values():
            out += commands_in_yaml(v)
    elif isinstance(node, list):
        if node and all(isinstance(x, (str, int)) for x in node):
            line = " ".join(str(x) for x in node)
            if re.search(r"\bvault(d|ctl)\b", line):
                out.append(line)
        for v in node:
            out += commands_in_yaml(v)
    elif isinstance(node, str) and re.search(r"\bvault(d|ctl) ", node):
        out.append(node)
    return out


INVOCATION = re.compile(r'(?:"?\$\{?(VAULTD|VAULTCTL)\}?"?|(?:(?<=\s)|^|(?<=[\[(`=]))(?:/\S*/)?(vaultd|vaultctl))(?=\s|$)')
# What may stand right before a bare vaultd/vaultctl that runs it (rather than names it).
COMMAND_POSITION = re.compile(r'(^|\bExec\w*=|\b(CMD|RUN|exec|then|do|else)|&&|\|\||[;|(\[,]|\$\()\s*$')


def invocations(line):
    """(binary, [tokens after it]) for each vaultd/vaultctl call on a line."""
    out = []
    for m in INVOCATION.finditer(line):
        if m.group(2) and not COMMAND_POSITION.search(line[:m.start()]):
            continue
        binary = (m.group(1) or m.group(2)).lower()
        rest = re.split(r"[;|&)<>]|\$\(", line[m.end():])[0]
        try:
            tokens = shlex.split(rest)
        except ValueError:
            tokens = rest.split()
        out.append((binary, tokens))
    return out


class FlagsTest(unittest.TestCase):
    """Every flag of vaultd and vaultctl that deploy/ uses is one the binaries know."""

    GLOBAL_WITH_VALUE = {"--vault", "--config", "--tls-cert", "--tls-key", "--tls-ca",
                         "--server-name", "--timeout", "-o", "--output"}

    @classmethod
    def setUpClass(cls):
        cls.help_cache = {}

    def help_of(self, binary, path):
        key = (binary, tuple(path))
        if key not in self.help_cache:
            exe = VAULTD if binary == "vaultd" else VAULTCTL
            r = run([exe, *path, "--help"], check=False)
            self.assertEqual(r.returncode, 0, "%s %s --help: %s" % (binary, " ".join(path), r.stderr))
            self.help_cache[key] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", r.stdout))
        return self.help_cache[key]

    def sources(self):
        lines = []
        for path in (ENTRYPOINT, MAKE_SECRETS, UNIT, os.path.join(DEPLOY, "docker", "Dockerfile")):
            with open(path) as f:
                lines += [(path, ln) for ln in logical_lines(f.read())]
        for path in yaml_files():
            for doc in load_yaml_docs(path):
                lines += [(path, ln) for ln in commands_in_yaml(doc)]
        return lines

    def test_every_flag_used_exists(self):
        checked = {"vaultd": 0, "vaultctl": 0}
        for path, line in self.sources():
            for binary, tokens in invocations(line):
                flags = [t.split("=")[0] for t in tokens if re.match(r"^--?[a-zA-Z]", t)]
                subcommand = []
                if binary == "vaultctl":
                    i = 0
                    while i < len(tokens) and tokens[i] in self.GLOBAL_WITH_VALUE:
                        i += 2
                    while i < len(tokens) and re.match(r"^[a-z][a-z-]*$", tokens[i]):
                        subcommand.append(tokens[i])
                        i += 1
                if binary == "vaultctl" and not subcommand and not flags:
                    continue  # "$VAULTCTL" "$@"
                known = self.help_of(binary, []) | (self.help_of(binary, subcommand)
                                                    if subcommand else set())
                for flag in flags:
                    with self.subTest(file=os.path.relpath(path, SOURCE_DIR), line=line.strip()):
                        self.assertIn(flag, known, "%s %s: no flag %s" %
                                      (binary, " ".join(subcommand), flag))
                    checked[binary] += 1
        # The unit, entrypoint, Dockerfile, compose file, manifests and make-secrets.sh use many.
        self.assertGreaterEqual(checked["vaultd"], 8, checked)
        self.assertGreaterEqual(checked["vaultctl"], 25, checked)

    def test_build_options_in_the_dockerfile_exist(self):
        with open(os.path.join(DEPLOY, "docker", "Dockerfile")) as f:
            dockerfile = f.read()
        with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
            cmake = f.read()
        options = re.findall(r"-D(VAULT_\w+)=", dockerfile)
        self.assertEqual(sorted(options), ["VAULT_BUILD_BENCH", "VAULT_BUILD_TESTS"])
        for o in options:
            self.assertIn("option(%s " % o, cmake)
        self.assertIn('HEALTHCHECK', dockerfile)
        self.assertIn('ENTRYPOINT ["/usr/local/bin/vault-entrypoint"]', dockerfile)
        self.assertIn("deploy/docker/entrypoint.sh /out/usr/local/bin/vault-entrypoint", dockerfile)
        self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, ".dockerignore")))


class EntrypointTest(unittest.TestCase):
    """The entrypoint's init step, for real, with the real binaries, on loopback."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="deploy_artifacts_test.")
        self.vaultds = []

    def tearDown(self):
        for v in self.vaultds:
            v.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
        env.update(VAULTCTL=VAULTCTL, VAULTD=VAULTD, PATH=os.path.dirname(VAULTCTL) + ":" +
                   os.path.dirname(VAULTD) + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        env.update(extra)
        return env

    def members_of(self, conf):
        text = run([VAULTD, "--config", conf, "--print-config"]).stdout
        return dict(re.findall(r'members \{\s*name: "([^"]+)"\s*address: "[^"]+"\s*'
                               r'public_key: "([^"]+)"', text))

    def principal(self, key_file):
        return run([VAULTCTL, "key", "show", key_file]).stdout.split("\n")[0]

    def test_compose_style_three_vaults_join_each_other(self):
        doc = compose()
        vaults = vault_services(doc)
        fed = os.path.join(self.root, "federation")
        ca_cmd = doc["services"]["federation-ca"]["command"][2].replace(
            "/var/lib/vault-federation", fed).replace("vaultctl", VAULTCTL)
        run(["sh", "-c", ca_cmd])
        run(["sh", "-c", ca_cmd])  # a second run keeps the CA
        ports = {}
        procs = {}
        for name, svc in sorted(vaults.items()):
            env = {k: str(v).replace("/var/lib/vault-federation", fed)
                   for k, v in svc["environment"].items()}
            ports[name] = free_port()
            env["VAULT_ADVERTISE"] = "127.0.0.1:%d" % ports[name]
            env["VAULT_DIR"] = os.path.join(self.root, name, "node")
            env["VAULT_PEER_WAIT_SECONDS"] = "60"
            procs[name] = subprocess.Popen(["sh", ENTRYPOINT, "init"], env=self.env(**env),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
        keys = {}
        for name, p in procs.items():
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("created vault %s" % name, err)
            conf = os.path.join(self.root, name, "node", "vault.conf")
            r = run([VAULTD, "--config", conf, "--check-config"])
            self.assertEqual(r.stdout, "vaultd: config %s is valid\n" % conf)
            keys[name] = self.principal(os.path.join(self.root, name, "node", "vault.key"))
            self.assertFalse(os.path.exists(os.path.join(self.root, name, "node.entrypoint")))
        for name in vaults:
            conf = os.path.join(self.root, name, "node", "vault.conf")
            self.assertEqual(self.members_of(conf), keys)
            with open(os.path.join(self.root, name, "node", "tls", "ca.crt")) as a, \
                    open(os.path.join(fed, "ca", "ca.crt")) as b:
                self.assertEqual(a.read(), b.read())
        # A restart (init again) changes nothing.
        name = "vault-a"
        conf = os.path.join(self.root, name, "node", "vault.conf")
        with open(conf) as f:
            before = f.read()
        env = {k: str(v).replace("/var/lib/vault-federation", fed)
               for k, v in vaults[name]["environment"].items()}
        env["VAULT_DIR"] = os.path.join(self.root, name, "node")
        run(["sh", ENTRYPOINT, "init"], env=self.env(**env))
        with open(conf) as f:
            self.assertEqual(f.read(), before)

        # The default command: exec vaultd on VAULT_LISTEN; the HEALTHCHECK answers SERVING.
        env["VAULT_LISTEN"] = "127.0.0.1:%d" % ports[name]
        v = Vaultd(["sh", ENTRYPOINT], env=self.env(**env), log=os.path.join(self.root, "a.log"))
        self.vaultds.append(v)
        info = v.wait_ready(os.path.join(self.root, name, "node", "data", "vaultd.ready"))
        self.assertEqual(info["pid"], v.proc.pid)  # exec'd, not a child of the shell
        self.assertEqual(info["listen_address"], env["VAULT_LISTEN"])
        with open(os.path.join(DEPLOY, "docker", "Dockerfile")) as f:
            health = re.search(r"CMD (vaultctl .*) \|\| exit 1", f.read()).group(1)
        r = run(["sh", "-c", health.replace("vaultctl", VAULTCTL, 1)],
                env=self.env(VAULT_DIR=env["VAULT_DIR"]))
        self.assertEqual(r.stdout, "SERVING\n")
        # Over mutual TLS, as member vault-b.
        r = run([VAULTCTL, "--config", os.path.join(self.root, "vault-b", "node", "vault.conf"),
                 "--vault", env["VAULT_LISTEN"], "--server-name", name, "-o", "json", "health"])
        self.assertEqual(json.loads(r.stdout), {"service": "", "status": "SERVING"})
        self.assertEqual(v.stop(), 0)
        r = run(["sh", "-c", health.replace("vaultctl", VAULTCTL, 1)],
                env=self.env(VAULT_DIR=env["VAULT_DIR"]), check=False)
        self.assertEqual(r.returncode, 5, r.stderr)

    def test_kubernetes_style_init_container_and_probes(self):
        # The Secrets and member list, as make-secrets.sh prints them.
        ca_dir = os.path.join(self.root, "ca")
        r = run(["sh", MAKE_SECRETS, "--ca-dir", ca_dir], env=self.env())
        docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(r.stdout)}
        self.assertEqual(sorted(docs), [("ConfigMap", "vault-members"), ("Secret", "vault-keys"),
                                        ("Secret", "vault-tls")])
        members = docs[("ConfigMap", "vault-members")]["data"]["members"]
        self.assertEqual(len(members.split()), 3)
        sts = statefulset()
        pod = sts["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        (main,) = pod["containers"]
        mounts = {"/etc/vault/keys": os.path.join(self.root, "keys"),
                  "/etc/vault/tls": os.path.join(self.root, "tls"),
                  "/var/lib/vault": os.path.join(self.root, "pvc")}

        def remap(s):
            for k, v in mounts.items():
                s = s.replace(k, v)
            return s

        # The Secrets' files as the kubelet mounts them (defaultMode 0440).
        for secret, directory in (("vault-keys", "keys"), ("vault-tls", "tls")):
            os.makedirs(mounts["/etc/vault/" + directory])
            for fname, content in docs[("Secret", secret)]["stringData"].items():
                p = os.path.join(mounts["/etc/vault/" + directory], fname)
                with open(p, "w") as f:
                    f.write(content)
                os.chmod(p, 0o440)
        os.makedirs(mounts["/var/lib/vault"])
        pod_name = "vault-1"
        env = {k: remap(v) for k, v in env_list_to_dict(init["env"], pod_name).items()}
        env["VAULT_MEMBERS"] = members
        self.assertEqual(env["VAULT_ADVERTISE"], "vault-1.vault:7701")
        self.assertEqual(init["args"], ["init"])
        r = run(["sh", ENTRYPOINT, *init["args"]], env=self.env(**env))
        node = os.path.join(mounts["/var/lib/vault"], "node")
        conf = os.path.join(node, "vault.conf")
        self.assertIn("vaultd: config %s is valid" % conf, r.stderr)
        # Its identity is the one in the Secrets, and the member list is the ConfigMap's.
        want = {m.split("=")[0]: m.split("=")[2] for m in members.split()}
        self.assertEqual(self.members_of(conf), want)
        self.assertEqual(self.principal(os.path.join(node, "vault.key")), want[pod_name])
        for f in ("vault.crt", "vault.key"):
            with open(os.path.join(node, "tls", f)) as a, \
                    open(os.path.join(mounts["/etc/vault/tls"], pod_name + "." + f[6:])) as b:
                self.assertEqual(a.read(), b.read())
        self.assertEqual(os.stat(os.path.join(node, "tls", "vault.key")).st_mode & 0o777, 0o600)
        self.assertFalse(os.path.exists(os.path.join(node, "ca")))
        run(["sh", ENTRYPOINT, "init"], env=self.env(**env))  # the next pod start

        # The main container's command, on a free loopback port, then the probes.
        cmd = [remap(c) for c in main["command"]]
        cmd[cmd.index("--listen") + 1] = "127.0.0.1:%d" % free_port()
        cmd[0] = VAULTD
        v = Vaultd(cmd, env=self.env(), log=os.path.join(self.root, "vaultd.log"))
        self.vaultds.append(v)
        v.wait_ready(os.path.join(node, "data", "vaultd.ready"))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            argv = [remap(c) for c in main[probe]["exec"]["command"]]
            self.assertEqual(argv[0], "vaultctl")
            r = run([VAULTCTL, *argv[1:]], env=self.env())
            self.assertEqual(r.stdout, "SERVING\n", probe)
        self.assertEqual(v.stop(), 0)

    def test_entrypoint_refuses_to_create_without_a_name(self):
        r = run(["sh", ENTRYPOINT, "init"],
                env=self.env(VAULT_DIR=os.path.join(self.root, "x", "node")), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("VAULT_NAME is required", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, "x", "node")))

    def test_entrypoint_refuses_a_malformed_member(self):
        env = self.env(VAULT_NAME="vault-m", VAULT_DIR=os.path.join(self.root, "m", "node"),
                       VAULT_ADVERTISE="127.0.0.1:%d" % free_port(), VAULT_MEMBERS="vault-z=oops")
        r = run(["sh", ENTRYPOINT, "init"], env=env, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('VAULT_MEMBERS: "vault-z=oops" is not NAME=HOST:PORT=ed25519:HEX', r.stderr)


def parse_unit(path):
    """systemd unit syntax: [Section] headers, Key=Value lines (repeatable), # and ; comments,
    backslash continuations. {section: [(key, value)]}; ValueError on anything else."""
    sections, current = {}, None
    with open(path) as f:
        text = re.sub(r"\\\n", " ", f.read())
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        m = re.match(r"^\[([A-Za-z]+)\]$", s)
        if m:
            current = sections.setdefault(m.group(1), [])
            continue
        m = re.match(r"^([A-Za-z][A-Za-z0-9]*)=(.*)$", s)
        if not m or current is None:
            raise ValueError("%s:%d: not a unit line: %r" % (path, n, line))
        current.append((m.group(1), m.group(2).strip()))
    return sections


class SystemdUnitTest(unittest.TestCase):
    def setUp(self):
        self.unit = parse_unit(UNIT)
        self.service = dict(self.unit["Service"])

    def test_unit_is_hardened_where_the_sandbox_allows(self):
        self.assertEqual(sorted(self.unit), ["Install", "Service", "Unit"])
        s = self.service
        for key, value in (("Type", "notify"), ("User", "vault"), ("Group", "vault"),
                           ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                           ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                           ("NoNewPrivileges", "yes"), ("CapabilityBoundingSet", ""),
                           ("Delegate", "yes"), ("UMask", "0077"), ("KillSignal", "SIGTERM"),
                           ("RestartPreventExitStatus", "2 78")):
            self.assertEqual(s.get(key), value, key)
        self.assertIn("/var/lib/vault", s["ReadWritePaths"].split())
        self.assertEqual(set(s["RestrictNamespaces"].split()),
                         {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"})
        # Each of these breaks the agents' sandbox (see the unit's comment).
        for key in ("ProtectKernelTunables", "ProtectKernelLogs", "ProtectKernelModules",
                    "ProtectControlGroups", "ProtectHostname", "ProtectProc", "ProcSubset",
                    "PrivateUsers", "SystemCallFilter", "MemoryDenyWriteExecute"):
            self.assertNotIn(key, s, key)
        self.assertTrue(s["ExecStart"].startswith("/usr/local/bin/vaultd --config "))
        self.assertIn("--check-config", s["ExecStartPre"])

    def test_systemd_analyze_verify(self):
        tool = shutil.which("systemd-analyze")
        if tool is None:
            self.skipTest("systemd-analyze is not installed (the unit parser above still ran)")
        tmp = tempfile.mkdtemp(prefix="deploy_unit.")
        try:
            control = os.path.join(tmp, "vault-control.service")
            with open(control, "w") as f:
                f.write("[Service]\nType=simple\nExecStart=/bin/true\n")
            c = run([tool, "verify", "--man=no", control], check=False)
            if c.returncode != 0:
                self.skipTest("systemd-analyze verify does not work here (a trivial unit fails: "
                              "%s)" % c.stderr.strip().split("\n")[-1])
            with open(UNIT) as f:
                text = f.read().replace("/usr/local/bin/vaultd", VAULTD)
            unit = os.path.join(tmp, "vaultd.service")
            with open(unit, "w") as f:
                f.write(text)
            r = run([tool, "verify", "--man=no", unit], check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            problems = [ln for ln in r.stderr.split("\n") if "vaultd.service" in ln]
            self.assertEqual(problems, [])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_vaultd_notifies_ready_and_stopping(self):
        """Type=notify as systemd runs it: READY=1 once serving, STOPPING=1 on SIGTERM."""
        root = tempfile.mkdtemp(prefix="deploy_notify.")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            notify_path = os.path.join(root, "notify")
            notify.bind(notify_path)
            notify.settimeout(60)
            run([VAULTCTL, "init", "--name", "vault-n", "--dir", root + "/n",
                 "--listen", "127.0.0.1:%d" % free_port()])
            argv = shlex.split(self.service["ExecStart"].replace(
                "${VAULT_CONFIG}", root + "/n/vault.conf"))
            argv[0] = VAULTD
            env = {k: v for k, v in os.environ.items()}
            env["NOTIFY_SOCKET"] = notify_path
            v = Vaultd(argv, env=env, log=os.path.join(root, "vaultd.log"))
            try:
                self.assertEqual(notify.recv(4096), b"READY=1")
                self.assertTrue(os.path.exists(root + "/n/data/vaultd.ready"))
                v.proc.send_signal(signal.SIGTERM)
                self.assertEqual(notify.recv(4096), b"STOPPING=1")
            finally:
                self.assertEqual(v.stop(), 0)
        finally:
            notify.close()
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    missing = [n for n, v in (("VAULTD", VAULTD), ("VAULTCTL", VAULTCTL),
                              ("SOURCE_DIR", SOURCE_DIR)) if not v]
    if missing:
        print("deploy_artifacts_test: %s not set (run it through ctest)" % ", ".join(missing))
        sys.exit(77)
    if yaml is None:
        print("deploy_artifacts_test: python3-yaml is not installed: SKIP")
        sys.exit(77)
    unittest.main(verbosity=2)
