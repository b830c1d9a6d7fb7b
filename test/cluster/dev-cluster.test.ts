import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { marker, processesWithMarker } from "../harness/cluster-test.js";
import { type ClusterState, readClusterState } from "../harness/control-plane.js";
import { isListening, isRunning, waitFor } from "../harness/processes.js";

const run = promisify(execFile);

// The npm scripts compile first (`tsc`), then run these; the test runs the compiled scripts that
// `npm test`'s pretest built, so it never rewrites dist/ under the runner tests running beside it.
const script = (name: string): string => {
  const file = path.join(repoRoot(), "dist", "scripts", `${name}.js`);
  if (!existsSync(file))
    throw new Error(`${file} is missing: run \`npm run build\` (npm test does it in pretest)`);
  return file;
};

describe("cluster:up and cluster:down", () => {
  let stateDir: string | undefined;
  afterAll(async () => {
    if (!stateDir) return;
    await run(process.execPath, [script("cluster-down")], {
      cwd: repoRoot(),
      env: { ...process.env, CLUSTER_STATE_DIR: stateDir },
    }).catch(() => {});
    await rm(stateDir, { recursive: true, force: true });
  });

  it("serve kubectl end to end, then leave no etcd, apiserver or node process and no listening port", async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), "playbook-cluster-up-"));
    const env = { ...process.env, CLUSTER_STATE_DIR: stateDir };
    const up = await run(process.execPath, [script("cluster-up")], { cwd: repoRoot(), env });
    const kubeconfig = path.join(stateDir, "kubeconfig");
    expect(up.stdout).toBe(`export KUBECONFIG=${kubeconfig}\n`);

    // The summary says where the controller serves /metrics and /readyz, and it answers there.
    const printed =
      /^cluster:up: Controller metrics: (http:\/\/127\.0\.0\.1:\d+)\/metrics \(health \1\/healthz, readiness \1\/readyz\)$/m.exec(
        up.stderr,
      );
    expect(printed, up.stderr).not.toBeNull();
    const controllerUrl = printed?.[1] ?? "";
    const metrics = await fetch(`${controllerUrl}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^playbook_\w+/m);
    const ready = await waitFor(
      `${controllerUrl}/readyz to answer 200`,
      async () => ((await fetch(`${controllerUrl}/readyz`)).status === 200 ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(ready).toBe(true);

    const state = (await readClusterState(stateDir)) as ClusterState;
    expect(state.processes.map((p) => p.name)).toEqual(
      expect.arrayContaining([
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "process-node",
        "controller",
      ]),
    );
    // Recorded, so the check below finds it closed after cluster:down.
    expect(state.ports["controller-metrics"]).toBe(Number(new URL(controllerUrl).port));
    const kubectl = (...args: string[]) =>
      run(path.join(state.binDir, "kubectl"), args, { env: { ...process.env, KUBECONFIG: kubeconfig } });
    const runShellPod = (name: string, ...shArgs: string[]) =>
      kubectl("run", name, "--image=busybox", "--restart=Never", "--command", "--", "sh", "-c", ...shArgs);
    await runShellPod("hello", "exit 0");
    await kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/hello", "--timeout=60s");
    const tag = marker();
    await runShellPod("sleeper", "sleep 300", tag);
    await kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=60s");

    await run(process.execPath, [script("cluster-down")], { cwd: repoRoot(), env });

    for (const recorded of state.processes) expect(isRunning(recorded), recorded.name).toBe(false);
    for (const [name, port] of Object.entries(state.ports)) expect(await isListening(port), name).toBe(false);
    // Every control-plane process and the node name the state folder in their arguments.
    expect(processesWithMarker(stateDir)).toEqual([]);
    expect(processesWithMarker(tag)).toEqual([]);
  });
});
