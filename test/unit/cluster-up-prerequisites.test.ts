// `npm run cluster:up` on a machine that lacks containerd: it stops before starting anything and
// says which command installs it, instead of starting a control plane with no node. Without root
// it stops before that, saying what to do instead.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const SCRIPT = path.join(import.meta.dirname, "../../dist/scripts/cluster-up.js");

/** A PATH with only these commands of this machine (and never containerd). */
function pathWith(dir: string, commands: string[]): string {
  const bin = path.join(dir, "bin");
  spawnSync("mkdir", ["-p", bin]);
  for (const command of commands) {
    const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], {
      encoding: "utf8",
    }).stdout.trim();
    if (found) symlinkSync(found, path.join(bin, command));
  }
  return bin;
}

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Everything the real node needs but containerd (cc -static needs as and ld too). */
const ALL_BUT_CONTAINERD = ["sh", "apt-get", "unshare", "nsenter", "ip", "openssl", "runc", "nft"];
const COMPILER = ["gcc", "cc", "as", "ld"];

const isRoot = process.getuid?.() === 0;

// As any other user, cluster:up stops at root before it looks for packages (the test below).
describe.runIf(isRoot)("cluster:up without containerd", () => {
  it.each([
    {
      name: "PLAYBOOK_NO_INSTALL=1",
      args: [],
      env: { PLAYBOOK_NO_INSTALL: "1" },
      declined: "PLAYBOOK_NO_INSTALL=1",
    },
    {
      name: "CLUSTER_NO_INSTALL=1 (deprecated)",
      args: [],
      env: { CLUSTER_NO_INSTALL: "1" },
      declined: "CLUSTER_NO_INSTALL=1",
      deprecation: true,
    },
    { name: "--no-install", args: ["--no-install"], env: {}, declined: "installing" },
  ])(
    "stops before starting anything and names the command that installs it ($name)",
    ({ args, env, declined, deprecation }) => {
      dir = mkdtempSync(path.join(tmpdir(), "playbook-prereq-"));
      const stateDir = path.join(dir, "cluster");
      const result = spawnSync(process.execPath, [SCRIPT, ...args], {
        encoding: "utf8",
        env: {
          // apt-get is there, so only the knob keeps it from installing.
          PATH: pathWith(dir, [...ALL_BUT_CONTAINERD, ...COMPILER]),
          HOME: process.env.HOME,
          CLUSTER_STATE_DIR: stateDir,
          ...env,
        },
        timeout: 60_000,
      });
      expect(result.status, result.stderr).toBe(1);
      expect(result.stdout).toBe("");
      const lines = result.stderr.split("\n").filter(Boolean);
      if (deprecation) {
        expect(lines.shift()).toBe(
          "cluster:up: CLUSTER_NO_INSTALL is deprecated: use PLAYBOOK_NO_INSTALL, which every path reads",
        );
      }
      expect(lines).toEqual([
        expect.stringMatching(
          /^cluster:up: containerd is not on PATH \(the container runtime the real kubelet drives\): install it with `(sudo )?apt-get install containerd` /,
        ),
      ]);
      expect(lines[0]).toMatch(new RegExp(`\\(not installed: ${declined} declined\\)$`));
      expect(result.stderr).not.toContain("Installing");
      // Nothing was started: no state, no logs, no binaries built.
      expect(existsSync(stateDir) ? readdirSync(stateDir) : []).toEqual([]);
    },
  );
});

describe("cluster:up without root", () => {
  it("stops before checking, installing or starting anything and says what to do instead", () => {
    dir = mkdtempSync(path.join(tmpdir(), "playbook-noroot-"));
    chmodSync(dir, 0o777);
    const stateDir = path.join(dir, "cluster");
    // As root, the same script run as nobody; as any other user, as that user.
    const command = isRoot
      ? ["setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, SCRIPT]]
      : [process.execPath, [SCRIPT]];
    const result = spawnSync(command[0] as string, command[1] as string[], {
      encoding: "utf8",
      env: { PATH: process.env.PATH, HOME: dir, CLUSTER_STATE_DIR: stateDir },
      timeout: 60_000,
    });
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    const uid = isRoot ? 65534 : process.getuid?.();
    expect(result.stderr.split("\n").filter(Boolean)).toEqual([
      `cluster:up: the dev cluster's node is Kubernetes' own kubelet with containerd, which need Linux and root; this runs as uid ${uid}, not root, so nothing was started`,
      "cluster:up: As root it runs here",
      'cluster:up: Use any cluster you have instead (kind, k3d, minikube or a real one): build and push the image and install the chart with `helm install playbook-controller charts/playbook-controller --namespace playbook-system --create-namespace --set image.registry=... --wait`, as README.md\'s "Install on your cluster" says',
    ]);
    // Nothing was started, installed or built: no state folder at all.
    expect(existsSync(stateDir)).toBe(false);
  });
});
