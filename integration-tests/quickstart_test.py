#!/usr/bin/env python3
"""The README's main job end to end: deploy/quickstart.sh brings up a three-vault federation on
loopback (in a temporary directory, on free ports), runs the mobile agent demo, and is driven
by its own status output, `vaultctl federation status` and `vaultctl agent journey`. Then `down`
stops every vault, `up` again is safe (no demo, nothing recreated), and `down` again.

Run by ctest (label integration) with VAULT_BUILD_DIR set to the build; the quickstart uses the
binaries there (VAULT_QUICKSTART_NO_BUILD=1).
"""
import json
import signal
import time
import os
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("VAULT_BUILD_DIR", os.path.join(ROOT, "build"))
QUICKSTART = os.path.join(ROOT, "deploy", "quickstart.sh")
VAULTCTL = os.path.join(BUILD, "vaultctl", "vaultctl")

# What the demo's agent must bring home (deploy/quickstart-demo.sh's lists: 3 apples, 1 bread,
# 2 plums at home; vault-b and vault-c price them at 120/250/60 and 110/255/56 cents).
REPORT = (
    "apples 3 x 120 = 360\n"
    "bread 1 x 250 = 250\n"
    "plums 2 x 60 = 120\n"
    "total 730 (priced at vault-b)\n"
    "apples 3 x 110 = 330\n"
    "bread 1 x 255 = 255\n"
    "plums 2 x 56 = 112\n"
    "total 697 (priced at vault-c)\n"
    "cheapest at vault-c: 697\n"
)


