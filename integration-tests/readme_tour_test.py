#!/usr/bin/env python3
"""The README's tour, command by command, as written: the first ```sh block under "## A tour" is
read from README.md and run against a quickstart federation (deploy/quickstart.sh up --no-demo,
in a temporary directory on free ports). Placeholders are filled from what earlier commands
printed (the digest `cas put` gave, the agent id `agent spawn` gave, a fresh principal); paths
under run/quickstart point to the test's directory and files the tour writes go there too. Every
command must exit 0, and the ones whose outcome the README states are checked for it. The
instructions `deploy/quickstart.sh up` prints are run the same way. So neither can drift from
the code without this test failing.

Run by ctest (label integration) with VAULT_BUILD_DIR set to the build.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quickstart_test import BUILD, QUICKSTART, ROOT, VAULTCTL, free_base_port  # noqa: E402


def tour_lines():
    """The tour's commands: the first sh block after "## A tour", comments and blanks dropped."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text[text.index("## A tour"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    lines = []
    for raw in block.splitlines():
        line = raw.split(" #")[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return lines


class ReadmeTourTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vault-tour-")
        cls.dir = cls.tmp.name
        cls.env = dict(os.environ, VAULT_BUILD_DIR=BUILD, VAULT_QUICKSTART_NO_BUILD="1")
        # Stopped and removed whatever happens next (a failed or timed-out up included).
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.addClassCleanup(subprocess.run, [QUICKSTART, "down", "--dir", cls.dir], env=cls.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        up = subprocess.run([QUICKSTART, "up", "--no-demo", "--dir", cls.dir, "--base-port",
                             str(free_base_port())], env=cls.env, capture_output=True,
                            text=True, timeout=240)
        assert up.returncode == 0, up.stderr

    def run_line(self, argv, env):
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)

    def test_the_quickstart_instructions_run_as_printed(self):
        # up again (safe: nothing is recreated) prints the instructions.
        up = subprocess.run([QUICKSTART, "up", "--no-demo", "--dir", self.dir], env=self.env,
                            capture_output=True, text=True, timeout=240)
        self.assertEqual(up.returncode, 0, up.stderr)
        text = up.stdout[up.stdout.index("The federation is up."):]
        text = text[:text.index("Every command has")]
        env = dict(self.env)
        filled = {}
        lines = [l.split("  #")[0].strip() for l in text.splitlines()[1:]]
        lines = [l for l in lines if l and not l.startswith("#")]
        self.assertTrue(lines[0].startswith("export VAULT_ADDR="), lines)
        env["VAULT_ADDR"] = shlex.split(lines[0][len("export VAULT_ADDR="):])[0]
        status = subprocess.run([VAULTCTL, "-o", "json", "status"], env=env,
                                capture_output=True, text=True, timeout=60)
        if not json.loads(status.stdout)["agents_enabled"]:
            self.skipTest("agents are disabled on this machine")
        for line in lines[1:]:
            argv = shlex.split(line)
            self.assertEqual(argv[0], "vaultctl", line)
            argv[0] = VAULTCTL
            joined = " ".join(argv[1:])
            if "<agent id>" in line:
                argv = [filled["agent"] if w == "<agent" else w for w in argv if w != "id>"]
            argv = [filled.get("digest", w) if w == "sha256:<hex>/<size>" else w for w in argv]
            argv = [os.path.join(self.dir, "copy-printed") if w == "copy" else w for w in argv]
            r = self.run_line(argv, env)
            self.assertEqual(r.returncode, 0, f"printed line failed: {line}\n$ {shlex.join(argv)}"
                             f"\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
            if joined.startswith("cas put README.md"):
                filled["digest"] = r.stdout.split()[0]
            elif joined.startswith("agent spawn"):
                filled["agent"] = r.stdout.strip()
            elif joined.startswith("migrate"):
                self.assertIn("now runs on vault-b", r.stdout)
            elif joined.startswith("agent where"):
                self.assertIn("running on vault-b", r.stdout)
        self.assertIn("agent", filled)
        self.assertIn("digest", filled)

    def test_the_tour_runs_as_written(self):
        lines = tour_lines()
        self.assertEqual(lines[0], "deploy/quickstart.sh up")  # done by setUpClass
        env = dict(self.env)
        shell_vars = {}
        filled = {}  # placeholder -> value, from earlier outputs
        status = subprocess.run([VAULTCTL, "--vault",
                                 os.path.join(self.dir, "vault-a", "data", "vault.sock"), "-o",
                                 "json", "status"], capture_output=True, text=True, timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        if not json.loads(status.stdout)["agents_enabled"]:
            self.skipTest("agents are disabled on this machine")
        vault_a_key = json.loads(status.stdout)["public_key"]
        gen = subprocess.run([VAULTCTL, "-o", "json", "key", "generate", "--out",
                              os.path.join(self.dir, "tour.key")], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(gen.returncode, 0, gen.stderr)
        someone = json.loads(gen.stdout)["principal"]
        with open(os.path.join(self.dir, "big.iso"), "wb") as f:
            f.write(os.urandom(3 << 20))
        ran = []
        for line in lines[1:]:
            text = line.replace("$PWD/run/quickstart", self.dir)
            text = text.replace("run/quickstart", self.dir)
            m = re.fullmatch(r"export (\w+)=(\S+)", text)
            if m:
                env[m.group(1)] = m.group(2)
                continue
            m = re.fullmatch(r"(\w+)=(\S+)", text)
            if m:
                shell_vars[m.group(1)] = m.group(2)
                continue
            for name, value in shell_vars.items():
                text = text.replace("$" + name, value)
            argv = shlex.split(text)
            if argv[0] == "build/vaultctl/vaultctl":
                argv[0] = VAULTCTL
            words = [w for w in argv[1:] if not w.startswith("-")]
            # Placeholders and files.
            out = []
            for w in argv:
                if w == "...":
                    continue
                if w == "sha256:<hex>/<size>":
                    w = filled["digest"]
                elif w == "a-<id>":
                    w = filled["agent"]
                elif w == "ed25519:<hex>":
                    # The root a chain is verified against is its issuer, vault-a's key.
                    w = vault_a_key if words[:2] == ["cap", "verify"] else someone
                elif w in ("copy", "chain", "big.iso"):
                    w = os.path.join(self.dir, w)
                out.append(w)
            argv = out
            r = self.run_line(argv, env)
            ran.append(line)
            self.assertEqual(r.returncode, 0,
                             f"README tour line failed: {line}\n$ {shlex.join(argv)}\n"
                             f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
            joined = " ".join(words[:2])
            if joined == "cas put" and "digest" not in filled:
                first = r.stdout.splitlines()[0].split()
                self.assertEqual(first[1], "README.md", r.stdout)
                filled["digest"] = first[0]
                # A directory named with its "/": its files are "docs/x", never "docs//x".
                self.assertIn("  docs/agents.md\n", r.stdout)
                self.assertNotIn("//", r.stdout)
            elif joined == "cas get":
                with open(os.path.join(self.dir, "copy"), "rb") as got, \
                        open(os.path.join(ROOT, "README.md"), "rb") as want:
                    self.assertEqual(got.read(), want.read())
            elif joined == "agent spawn":
                filled["agent"] = r.stdout.strip()
                self.assertRegex(filled["agent"], r"^a-[0-9a-f]{16}$")
            elif joined == "agent query":
                self.assertIn('"question": ', r.stdout)
            elif words[:1] == ["migrate"]:
                self.assertIn(f"{filled['agent']} now runs on vault-b (hop 1)", r.stdout)
                self.assertIn("receipt sha256:", r.stdout)
                # The ceiling the tour set on vault-b (read-write) has no migrate grant.
                self.assertIn("narrowed away by vault-b's ceiling: migrate vault-b vault-c",
                              r.stdout)
            elif joined == "agent where":
                self.assertIn("running on vault-b", r.stdout)
            elif joined == "agent terminate":
                self.assertIn("terminated (on vault-b)", r.stdout)
        self.assertIn("$B agent terminate a-<id> --as $A", ran)
        self.assertTrue(any(l.startswith("$B migrate ") for l in ran), ran)


if __name__ == "__main__":
    unittest.main(verbosity=2)
