// README.md's "On a cluster" commands, run as a reader runs them: in bash, from a fresh build,
// through cluster:up, kubectl and cluster:down. They run in a copy of the checkout, so that the
// npm scripts' build never rewrites the dist/ that the other tests are running from.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cp, mkdtemp, rm, symlink } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { processesWithMarker } from "../harness/cluster-test.js";

const run = promisify(execFile);

/** What a checkout needs for `npm run cluster:up`; node_modules is linked, dist/ built afresh. */
const CHECKOUT = [
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "README.md",
  "src",
  "scripts",
  "test",
  "tools",
  "crds",
  "examples",
];

/** The first sh block of README.md's "On a cluster" section. */
function readmeClusterBlock(): string {
  const readme = readFileSync(path.join(repoRoot(), "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## On a cluster"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error('README.md has no sh block under "## On a cluster"');
  return block;
}

let copy: string | undefined;
let stateDir: string | undefined;

afterAll(async () => {
  if (copy && stateDir && existsSync(path.join(stateDir, "state.json"))) {
    await run(process.execPath, [path.join(copy, "dist", "scripts", "cluster-down.js")], {
      cwd: copy,
      env: { ...process.env, CLUSTER_STATE_DIR: stateDir },
    }).catch(() => {});
  }
  if (copy) await rm(copy, { recursive: true, force: true });
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

describe("README's cluster commands", () => {
  it("run as written: TaskTimeout shows in kubectl get pb, hello succeeds, cluster:down leaves nothing", async () => {
    const block = readmeClusterBlock();
    for (const command of [
      'eval "$(npm run --silent cluster:up)"',
      'export PATH="$(npm run --silent tools:bin):$PATH"',
      "kubectl apply -f examples/task-timeout.yaml",
      "kubectl get pb -w",
      "kubectl apply -f examples/hello.yaml && kubectl wait --for=condition=Succeeded pb/hello --timeout=2m",
      "npm run cluster:down",
    ]) {
      expect(block, command).toContain(command);
    }
    // `-w` watches until interrupted; a reader stops it once the run shows Failed TaskTimeout.
    const script = block.replace(
      /^kubectl get pb -w.*$/m,
      [
        "for _ in $(seq 1 90); do",
        "  kubectl get pb task-timeout --no-headers | grep -Eq '^task-timeout +Failed +TaskTimeout' && break",
        "  sleep 1",
        "done",
        "kubectl get pb task-timeout",
      ].join("\n"),
    );

    copy = await mkdtemp(path.join(os.tmpdir(), "playbook-readme-checkout-"));
    for (const entry of CHECKOUT) {
      await cp(path.join(repoRoot(), entry), path.join(copy, entry), { recursive: true });
    }
    await symlink(path.join(repoRoot(), "node_modules"), path.join(copy, "node_modules"));
    stateDir = await mkdtemp(path.join(os.tmpdir(), "playbook-readme-cluster-"));

    const result = await run("bash", ["-euo", "pipefail", "-c", script], {
      cwd: copy,
      env: { ...process.env, CLUSTER_STATE_DIR: stateDir },
      maxBuffer: 1 << 24,
    }).catch((error: { code?: number; stdout?: string; stderr?: string }) => {
      throw new Error(`README commands failed (exit ${error.code}):\n${error.stdout}\n${error.stderr}`);
    });

    expect(result.stdout).toMatch(/^task-timeout +Failed +TaskTimeout +migrate /m);
    expect(result.stdout).toContain("playbook.playbook.dev/hello condition met");
    expect(result.stderr).toContain("cluster:down: Cluster stopped");
    expect(existsSync(path.join(stateDir, "state.json"))).toBe(false);
    expect(processesWithMarker(stateDir)).toEqual([]);
  }, 600_000);
});