def free_base_port(count=3):
    """A port P with P..P+count-1 free on 127.0.0.1 right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65000:
            continue
        ok = True
        for p in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free run of ports")


class QuickstartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vault-quickstart-")
        cls.dir = cls.tmp.name
        cls.port = free_base_port()
        cls.env = dict(os.environ, VAULT_BUILD_DIR=BUILD, VAULT_QUICKSTART_NO_BUILD="1")

    @classmethod
    def tearDownClass(cls):
        subprocess.run([QUICKSTART, "down", "--dir", cls.dir], env=cls.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        cls.tmp.cleanup()

    def quickstart(self, *args, timeout=240):
        return subprocess.run([QUICKSTART, *args, "--dir", self.dir], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def ctl(self, vault, *args):
        sock = os.path.join(self.dir, vault, "data", "vault.sock")
        return subprocess.run([VAULTCTL, "--vault", sock, *args], capture_output=True, text=True,
                              timeout=60)

    def test_up_demo_status_down_up(self):
        up = self.quickstart("up", "--vaults", "3", "--base-port", str(self.port),
                             "--output", "json")
        self.assertEqual(up.returncode, 0, up.stderr)
        vaults = json.loads(up.stdout)
        self.assertEqual([v["name"] for v in vaults], ["vault-a", "vault-b", "vault-c"])
        for i, v in enumerate(vaults):
            self.assertTrue(v["running"], v)
            self.assertEqual(v["grpc_address"], f"127.0.0.1:{self.port + i}")
            self.assertEqual(v["admin_socket"], os.path.join(self.dir, v["name"], "data",
                                                             "vault.sock"))
            for key in ("config", "vault_key", "admin_key"):
                self.assertTrue(os.path.isfile(v[key]), (key, v[key]))
            # Prometheus metrics, on the port the status names.
            with urllib.request.urlopen(v["metrics_url"], timeout=10) as page:
                self.assertRegex(page.read().decode(), r"(?m)^vault_cas_objects \d")

        # The demo: skipped only where this machine cannot run agents (it says so).
        status = json.loads(self.ctl("vault-a", "-o", "json", "status").stdout)
        if not status["agents_enabled"]:
            self.assertIn("agents are disabled", up.stderr)
            self.skipTest("agents are disabled here: " + status["agents_disabled_reason"])
        self.assertIn("home after 3 hops", up.stderr)
        with open(os.path.join(self.dir, "demo", "report.txt")) as f:
            self.assertEqual(f.read(), REPORT)
        with open(os.path.join(self.dir, "demo", "agent")) as f:
            agent = f.read().strip()
        self.assertTrue(agent.startswith("a-"), agent)
        # Each hop was printed as it happened, ending at home.
        self.assertIn("completed", up.stderr)

        agent_status = json.loads(self.ctl("vault-a", "-o", "json", "agent", "status",
                                           agent).stdout)
        self.assertEqual(agent_status["state"], "completed")
        self.assertEqual(agent_status["hop"], 3)
        journey = self.ctl("vault-a", "-o", "json", "agent", "journey", agent)
        self.assertEqual(journey.returncode, 0, journey.stderr)
        hops = [(h["from"], h["to"]) for h in json.loads(journey.stdout)["hops"]]
        self.assertEqual(hops, [("vault-a", "vault-b"), ("vault-b", "vault-c"),
                                ("vault-c", "vault-a")])

        # The federation as vault-a sees it: both members reachable, no agent hosted anywhere now.
        fed = self.ctl("vault-a", "-o", "json", "federation", "status")
        self.assertEqual(fed.returncode, 0, fed.stdout + fed.stderr)
        view = json.loads(fed.stdout)
        self.assertEqual(view["self"]["name"], "vault-a")
        self.assertTrue(view["all_reachable"])
        self.assertEqual([m["name"] for m in view["members"]], ["vault-b", "vault-c"])
        for m in view["members"]:
            self.assertTrue(m["reachable"], m)
            self.assertEqual(m["summary"]["agents_hosted"], 0, m)
            self.assertIn("mirror_lag", m)
        self.assertEqual(view["self"]["agents"].get("COMPLETED"), 1)

        # status --output json agrees with up's.
        st = self.quickstart("status", "--output", "json")
        self.assertEqual(st.returncode, 0, st.stderr)
        self.assertEqual(json.loads(st.stdout), vaults)

        # down stops every vault; federation status from a stopped vault cannot connect.
        down = self.quickstart("down")
        self.assertEqual(down.returncode, 0, down.stderr)
        st = json.loads(self.quickstart("status", "--output", "json").stdout)
        self.assertEqual([v["running"] for v in st], [False, False, False])
        self.assertEqual(self.ctl("vault-a", "status").returncode, 5)

        # up again: the same vaults (same keys), running; a different --vaults is refused.
        refused = self.quickstart("up", "--vaults", "2", "--no-demo")
        self.assertEqual(refused.returncode, 2)
        self.assertIn("use --reset", refused.stderr)
        again = self.quickstart("up", "--no-demo", "--output", "json")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual([(v["name"], v["vault_key"], v["grpc_address"])
                          for v in json.loads(again.stdout)],
                         [(v["name"], v["vault_key"], v["grpc_address"]) for v in vaults])
        # The agent's record survived the restart.
        agent_status = json.loads(self.ctl("vault-a", "-o", "json", "agent", "status",
                                           agent).stdout)
        self.assertEqual(agent_status["state"], "completed")

        # A member down: federation status still lists it, says why, and exits 5 (unavailable).
        pid_c = [v["pid"] for v in json.loads(again.stdout) if v["name"] == "vault-c"][0]
        os.kill(pid_c, 9)
        fed = self.ctl("vault-a", "-o", "json", "federation", "status", "--member-timeout-ms",
                       "1500")
        self.assertEqual(fed.returncode, 5, fed.stdout + fed.stderr)
        view = json.loads(fed.stdout)
        self.assertFalse(view["all_reachable"])
        members = {m["name"]: m for m in view["members"]}
        self.assertTrue(members["vault-b"]["reachable"])
        self.assertFalse(members["vault-c"]["reachable"])
        self.assertIn("UNAVAILABLE", members["vault-c"]["error"])
        self.assertNotIn("mirror_lag", members["vault-c"])  # unknown while it cannot answer
        self.assertIn("mirror", members["vault-c"])          # what vault-a holds of its log
        text = self.ctl("vault-a", "federation", "status", "--member-timeout-ms", "1500")
        self.assertEqual(text.returncode, 5)
        self.assertRegex(text.stdout, r"vault-c\s+127\.0\.0\.1:\d+\s+NO")

        # A member that hangs (SIGSTOP: its socket accepts, nothing answers) holds a status call
        # up to the member deadline, but not vault-a's shutdown: SIGTERM cancels the call.
        pids = {v["name"]: v["pid"] for v in json.loads(again.stdout)}
        os.kill(pids["vault-b"], signal.SIGSTOP)
        try:
            sock = os.path.join(self.dir, "vault-a", "data", "vault.sock")
            waiting = subprocess.Popen([VAULTCTL, "--vault", sock, "-o", "json", "federation",
                                        "status", "--member-timeout-ms", "60000"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(1.5)
            self.assertIsNone(waiting.poll(), "status returned before vault-b's deadline")
            start = time.monotonic()
            os.kill(pids["vault-a"], signal.SIGTERM)
            out, err = waiting.communicate(timeout=60)
            self.assertLess(time.monotonic() - start, 15, "the status call outlived the drain")
            while time.monotonic() - start < 60:
                try:
                    os.kill(pids["vault-a"], 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            self.assertLess(time.monotonic() - start, 45, "vault-a took its time to stop")
        finally:
            os.kill(pids["vault-b"], signal.SIGCONT)
        self.assertEqual(self.quickstart("down").returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
