// Run pods in their own user namespace on the real kubelet (issue 56 section 3): the node's
// containerd 2.x with runc 1.2+ (tools/build-runc.sh) reports user namespaces for its default
// handler, so `--user-namespaces auto` (the default) creates every pod with `hostUsers: false`.
// A task then sees a uid_map that is not the identity, and seen from the node (this machine's
// /proc: containerd runs the pod's processes here) its processes run as host UIDs outside
// 0-65535, as does its runner; `playbook describe` says which. `off` keeps the node's user
// namespace: the same task sees the identity map and runs as its own UID on the node (what the
// checks would find without the choice).
import { readFileSync, readlinkSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectlResult,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import {
  createTestNamespace,
  deleteTestNamespace,
  marker,
  processesWithMarker,
} from "../harness/cluster-test.js";
import { importTaskImages, TASK_IMAGES } from "../harness/task-images.js";
import { startCli } from "../support/cli.js";
import { liveProcesses } from "../support/processes.js";

const IDENTITY = /^\s*0\s+0\s+4294967295\s*$/;
/** The UIDs a pod without its own user namespace may run as on the node. */
const HOST_RANGE_END = 65_535;

const { core } = clients();
const log = (message: string) => process.stderr.write(`[user-namespaces] ${message}\n`);
let namespace = "";
const controllers: RunningController[] = [];

beforeAll(async () => {
  await importTaskImages(inject("kubeconfig"), log);
  namespace = await createTestNamespace(core, "rn-userns", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace },
    spec: { allowedImages: ["playbook.test/*"] },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
});
afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  if (namespace) await deleteTestNamespace(core, namespace);
});

/** The real UID of a process as the node sees it (the first field of its status' Uid line). */
function hostUid(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "latin1");
  return Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
}

/** A task that prints its uid_map and its uid, then waits, its command line marked. */
const task = (mark: string) => `cat /proc/self/uid_map\nid -u\nsh -c 'sleep 15; : ${mark}'`;

describe.each([
  { setting: "auto", ownNamespace: true },
  { setting: "off", ownNamespace: false },
] as const)("with --user-namespaces $setting on the real node", ({ setting, ownNamespace }) => {
  beforeAll(() => {
    controllers.push(startController([namespace], { ...realNode.controller, userNamespaces: setting }));
  });
  afterAll(async () => {
    await controllers.pop()?.stop();
  });

  it.each([
    ["the runner's image", undefined],
    ["an image of its own", TASK_IMAGES.debian],
  ])(
    `a task in ${ownNamespace ? "its own user namespace" : "the node's"} (%s): its uid_map, and its processes' UIDs seen from the node`,
    async (label, image) => {
      const name = `${setting}-${image ? "image" : "runner"}`;
      const mark = marker();
      await createPlaybook(namespace, name, {
        ceiling: "2m",
        tasks: [{ name: "look", run: task(mark), ...(image ? { image } : {}) }],
      });
      const [pod] = await eventually(`pod ${name}-1`, async () => {
        const pods = await podsOf(namespace, name);
        return pods.length > 0 ? pods : undefined;
      });
      if (ownNamespace) expect(pod?.spec?.hostUsers).toBe(false);
      else expect(pod?.spec?.hostUsers).toBeUndefined();

      const pids = await eventually(
        `the task's processes with ${mark}`,
        async () => {
          const found = processesWithMarker(mark);
          return found.length > 0 ? found : undefined;
        },
        realNode.taskStartMs,
      );
      const uids = pids.map(hostUid);
      // The runner of the same pod: the pod-runner process in the task's process namespace.
      const pidNamespace = (pid: number | string) => readlinkSync(`/proc/${pid}/ns/pid`);
      const runners = liveProcesses(
        (pid) =>
          readFileSync(`/proc/${pid}/cmdline`, "latin1").includes("pod-runner") &&
          pidNamespace(pid) === pidNamespace(pids[0] ?? 0),
      );
      expect(runners.length).toBeGreaterThan(0);
      uids.push(...runners.map(hostUid));
      if (ownNamespace) {
        for (const uid of uids) expect(uid, `${label}: host UID of the task`).toBeGreaterThan(HOST_RANGE_END);
      } else {
        for (const uid of uids)
          expect(uid, `${label}: host UID of the task`).toBeLessThanOrEqual(HOST_RANGE_END);
      }

      const playbook = await waitForFinished(namespace, name, realNode.finishMs);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      const lines = taskLines(await runnerLogs(namespace, name), "look");
      const map = lines[0] ?? "";
      if (ownNamespace) expect(map).not.toMatch(IDENTITY);
      else expect(map).toMatch(IDENTITY);
      // Inside, the task is the user the pod names, whatever the node maps it to.
      const described = await startCli(["describe", name, "-n", namespace], {
        env: { KUBECONFIG: inject("kubeconfig") },
      });
      expect(described.code, described.stderr).toBe(0);
      expect(described.stdout).toContain(
        ownNamespace
          ? `Users:      own user namespace (pod ${name}-1 has hostUsers: false)`
          : `Users:      the node's user namespace (pod ${name}-1)`,
      );
      const inside = Number(lines[1]);
      if (!ownNamespace) expect(uids).toContain(inside);
      else expect(uids).not.toContain(inside);
    },
  );
});
